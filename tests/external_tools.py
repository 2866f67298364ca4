"""Programs some tests need that pip does not install: Azurite (Azure Blob emulator),
strace and headless Chromium. `bash .ci/run` installs all three.

Without CI set, a test that needs a missing one is skipped with a reason naming the program
and how to get it, so the README's test command is green on any fresh venv. With CI set
(GitHub Actions and most CI services set CI=true; `.ci/run` installs the programs first), a
missing program fails the test instead: CI must never go green by skipping."""

from __future__ import annotations

import os
import shutil

import pytest

HOW_TO_GET = {
    "azurite-blob": "npm install -g azurite@3.37 (Azure Blob emulator; needs node/npm)",
    "strace": "apt-get install -y strace",
    "chromium": "apt-get install -y chromium",
    "unshare": "apt-get install -y util-linux (read-only mounts for the read-only World tests)",
}


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require_tool(*names: str) -> str:
    """The path of the first of `names` found on PATH; otherwise skip the calling test
    (or fail it under CI) with a reason naming the program and how to install it."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    how = HOW_TO_GET.get(names[0], "see .ci/run")
    reason = f"{names[0]} is not installed: {how}, or run `bash .ci/run`, which installs it"
    if in_ci():
        pytest.fail(f"CI is set and {reason}", pytrace=False)
    pytest.skip(reason)
