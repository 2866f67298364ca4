"""Deadlines (DESIGN §17): a run that has not ended by its deadline is cancelled, with its
sub-runs, as `run.cancelled {reason: "deadline"}`.

- `deadline=` (a timedelta or seconds) on `run_workflow`, `start_workflow`, `enqueue`, or
  the workflow's `timeout=` when none is given, is counted from the run's creation on the
  World's clock and committed in `run.created` as `deadline` (ISO-8601 UTC). Only a new run
  takes one: a resume keeps the stored deadline, whatever `deadline=` it passes. A sub-run's
  deadline is its own or its parent's, whichever comes first; a fork gets its source's
  time again, counted from its own creation.
- It is reached when the World clock's now ≥ it, and whoever touches the run next
  enforces it: its executor at the next step boundary, sleep or wait (a sleep or wait
  blocked in this process wakes at the deadline: `RunWatch`), a caller resuming it before
  anything runs, a worker's sweep for a run nobody executes (any worker: cancelling runs
  no workflow code).
- Enforcing is `cancel_run(reason="deadline")`: `run.cancel_requested {reason}` (a
  request already made, by a user or another enforcer, is kept with its reason), the same
  request to every unfinished sub-run, then `run.cancelled` by the run's executor or, when
  nobody holds the run, by the enforcer itself.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Union

from ..errors import RunFinishedError, RunNotFoundError
from ..world.clock import from_iso, to_iso

if TYPE_CHECKING:  # the decorator's timeout check needs none of it (pydantic, asyncio)
    from .state import RunLog

#: A deadline or timeout as callers give it: a timedelta or a number of seconds.
Deadline = Union[timedelta, float, int]
#: The reason recorded in `run.cancel_requested` and `run.cancelled`.
DEADLINE_REASON = "deadline"


def seconds_of(value: Any, what: str) -> float | None:
    """A deadline or timeout given as a timedelta or a number of seconds, as seconds;
    TypeError / ValueError naming `what` otherwise."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} is a timedelta or a number of seconds, not {value!r}")
    else:
        seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{what} must be a finite number of seconds >= 0, not {value!r}")
    return seconds


def deadline_record(now: float, seconds: float | None, cap: float | None = None) -> dict[str, Any]:
    """What a new run's `run.created` carries: `{"deadline": iso}` `seconds` after `now`
    (capped by `cap`, its parent's deadline), or nothing."""
    candidates = [t for t in (None if seconds is None else now + seconds, cap) if t is not None]
    return {"deadline": to_iso(min(candidates))} if candidates else {}


def deadline_of(log: RunLog) -> float | None:
    """The run's deadline (epoch seconds) as its `run.created` committed it."""
    value = (log.created or {}).get("deadline")
    return from_iso(value) if isinstance(value, str) else None


def passed(log: RunLog, now: float) -> bool:
    """The run is unfinished, its deadline reached, and nobody asked to cancel it yet."""
    from .state import TERMINAL_STATUSES

    deadline = deadline_of(log)
    return (deadline is not None and now >= deadline and log.cancel_requested is None
            and log.status not in TERMINAL_STATUSES)


def forked_deadline(source: RunLog, now: float) -> dict[str, Any]:
    """A fork's `deadline`: the source's time (its deadline less its creation) from `now`."""
    deadline = deadline_of(source)
    if deadline is None or source.first_created_at is None:
        return {}
    return deadline_record(now, max(0.0, deadline - from_iso(source.first_created_at)))


def cancel_sub_runs(world: Any, log: RunLog) -> None:
    from .cancel import cancel_run

    for sub in log.sub_runs.values():
        sub_id = sub.get("subRunId")
        if sub.get("status") != "succeeded" and isinstance(sub_id, str):
            try:
                cancel_run(world, sub_id, DEADLINE_REASON)
            except (RunNotFoundError, RunFinishedError):
                pass  # never started, or already over


def request_cancel_if_past(ctx: Any) -> bool:
    """The executor of a run (or a caller about to execute it) found its deadline passed:
    ask for its cancellation and its sub-runs'. The request is folded into the run's log,
    so the caller ends the run as after any cancel request. False when not passed."""
    if not passed(ctx.log, ctx.world.clock.now()):
        return False
    ctx.world.append_event(ctx.run_id, "run.cancel_requested", {"reason": DEADLINE_REASON})
    ctx.fold_new_events()
    cancel_sub_runs(ctx.world, ctx.log)
    return True


def cancel_if_past(world: Any, run_id: str, log: RunLog, now: float) -> bool:
    """For a run this process does not execute (a worker's sweep): cancel it if its
    deadline passed by `now` — at once when nobody holds it, else its holder stops at its
    next boundary. True when it was due."""
    if not passed(log, now):
        return False
    from .cancel import cancel_run

    try:
        cancel_run(world, run_id, DEADLINE_REASON)
    except RunFinishedError:
        pass  # it ended meanwhile
    return True
