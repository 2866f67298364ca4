"""Controlling runs from outside: `start_workflow` (create, a worker executes) and
`cancel_run` (`run.cancel_requested`, then `run.cancelled`)."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

from ..errors import (
    InputMismatchError,
    RunFinishedError,
    RunLockedError,
    RunNotFoundError,
    WorkflowMismatchError,
)
from ..world.ids import content_hash, new_run_id, validate_run_id
from .active_index import mark_finished
from .state import TERMINAL_STATUSES, RunLog
from .waiting import notify_run, requested_reason
from .workflow import Workflow

In = TypeVar("In")


def _world(world: Any) -> Any:
    from ..world import default_world, virtual_world

    if world is None:
        return default_world()
    return virtual_world(world) if isinstance(world, str) else world


def _create_unless_exists(wf: Workflow[Any, Any], input: Any, world: Any, run_id: str | None) -> str:
    """Create the run (validated first); an existing run with this id, workflow and input
    is a no-op. Plain blocking code: no event loop is needed to write four records."""
    from .context import RunContext
    from .runner import create_run_sync, input_json

    if not isinstance(wf, Workflow):
        raise TypeError(f"{wf!r} is not a workflow: decorate it with @little_workflow.workflow")
    run_id = validate_run_id(run_id) if run_id is not None else new_run_id()
    value = input_json(wf, input, run_id)
    world = _world(world)
    input_hash = content_hash(value)
    with world.run_lock(run_id):
        log = RunLog.fold(run_id, world.list_events(run_id))
        if log.created is not None:
            if log.created.get("workflowId") != wf.id:
                raise WorkflowMismatchError(run_id, str(log.created.get("workflowId")), wf.id)
            if log.created.get("inputHash") != input_hash:
                raise InputMismatchError(run_id, str(log.created.get("inputHash")), input_hash)
            return run_id
        ctx = RunContext(world=world, workflow=wf, run_id=run_id, input=value, log=log)
        create_run_sync(ctx, wf, value, input_hash)
    notify_run(world, run_id)  # a worker in this process starts it without waiting a sweep
    return run_id


async def astart_workflow(wf: Workflow[In, Any], input: In | None = None, *, world: Any = None,
                          run_id: str | None = None) -> str:
    """`start_workflow` for async code: the writes run in a worker thread."""
    return await asyncio.to_thread(_create_unless_exists, wf, input, world, run_id)


def start_workflow(wf: Workflow[In, Any], input: In | None = None, *, world: Any = None,
                   run_id: str | None = None) -> str:
    """Validate the input and create the run without executing it (a worker will);
    returns its run id."""
    return _create_unless_exists(wf, input, world, run_id)


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


def cancel_sub_runs(world: Any, run_id: str, log: RunLog, reason: str | None) -> None:
    """`cancel_run` each sub-run `log` started and did not see finish (ended at once
    when nobody executes it, and its own sub-runs with it)."""
    for sub in list(log.sub_runs.values()):
        sub_id = sub.get("subRunId")
        if sub.get("status") != "succeeded" and isinstance(sub_id, str):
            try:
                cancel_run(world, sub_id, reason or f"parent run {run_id} was cancelled")
            except (RunNotFoundError, RunFinishedError):
                pass  # never started, or already over


async def acancel_run(world: Any, run_id: str, reason: str | None = None) -> None:
    await asyncio.to_thread(cancel_run, world, run_id, reason)
