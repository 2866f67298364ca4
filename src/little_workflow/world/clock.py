"""Where a World's time comes from: wake times, deadlines, every `createdAt`.

`SystemClock` reads `time.time()`. `FakeClock` is moved by hand (`advance`), and moving it
wakes whoever sleeps on it, so tests of hour-long timers take no real time. A sleeper that
nobody wakes within `stall_seconds` of real time gets `ClockStalledError` (it would
otherwise block a test forever).
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:  # asyncio (~60 ms) is imported where a coroutine needs it
    import asyncio

from ..errors import ClockStalledError


class Clock(Protocol):
    def now(self) -> float:
        """Epoch seconds."""
        ...

    async def sleep_until(self, when: float) -> None:
        """Return once `now() >= when` (at once when it already is)."""
        ...


class SystemClock:
    """Wall-clock time."""

    def now(self) -> float:
        return time.time()

    async def sleep_until(self, when: float) -> None:
        # Re-check after each sleep: the event loop's timer can fire a little early.
        while True:
            left = when - time.time()
            if left <= 0:
                return
            import asyncio

            await asyncio.sleep(left)

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()


class FakeClock:
    """A clock that moves only when told: `FakeClock(start=1_700_000_000.0)`,
    `.now()`, `.advance(seconds)`. Advancing wakes every sleeper now due, in any thread
    or event loop."""

    def __init__(self, start: float = 1_700_000_000.0, *, stall_seconds: float | None = 10.0):
        self._now = float(start)
        self._lock = threading.Lock()
        # A sleeper left this long (real time) with no advance() raises ClockStalledError
        # instead of blocking forever (a run without suspend=True in a test). None: never.
        self.stall_seconds = stall_seconds
        self._advanced_at = time.monotonic()
        self._sleepers: list[tuple[float, asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._wakers: list[tuple[float, threading.Event]] = []

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a FakeClock only moves forward")
        with self._lock:
            self._now += seconds
            self._advanced_at = time.monotonic()
            now = self._now
            due = [s for s in self._sleepers if s[0] <= now]
            self._sleepers = [s for s in self._sleepers if s[0] > now]
            rung = [w for w in self._wakers if w[0] <= now]
            self._wakers = [w for w in self._wakers if w[0] > now]
        for _, event in rung:
            event.set()
        for _, loop, fut in due:
            try:
                loop.call_soon_threadsafe(_resolve, fut)
            except RuntimeError:  # that loop is closed: nobody waits any more
                pass
        return now

    def wake_at(self, when: float, event: threading.Event) -> Callable[[], None]:
        """Set `event` once the clock reaches `when` (now, when it has): a thread that
        waits on it for a real-time timeout counted in this clock's seconds is woken
        by the `advance` that reaches `when`. Returns what cancels it."""
        entry = (when, event)
        with self._lock:
            reached = when <= self._now
            if not reached:
                self._wakers.append(entry)
        if reached:
            event.set()

        def cancel() -> None:
            with self._lock:
                if entry in self._wakers:
                    self._wakers.remove(entry)

        return cancel

    def set(self, when: float) -> float:
        """Move to `when` (never backwards)."""
        return self.advance(max(0.0, when - self.now()))

    async def sleep_until(self, when: float) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if when <= self._now:
                return
            entry = (when, loop, fut)
            self._sleepers.append(entry)
        began = time.monotonic()
        try:
            if self.stall_seconds is None:
                return await fut
            while True:
                quiet_since = max(began, self._advanced_at)
                left = quiet_since + self.stall_seconds - time.monotonic()
                if left <= 0:
                    raise ClockStalledError(to_iso(when), self.stall_seconds)
                done, _ = await asyncio.wait({fut}, timeout=left)
                if done:
                    return
        finally:
            with self._lock:
                if entry in self._sleepers:
                    self._sleepers.remove(entry)

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now!r})"


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def to_iso(epoch: float) -> str:
    """ISO-8601 UTC with microseconds and a `Z`, the form of every `createdAt`."""
    return (
        datetime.fromtimestamp(epoch, timezone.utc)
        .isoformat(timespec="microseconds")
        .replace("+00:00", "Z")
    )


def from_iso(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def to_epoch(when: float | int | datetime) -> float:
    """Epoch seconds from epoch seconds or an aware `datetime`."""
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise ValueError("sleep_until needs an aware datetime (with a timezone) or epoch seconds")
        return when.timestamp()
    if isinstance(when, bool) or not isinstance(when, (int, float)):
        raise TypeError(f"a time is an aware datetime or epoch seconds, not {type(when).__name__}")
    return float(when)
