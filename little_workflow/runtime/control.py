"""Controlling runs from outside: `start_workflow` (create, a worker executes) and
`cancel_run` (`run.cancel_requested`, then `run.cancelled`)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..errors import (
    InputMismatchError,
    RunCancelledError,
    RunFinishedError,
    RunLockedError,
    RunNotFoundError,
    WorkflowMismatchError,
)
from ..world.ids import content_hash, new_run_id, validate_run_id
from .state import TERMINAL_STATUSES, RunLog
from .waiting import notify_run
from .workflow import Workflow

if TYPE_CHECKING:
    from .context import RunContext


def _reason(log: RunLog) -> str | None:
    reason = (log.cancel_requested or {}).get("reason")
    return reason if isinstance(reason, str) else None


async def cancelled_on_entry(ctx: "RunContext") -> None:
    """A cancelled run never runs again; a requested cancellation ends it here."""
    log = ctx.log
    if log.status == "cancelled":
        raise RunCancelledError(ctx.run_id, _reason(log))
    if log.cancel_requested is not None:
        await ctx.append("run.cancelled", {"reason": _reason(log)})
        raise RunCancelledError(ctx.run_id, _reason(log))


async def finish_if_cancelled(ctx: "RunContext") -> None:
    """The run stopped (CancelledError or an error): if `cancel_run` asked for it, end
    the run with `run.cancelled` and raise `RunCancelledError` to the caller."""
    watch = ctx._watch
    if watch is not None:
        watch.refresh()
    if ctx.log.cancel_requested is None:
        return
    if watch is not None and watch.cancel_issued and watch.task is not None:
        watch.task.uncancel()  # this cancellation was ours and is handled here
        watch.cancel_issued = False
    await ctx.append("run.cancelled", {"reason": _reason(ctx.log)})
    raise RunCancelledError(ctx.run_id, _reason(ctx.log))


def _world(world: Any) -> Any:
    from .api import resolve_world

    return resolve_world(world)


async def astart_workflow(wf: Workflow, input: Any = None, *, world: Any = None,
                          run_id: str | None = None) -> str:
    from .context import RunContext
    from .runner import create_run, input_json, offload

    if not isinstance(wf, Workflow):
        raise TypeError(f"{wf!r} is not a workflow: decorate it with @little_workflow.workflow")
    run_id = validate_run_id(run_id) if run_id is not None else new_run_id()
    value = input_json(wf, input, run_id)
    world = _world(world)
    input_hash = content_hash(value)
    with world.run_lock(run_id):
        log = RunLog.fold(run_id, await offload(world, world.list_events, run_id))
        if log.created is not None:
            if log.created.get("workflowId") != wf.id:
                raise WorkflowMismatchError(run_id, str(log.created.get("workflowId")), wf.id)
            if log.created.get("inputHash") != input_hash:
                raise InputMismatchError(run_id, str(log.created.get("inputHash")), input_hash)
            return run_id
        ctx = RunContext(world=world, workflow=wf, run_id=run_id, input=value, log=log)
        await create_run(ctx, wf, value, input_hash)
    notify_run(world, run_id)  # a worker in this process starts it without waiting a sweep
    return run_id


def start_workflow(wf: Workflow, input: Any = None, *, world: Any = None,
                   run_id: str | None = None) -> str:
    """Validate the input and create the run without executing it (a worker will);
    returns its run id."""
    from .runner import run_sync

    return run_sync(lambda: astart_workflow(wf, input, world=world, run_id=run_id))


def cancel_run(world: Any, run_id: str, reason: str | None = None) -> None:
    """Cancel a run: a waiting or unstarted run at once, a running one at its next step
    boundary, sleep or wait (async steps in flight are cancelled). Also asks every
    unfinished sub-run to cancel. A run already cancelled: a no-op."""
    validate_run_id(run_id)
    if reason is not None and not isinstance(reason, str):
        raise TypeError("reason is a string or None")
    log = RunLog.fold(run_id, world.list_events(run_id))
    if log.created is None:
        raise RunNotFoundError(run_id, f" in {world.data_dir}")
    if log.status == "cancelled":
        return
    if log.status in TERMINAL_STATUSES:
        raise RunFinishedError(run_id, log.status, "run.cancel_requested")
    if log.cancel_requested is None:
        world.append_event(run_id, "run.cancel_requested", {"reason": reason})
    for sub in log.sub_runs.values():
        sub_id = sub.get("subRunId")
        if sub.get("status") != "succeeded" and isinstance(sub_id, str):
            try:
                cancel_run(world, sub_id, reason or f"parent run {run_id} was cancelled")
            except (RunNotFoundError, RunFinishedError):
                pass  # never started, or already over
    try:
        with world.run_lock(run_id):
            # Nobody runs it: end it here (a waiting or unstarted run).
            log = RunLog.fold(run_id, world.list_events(run_id))
            if log.status not in TERMINAL_STATUSES:
                world.append_event(run_id, "run.cancelled", {"reason": _reason(log)})
    except RunLockedError:
        pass  # its runner sees the request and ends the run
    notify_run(world, run_id)


async def acancel_run(world: Any, run_id: str, reason: str | None = None) -> None:
    await asyncio.to_thread(cancel_run, world, run_id, reason)
