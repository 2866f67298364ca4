"""`cancel_run`: `run.cancel_requested`, then `run.cancelled` — at once for a run nobody
executes, at the next step boundary, sleep or wait for a running one."""

from __future__ import annotations

import asyncio

from ..errors import RunFinishedError, RunLockedError, RunNotFoundError
from ..world.ids import validate_run_id
from ..world.protocol import WorldLike
from .active_index import mark_finished
from .state import TERMINAL_STATUSES, RunLog
from .waiting import notify_run, requested_reason


def cancel_run(world: WorldLike, run_id: str, reason: str | None = None) -> None:
    """Cancel a run: a waiting or unstarted run at once, a running one at its next step
    boundary, sleep or wait (async steps in flight are cancelled). Also asks every
    unfinished sub-run to cancel. A run already cancelled: its sub-runs are asked again
    (one its executor created late and died in before the sub-run looked at its parent)."""
    validate_run_id(run_id)
    if reason is not None and not isinstance(reason, str):
        raise TypeError("reason is a string or None")
    log = RunLog.fold(run_id, world.list_events(run_id))
    if log.created is None:
        raise RunNotFoundError(run_id, f" in {world.data_dir}")
    if log.status == "cancelled":
        cancel_sub_runs(world, run_id, log, reason)
        return
    if log.status in TERMINAL_STATUSES:
        raise RunFinishedError(run_id, log.status, "run.cancel_requested")
    if log.cancel_requested is None:
        world.append_event(run_id, "run.cancel_requested", {"reason": reason})
    cancel_sub_runs(world, run_id, log, reason)
    try:
        with world.run_lock(run_id):
            # Nobody runs it: end it here (a waiting or unstarted run), its sub-runs
            # asked first (one may have started since the log was read above).
            log = RunLog.fold(run_id, world.list_events(run_id))
            if log.status not in TERMINAL_STATUSES:
                cancel_sub_runs(world, run_id, log, reason)
                world.append_event(run_id, "run.cancelled", {"reason": requested_reason(log)})
                mark_finished(world, run_id)
    except RunLockedError:
        pass  # its runner sees the request and ends the run
    notify_run(world, run_id)


def cancel_sub_runs(world: WorldLike, run_id: str, log: RunLog, reason: str | None) -> None:
    """`cancel_run` each sub-run `log` started and did not see finish (ended at once
    when nobody executes it, and its own sub-runs with it)."""
    for sub in list(log.sub_runs.values()):
        sub_id = sub.get("subRunId")
        if sub.get("status") != "succeeded" and isinstance(sub_id, str):
            try:
                cancel_run(world, sub_id, reason or f"parent run {run_id} was cancelled")
            except (RunNotFoundError, RunFinishedError):
                pass  # never started, or already over


async def acancel_run(world: WorldLike, run_id: str, reason: str | None = None) -> None:
    await asyncio.to_thread(cancel_run, world, run_id, reason)
