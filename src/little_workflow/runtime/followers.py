"""Waiting, from outside a run, for its log to grow: what a `RunHandle` waiting for the
result and a stream reader share.

A follower reads the run's log after the last event it saw, then sleeps until it is woken
or `POLL_SECONDS` pass, and reads again. What this process appends to the run (its end, a
stream record, a signal, a cancel: `waiting.announce`) wakes it at once; what another
process appends is found by the next read, within `POLL_SECONDS`. A read is one indexed
SQLite range on `local_world`, one probe of the next event's file on file and memory
Worlds, one listing of the run's events on object stores.
"""

from __future__ import annotations

import asyncio
import threading

from ..errors import RunNotFoundError
from ..world.models import Event
from ..world.protocol import WorldLike

#: How often a follower re-reads the log of a run another process appends to (seconds).
POLL_SECONDS = 0.25


class Wakeup:
    """Set from any thread by `waiting.announce`; a follower in a thread blocks on it."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def notify(self) -> None:
        self._event.set()

    def clear(self) -> None:
        self._event.clear()

    def wait(self, seconds: float) -> None:
        self._event.wait(seconds)


class AsyncWakeup:
    """The same for a follower on an event loop (made on that loop)."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    def notify(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._event.set)
        except RuntimeError:  # the follower's loop is closed: nobody waits any more
            pass

    def clear(self) -> None:
        self._event.clear()

    async def wait(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._event.wait(), seconds)
        except TimeoutError:
            pass


def read_log_after(world: WorldLike, run_id: str, after: int) -> list[Event]:
    """The run's events after `after`; `RunNotFoundError` when a whole-log read finds no
    run (no `run.created` first)."""
    events = world.list_events(run_id, after=after)
    if after == 0 and (not events or events[0].type != "run.created"):
        raise RunNotFoundError(run_id, f" in {world.data_dir}")
    return events


async def aread_log_after(world: WorldLike, run_id: str, after: int) -> list[Event]:
    """`read_log_after` off the event loop where the World's reads may block (local disk,
    object stores)."""
    if world.blocking:
        return await asyncio.to_thread(read_log_after, world, run_id, after)
    return read_log_after(world, run_id, after)
