"""Durable streams: values a run hands out while it runs (an agent's tokens, progress),
kept in its log and read in order from any process.

- From workflow code, `await ctx.write_stream(key, value)` appends `stream.written {key,
  value, position}`: `position` counts the run's `write_stream` calls (0, 1, …), so a
  resumed or replayed run reaching call N finds the write the log holds there and appends
  nothing — exactly once. Those records are history (history.py): code that resumes a run
  asks for them again in order, to the same key, or diverges.
- From a step function, `lw.current_step().write_stream(key, value)` (or `await
  .awrite_stream`) appends `stream.written {key, value, stepPath, attempt}`: committed at
  once (not fsynced on its own: the step's success syncs it), visible to readers while the
  step runs, and written again if the step runs again — at least once.
- `await ctx.close_stream(key)` appends `stream.closed {key}`; a write to a closed stream
  is a `StepError`.
- `read_stream(world, run_id, key, after=0, follow=True)` yields the values of one key in
  log order, ending at its `stream.closed` or the run's end (completed, failed,
  cancelled; a waiting run's streams stay open); it waits as followers.py says: woken by
  this process's appends, reading again every `POLL_SECONDS` for other processes'.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from ..errors import ReplayDivergenceError, StepError
from ..world.ids import validate_run_id
from ..world.models import Event
from ..world.protocol import WorldLike
from . import followers
from .active_index import TERMINAL_EVENTS
from .codec import ValueCodecError, encode_untyped
from .followers import AsyncWakeup, Wakeup, aread_log_after, read_log_after
from .values import stored_value
from .waiting import announce, observe, unobserve

WRITTEN = "stream.written"
CLOSED = "stream.closed"
KEY_LIMIT = 256


def stream_path(key: str) -> str:
    """The path an error names for a stream written from workflow code (it has no step)."""
    return f"stream/{key}"


def record_label(event_type: str, payload: Any) -> str | None:
    """What an event list names a stream record by: the step that wrote it, else its
    stream (`stream/<key>`: a write or close from workflow code). None for other events."""
    if event_type not in (WRITTEN, CLOSED) or not isinstance(payload, dict):
        return None
    key, step_path = payload.get("key"), payload.get("stepPath")
    if isinstance(step_path, str):
        return step_path
    return stream_path(key) if isinstance(key, str) else None


def _check_key(run_id: str, key: Any, where: str) -> str:
    if not isinstance(key, str) or not key or len(key) > KEY_LIMIT:
        raise StepError(run_id, where, f"a stream key is a non-empty string of at most "
                        f"{KEY_LIMIT} characters, not {key!r}")
    return key


def _encoded(run_id: str, key: str, value: Any, where: str) -> Any:
    try:
        return encode_untyped(value)
    except ValueCodecError as e:
        raise StepError(run_id, where, f"the value written to stream {key!r} {e.reason} "
                        f"(a {e.type_name}): write JSON, or a pydantic model, dataclass...") from None


def _refuse_closed(ctx: Any, key: str, where: str) -> None:
    closed_at = ctx.log.closed_streams.get(key)
    if closed_at is not None:
        raise StepError(ctx.run_id, where, f"stream {key!r} was closed (event {closed_at}): "
                        "nothing can be written to it after ctx.close_stream")


# ---- writing ------------------------------------------------------------------------

async def write_from_workflow(ctx: Any, key: str, value: Any) -> None:
    """`ctx.write_stream`: exactly once per call position (see the module docstring)."""
    where = stream_path(key) if isinstance(key, str) else "stream"
    _check_key(ctx.run_id, key, where)
    position = ctx.stream_position
    ctx.stream_position = position + 1
    logged = ctx.log.stream_writes.get(position)
    if logged is not None:
        if logged != key:
            raise ReplayDivergenceError(
                ctx.run_id, where, f"the log's stream write {position} went to stream "
                f"{logged!r}, but this code writes to {key!r} there",
                log_step_path=stream_path(logged), resuming=not ctx.replaying)
        ctx.asked(("stream", position))
        return
    if ctx.replaying:
        raise ReplayDivergenceError(ctx.run_id, where, f"the code writes to stream {key!r} "
                                    f"(write {position}) where the log holds no write")
    _refuse_closed(ctx, key, where)
    stored = _encoded(ctx.run_id, key, value, where)
    await ctx.append(WRITTEN, {"key": key, "value": stored, "position": position})
    announce(ctx.world, ctx.run_id)


async def close_from_workflow(ctx: Any, key: str) -> None:
    """`ctx.close_stream`: once per key; closing a closed stream changes nothing."""
    where = stream_path(key) if isinstance(key, str) else "stream"
    _check_key(ctx.run_id, key, where)
    if key in ctx.log.closed_streams:
        ctx.asked(("stream.closed", key))
        return
    if ctx.replaying:
        raise ReplayDivergenceError(ctx.run_id, where, f"the code closes stream {key!r} where "
                                    "the log holds no close")
    await ctx.append(CLOSED, {"key": key})
    announce(ctx.world, ctx.run_id)


def step_write_payload(ctx: Any, step_path: str, attempt: int, key: str, value: Any) -> dict[str, Any]:
    _check_key(ctx.run_id, key, step_path)
    _refuse_closed(ctx, key, step_path)
    return {"key": key, "value": _encoded(ctx.run_id, key, value, step_path),
            "stepPath": step_path, "attempt": attempt}


def write_from_step(ctx: Any, step_path: str, attempt: int, key: str, value: Any) -> None:
    """`lw.current_step().write_stream`: committed now, synced with the step's success."""
    ctx.append_sync(WRITTEN, step_write_payload(ctx, step_path, attempt, key, value),
                    durable=False)
    announce(ctx.world, ctx.run_id)


