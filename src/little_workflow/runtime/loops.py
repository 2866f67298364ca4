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

#: Each loop of ours -> the tasks made on it (its task factory notes them). asyncio's
#: all_tasks() walks the tasks of every loop in the process, finished ones not yet
#: collected included: with a worker's threads each on its loop, that walk was most of
#: the cost of the check every durable append makes.
_ours: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.WeakSet[asyncio.Future[Any]]]" = (
    weakref.WeakKeyDictionary())


def own(loop: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop:
    """Mark `loop` as one this library made and runs."""
    if loop in _ours:
        return loop
    tasks: weakref.WeakSet[asyncio.Future[Any]] = weakref.WeakSet()
    previous = loop.get_task_factory()

    def noting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Future[Any]:
        task = (previous(loop, coro, **kwargs) if previous is not None
                else asyncio.Task(coro, loop=loop, **kwargs))
        tasks.add(task)
        return task

    loop.set_task_factory(noting)
    _ours[loop] = tasks
    return loop


def run_on_own_loop(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """`asyncio.run`, on a loop marked as ours."""
    with asyncio.Runner() as runner:
        own(runner.get_loop())
        return runner.run(factory())


def may_block_loop() -> bool:
    """True when blocking the running loop holds up nothing but the current task."""
    tasks = _ours.get(asyncio.get_running_loop())
    if tasks is None:
        return False
    unfinished = 0
    for task in tasks:
        if not task.done():
            unfinished += 1
            if unfinished > 1:
                return False
    return True
