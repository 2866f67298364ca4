"""Event loops little-workflow made itself (`run_sync`, a Worker's threads).

On such a loop a run is all that is going on, so a World call that blocks (an fsync, a
network round trip) may be made inline when no other task shares the loop: a thread hop
would only add latency. On a loop the caller owns, their timers, callbacks and servers
would stall for the length of the call, so it goes to a thread there."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_ours: "weakref.WeakSet[asyncio.AbstractEventLoop]" = weakref.WeakSet()


def own(loop: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop:
    """Mark `loop` as one this library made and runs."""
    _ours.add(loop)
    return loop


def run_on_own_loop(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """`asyncio.run`, on a loop marked as ours."""
    with asyncio.Runner() as runner:
        own(runner.get_loop())
        return runner.run(factory())


def may_block_loop() -> bool:
    """True when blocking the running loop holds up nothing but the current task."""
    return asyncio.get_running_loop() in _ours and len(asyncio.all_tasks()) <= 1