# ---- reading ------------------------------------------------------------------------

class _StreamCursor:
    """Where a reader is in one stream: the last event read, the values of `key` seen."""

    def __init__(self, world: WorldLike, run_id: str, key: str, after: int):
        self.world, self.run_id, self.key, self.after = world, run_id, key, after
        self.last_sequence = 0
        self.seen = 0
        self.ended = False

    def values(self, events: list[Event]) -> list[Any]:
        """The values among `events` to hand out; sets `ended` at the stream's close or
        the run's end."""
        out = []
        for e in events:
            if e.sequence != self.last_sequence + 1:
                break  # read again from the last one handed out
            self.last_sequence = e.sequence
            p = e.payload if isinstance(e.payload, dict) else {}
            if e.type == WRITTEN and p.get("key") == self.key:
                self.seen += 1
                if self.seen > self.after:
                    out.append(stored_value(self.world, p.get("value")))
            elif (e.type == CLOSED and p.get("key") == self.key) or e.type in TERMINAL_EVENTS:
                self.ended = True
                break
        return out


def _check_reader(run_id: str, key: Any, after: Any) -> None:
    validate_run_id(run_id)
    if not isinstance(key, str) or not key:
        raise ValueError(f"a stream key is a non-empty string, not {key!r}")
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValueError(f"after is a number of values to skip (0 or more), not {after!r}")


def read_stream(world: WorldLike, run_id: str, key: str, *, after: int = 0,
                follow: bool = True) -> Iterator[Any]:
    """The values written to stream `key` of run `run_id`, in order: those written so far,
    then (with `follow=True`) each new one as it is written, from any process, until the
    stream is closed or the run ends (completed, failed or cancelled; a waiting run's
    stream stays open). `after=N` skips the first N values. A stream not written yet is
    empty and a follower waits for it. `RunNotFoundError` (raised here, at the call) when
    the World holds no such run.

    A follower is woken at once by what this process appends to the run and reads the log
    again every `followers.POLL_SECONDS` (0.25 s) for what other processes append."""
    _check_reader(run_id, key, after)
    cursor = _StreamCursor(world, run_id, key, after)
    first = read_log_after(world, run_id, 0)
    return _follow(cursor, first, follow)


def _follow(cursor: _StreamCursor, events: list[Event], follow: bool) -> Iterator[Any]:
    wakeup = Wakeup()
    observe(cursor.world, cursor.run_id, wakeup)
    try:
        while True:
            yield from cursor.values(events)
            if cursor.ended or not follow:
                return
            # Cleared before reading, and the wait only when the read found nothing: an
            # append after the read (or before this follower observed the run) is not lost.
            wakeup.clear()
            events = read_log_after(cursor.world, cursor.run_id, cursor.last_sequence)
            if not events:
                wakeup.wait(followers.POLL_SECONDS)
    finally:
        unobserve(cursor.world, cursor.run_id, wakeup)


async def aread_stream(world: WorldLike, run_id: str, key: str, *, after: int = 0,
                       follow: bool = True) -> AsyncIterator[Any]:
    """`read_stream` for async code (`async for value in lw.aread_stream(...)`): waits
    without blocking the event loop; `RunNotFoundError` comes with the first value."""
    _check_reader(run_id, key, after)
    cursor = _StreamCursor(world, run_id, key, after)
    wakeup = AsyncWakeup()
    observe(world, run_id, wakeup)
    try:
        events = await aread_log_after(world, run_id, 0)
        while True:
            for value in cursor.values(events):
                yield value
            if cursor.ended or not follow:
                return
            wakeup.clear()
            events = await aread_log_after(world, run_id, cursor.last_sequence)
            if not events:
                await wakeup.wait(followers.POLL_SECONDS)
    finally:
        unobserve(world, run_id, wakeup)


__all__ = ["aread_stream", "read_stream"]
