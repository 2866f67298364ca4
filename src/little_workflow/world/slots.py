"""The World-wide step cap: at most N step functions at once, in any thread or loop.

An asyncio.Semaphore belongs to one event loop, and a World is shared by threads that
each run their own loop (a notebook gets a new loop per call). So the count lives under
a threading lock, and a waiter parks an asyncio future of its own loop, woken from
whichever thread frees a slot."""

from __future__ import annotations

import collections
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # asyncio (~60 ms) is imported where a coroutine needs it
    import asyncio


class StepSlots:
    def __init__(self, cap: int | None):
        self.cap = cap
        self._lock = threading.Lock()
        self._used = 0
        self._waiters: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = (
            collections.deque())

    @property
    def in_use(self) -> int:
        return self._used

    async def acquire(self) -> None:
        if self.cap is None:
            return
        import asyncio

        loop = asyncio.get_running_loop()
        with self._lock:
            if self._used < self.cap and not self._waiters:
                self._used += 1
                return
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, fut))
        try:
            await fut
        except asyncio.CancelledError:
            with self._lock:
                try:
                    self._waiters.remove((loop, fut))
                    granted = False
                except ValueError:
                    granted = fut.done() and not fut.cancelled()
            if granted:
                self.release()  # handed to us as we were cancelled: pass it on
            raise

    def release(self) -> None:
        if self.cap is None:
            return
        with self._lock:
            while self._waiters:
                loop, fut = self._waiters.popleft()
                if loop.is_closed():
                    continue
                # The slot passes straight to the waiter (the count stays as it is).
                try:
                    loop.call_soon_threadsafe(self._grant, fut)
                except RuntimeError:  # that loop closed meanwhile
                    continue
                return
            self._used -= 1

    def _grant(self, fut: asyncio.Future[None]) -> None:
        if fut.cancelled():
            self.release()
        else:
            fut.set_result(None)
