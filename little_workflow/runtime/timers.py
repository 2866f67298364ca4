"""Durable timers (`ctx.sleep`, `ctx.sleep_until`) and recorded values (`ctx.now`,
`ctx.uuid`), plus the fold of every time-and-message event into a run's log.

A timer's wake time is committed (`timer.scheduled {stepPath, wakeAt}`) before the run
sleeps, so a run resumed after a crash sleeps only the time left; `timer.fired
{stepPath}` is appended when the sleep returns.
"""

from __future__ import annotations

import uuid as uuid_module
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from ..errors import ReplayDivergenceError, StepError
from ..world.clock import from_iso, to_epoch, to_iso
from ..world.models import Event
from .waiting import RunSuspended

if TYPE_CHECKING:
    from .context import RunContext
    from .state import RunLog


def fold_time_event(log: "RunLog", e: Event, p: dict[str, Any]) -> None:
    t = e.type
    if t == "signal.received":
        log.signals.append((e.sequence, p.get("name"), p.get("payload")))
        return
    if t == "value.recorded":
        key = p.get("key")
        if isinstance(key, str):
            log.values.setdefault(key, p.get("value"))
        return
    path = p.get("stepPath")
    if not isinstance(path, str):
        return
    if t == "timer.scheduled":
        log.timers[path] = {"wakeAt": p.get("wakeAt"), "fired": False, "sequence": e.sequence}
        log.open_waits[path] = {"kind": "sleep", "stepPath": path, "wakeAt": p.get("wakeAt")}
    elif t == "timer.fired":
        log.timers.setdefault(path, {"wakeAt": None, "sequence": e.sequence})["fired"] = True
        log.open_waits.pop(path, None)
    elif t == "wait.started":
        log.waits[path] = {"name": p.get("name"), "deadline": p.get("deadline"),
                           "sequence": e.sequence, "timedOutAt": None, "completed": False,
                           "signalSequence": None}
        log.open_waits[path] = {"kind": "event", "stepPath": path, "name": p.get("name"),
                                "deadline": p.get("deadline")}
    elif t == "wait.timed_out":
        rec = log.waits.get(path)
        if rec is not None and rec["timedOutAt"] is None:
            rec["timedOutAt"] = e.sequence
    elif t == "wait.completed":
        rec = log.waits.setdefault(path, {"name": p.get("name"), "deadline": None,
                                          "sequence": e.sequence, "timedOutAt": None})
        rec["completed"] = True
        rec["signalSequence"] = p.get("signalSequence")
        if isinstance(p.get("signalSequence"), int):
            log.taken.add(p["signalSequence"])
        log.open_waits.pop(path, None)
    if log.status in ("running", "waiting"):
        log.status = "waiting" if log.open_waits else "running"


def _check_cancel(ctx: "RunContext") -> None:
    watch = getattr(ctx, "_watch", None)
    if watch is not None:
        watch.at_boundary()


async def sleep_until(ctx: "RunContext", path: str, when: float | None, seconds: float | None) -> None:
    ctx._claim(path)
    rec = ctx.log.timers.get(path)
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
        wake_iso = rec["wakeAt"]
    wake = from_iso(wake_iso)
    if wake > clock.now():
        if getattr(ctx, "suspend", False):
            raise RunSuspended(ctx.run_id, {"kind": "sleep", "stepPath": path, "wakeAt": wake_iso})
        await clock.sleep_until(wake)
    await ctx.append("timer.fired", {"stepPath": path})


def sleep_seconds(ctx: "RunContext", path: str, seconds: float) -> Any:
    return sleep_until(ctx, path, None, seconds)


def sleep_until_time(ctx: "RunContext", path: str, when: Any) -> Any:
    try:
        epoch = to_epoch(when)
    except (TypeError, ValueError) as e:
        raise StepError(ctx.run_id, path, str(e)) from None
    return sleep_until(ctx, path, epoch, None)


def recorded_value(ctx: "RunContext", kind: str, make: Any) -> Any:
    """The value recorded for this call (by kind, in call order), or a new one recorded
    now (`value.recorded {key, value}`)."""
    counters = ctx.__dict__.setdefault("_value_counters", {})
    index = counters.get(kind, 0)
    counters[kind] = index + 1
    key = f"{kind}/{index}"
    if key in ctx.log.values:
        return ctx.log.values[key]
    if ctx.replaying:
        raise ReplayDivergenceError(ctx.run_id, key, f"the log holds no recorded {kind} value here")
    value = make()
    ctx.append_sync("value.recorded", {"key": key, "value": value})
    return value


def now(ctx: "RunContext") -> datetime:
    iso = recorded_value(ctx, "now", lambda: to_iso(ctx.world.clock.now()))
    return datetime.fromtimestamp(from_iso(iso), timezone.utc)


def new_uuid(ctx: "RunContext") -> uuid_module.UUID:
    text = recorded_value(ctx, "uuid", lambda: str(uuid_module.uuid4()))
    return uuid_module.UUID(text)
