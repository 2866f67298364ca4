"""`little`: a thin shell over the public API, one module per group of commands.
User mistakes print one line, exit 1."""

from __future__ import annotations

from .app import cli, main

__all__ = ["cli", "main"]
