"""Run a command with a folder mounted read-only (a real `EROFS` from the kernel, as on a
read-only volume or snapshot), through a private mount namespace: nothing outside the
command sees the mount.

Needs `unshare` and `mount` (util-linux) and either root or unprivileged user namespaces."""

from __future__ import annotations

import functools
import os
import subprocess
from typing import Any

import pytest
from external_tools import in_ci, require_tool

# $0: the folder; the rest: the command. The bind mount makes the folder a mount point,
# so it can be remounted read-only on its own.
_REMOUNT = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'


@functools.cache
def _namespace_prefix() -> tuple[str, ...] | None:
    unshare = require_tool("unshare")
    probe = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    # As root a plain mount namespace; otherwise a user namespace that maps us to root in it.
    for prefix in ((unshare, "-m"), (unshare, "-rm")):
        r = subprocess.run([*prefix, "sh", "-c", _REMOUNT, probe, "true"],
                           capture_output=True, timeout=30)
        if r.returncode == 0:
            return prefix
    return None


def run_on_read_only(folder: str, argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
    """`argv` run with `folder` read-only (subprocess.run's keyword arguments apply)."""
    prefix = _namespace_prefix()
    if prefix is None:
        reason = ("cannot mount a folder read-only here: `unshare -m` needs root or "
                  "unprivileged user namespaces (kernel.unprivileged_userns_clone=1)")
        if in_ci():
            pytest.fail(f"CI is set and {reason}", pytrace=False)
        pytest.skip(reason)
    return subprocess.run([*prefix, "sh", "-c", _REMOUNT, os.path.realpath(folder), *argv],
                          **kwargs)
