"""Take the protections that keep one executor per run away, to show that a check catches
their absence.

`without_kernel_locks()`: Worlds on local files take their run locks and outer-loop
fences in the process only, as on a filesystem that has no lock across processes (two
processes may then execute one run at once; the log still fences them).
`without_log_fence()`: executions no longer stop for a newer one, and the World no longer
refuses their records — together with the first, the history of two interleaved
executions that `little verify` and a history checker must name.

Both patch this process for the duration of the `with` block (or, in a child process made
for the purpose, for its life). Never in production code.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any, Iterator

from ..world import incarnations
from ..world.kernel_locks import KernelLocks


def _acquire_nothing(self: KernelLocks, name: str, label: str) -> str:
    return uuid.uuid4().hex


def _release_nothing(self: KernelLocks, name: str, token: str) -> None:
    return None


@contextlib.contextmanager
def without_kernel_locks() -> Iterator[None]:
    """Within the block, kernel locks (local files) are not taken: run locks hold within
    the process only."""
    saved = KernelLocks.acquire, KernelLocks.release
    KernelLocks.acquire, KernelLocks.release = _acquire_nothing, _release_nothing  # type: ignore[method-assign]
    try:
        yield
    finally:
        KernelLocks.acquire, KernelLocks.release = saved  # type: ignore[method-assign]


def _check_nothing(*args: Any) -> None:
    return None


def _never(*args: Any) -> bool:
    return False


@contextlib.contextmanager
def without_log_fence() -> Iterator[None]:
    """Within the block, an execution neither stops when another one starts after it nor
    has its records refused for that (incarnations.py rules 2 and 4)."""
    saved = incarnations.check_append, incarnations.started_elsewhere
    incarnations.check_append, incarnations.started_elsewhere = _check_nothing, _never  # type: ignore[assignment]
    try:
        yield
    finally:
        incarnations.check_append, incarnations.started_elsewhere = saved
