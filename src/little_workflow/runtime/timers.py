"""Durable timers (`ctx.sleep`, `ctx.sleep_until`) and recorded values (`ctx.now`,
`ctx.uuid`), plus the fold of every time-and-message event into a run's log.

A timer's wake time is committed (`timer.scheduled {stepPath, wakeAt}`) before the run
sleeps, so a run resumed after a crash sleeps only the time left; `timer.fired
{stepPath}` is appended when the sleep returns.
"""

from __future__ import annotations

import uuid as uuid_module
from datetime import datetime, timezone
from typing import Any, cast

from ..errors import ClockStalledError, ReplayDivergenceError, StepError
from ..world.clock import from_iso, to_epoch, to_iso
from .state import TimerRecord
from .values import stored_value
from .waiting import RunSuspended


def _check_cancel(ctx: Any) -> None:
    watch = ctx.watch
    if watch is not None:
        watch.at_boundary()


async def sleep_until(ctx: Any, path: str, when: float | None, seconds: float | None) -> None:
    ctx.claim_path(path)
    rec: TimerRecord | None = ctx.log.timers.get(path)
    if rec is not None:
        ctx.asked(("timer", path))
    if ctx.replaying:
        if rec is None:
            raise ReplayDivergenceError(ctx.run_id, path, "the code sleeps where the log holds no timer")
        if not rec.get("fired"):
            raise RunSuspended(ctx.run_id, {"kind": "sleep", "stepPath": path, "wakeAt": rec["wakeAt"]})
        return
    if rec is not None and rec.get("fired"):
        return
    clock = ctx.world.clock
    if rec is None:
        _check_cancel(ctx)
        if when is None:
            if seconds is None or isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
                raise StepError(ctx.run_id, path, f"sleep takes a number of seconds, not {seconds!r}")
            when = clock.now() + max(0.0, float(seconds))
        wake_iso = to_iso(when)
        await ctx.append("timer.scheduled", {"stepPath": path, "wakeAt": wake_iso})
    else:
        # Not fired, so folded from its timer.scheduled, which always names the time.
        wake_iso = cast(str, rec["wakeAt"])
    wake = from_iso(wake_iso)
    if wake > clock.now() and getattr(ctx, "suspend", False):
        raise RunSuspended(ctx.run_id, {"kind": "sleep", "stepPath": path, "wakeAt": wake_iso})
    watch = ctx.watch
    while wake > clock.now():
        try:
            # Until the run's deadline if it comes first: the run is cancelled there.
            await clock.sleep_until(wake if watch is None else watch.until(wake))
        except ClockStalledError as e:
            raise ClockStalledError(e.wake_at, e.stalled_seconds, ctx.run_id, path) from None
        if watch is not None:
            watch.stop_if_due()
    await ctx.append("timer.fired", {"stepPath": path})


def sleep_seconds(ctx: Any, path: str, seconds: float) -> Any:
    return sleep_until(ctx, path, None, seconds)


def sleep_until_time(ctx: Any, path: str, when: Any) -> Any:
    try:
        epoch = to_epoch(when)
    except (TypeError, ValueError) as e:
        raise StepError(ctx.run_id, path, str(e)) from None
    return sleep_until(ctx, path, epoch, None)


def recorded_value(ctx: Any, kind: str, make: Any) -> Any:
    """The value recorded for this call (by kind, in call order), or a new one recorded
    now (`value.recorded {key, value}`)."""
    counters = ctx.__dict__.setdefault("_value_counters", {})
    index = counters.get(kind, 0)
    counters[kind] = index + 1
    key = f"{kind}/{index}"
    if key in ctx.log.values:
        ctx.asked(("value", key))
        return stored_value(ctx.world, ctx.log.values[key])
    if ctx.replaying:
        raise ReplayDivergenceError(ctx.run_id, key, f"the log holds no recorded {kind} value here")
    value = make()
    ctx.append_sync("value.recorded", {"key": key, "value": value})
    return value


def now(ctx: Any) -> datetime:
    iso = recorded_value(ctx, "now", lambda: to_iso(ctx.world.clock.now()))
    return datetime.fromtimestamp(from_iso(iso), timezone.utc)


def new_uuid(ctx: Any) -> uuid_module.UUID:
    text = recorded_value(ctx, "uuid", lambda: str(uuid_module.uuid4()))
    return uuid_module.UUID(text)
