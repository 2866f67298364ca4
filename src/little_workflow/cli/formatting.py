"""How `little` commands print: JSON for `--json`, rich tables for people, and values
as stored (spilled parts read back)."""

from __future__ import annotations

import json
from typing import Any

import click

from ..world.protocol import WorldLike


def stored_value(world: WorldLike, value: Any, ref: str | None = None) -> Any:
    # The runtime (asyncio, pydantic) loads with the first value shown, not with every
    # `little` command.
    from ..runtime.values import stored_value as read_back

    return read_back(world, value, ref)


def rich_console() -> Any:
    from rich.console import Console

    return Console()


def dump_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))
