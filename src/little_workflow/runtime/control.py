"""Controlling runs from outside: `start_workflow` (create, a worker executes; with
`handle=True` a `RunHandle` on the new run) and `cancel_run` (in cancel.py)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Literal, TypeVar, overload

from ..errors import InputMismatchError, WorkflowMismatchError
from ..world.ids import content_hash, new_run_id, validate_run_id
from ..world.protocol import WorldLike
from .cancel import acancel_run, cancel_run
from .deadlines import Deadline, deadline_record, seconds_of
from .handles import RunHandle
from .state import RunLog
from .waiting import notify_run
from .workflow import Workflow

In = TypeVar("In")
Out = TypeVar("Out")


def _world(world: WorldLike | str | None) -> WorldLike:
    from ..world import default_world, virtual_world

    if world is None:
        return default_world()
    return virtual_world(world) if isinstance(world, str) else world


def create_unless_exists(wf: Workflow[Any, Any], input: Any, world: WorldLike, run_id: str | None,
                          deadline: Deadline | None = None,
                          extra: dict[str, Any] | None = None) -> str:
    """Create the run (validated first); an existing run with this id, workflow and input
    is a no-op (its deadline stays as stored). Plain blocking code: no event loop is
    needed to write four records."""
    from .context import RunContext
    from .runner import create_run_sync, input_json

    if not isinstance(wf, Workflow):
        raise TypeError(f"{wf!r} is not a workflow: decorate it with @little_workflow.workflow")
    minted = run_id is None
    run_id = validate_run_id(run_id) if run_id is not None else new_run_id()
    seconds = seconds_of(deadline, f"the deadline of run {run_id}")
    value = input_json(wf, input, run_id)
    world = _world(world)
    input_hash = content_hash(value)
    with contextlib.nullcontext() if minted else world.run_lock(run_id):
        # An id minted here is known to no one else until this returns: there is no run
        # of it to find, nor anyone to keep out (see fresh_log).
        log = fresh_log(run_id) if minted else RunLog.fold(run_id, world.list_events(run_id))
        if log.created is not None:
            if log.created.get("workflowId") != wf.id:
                raise WorkflowMismatchError(run_id, str(log.created.get("workflowId")), wf.id)
            if log.created.get("inputHash") != input_hash:
                raise InputMismatchError(run_id, str(log.created.get("inputHash")), input_hash)
            return run_id
        ctx = RunContext(world=world, workflow=wf, run_id=run_id, input=value, log=log)
        create_run_sync(ctx, wf, value, input_hash, {
            **(extra or {}),
            **deadline_record(world.clock.now(), wf.timeout if seconds is None else seconds)})
    notify_run(world, run_id)  # a worker in this process starts it without waiting a sweep
    return run_id


def fresh_log(run_id: str) -> RunLog:
    """The log of a run under an id just minted (`new_run_id`, 122 random bits): empty,
    without reading it or taking its lock. Nobody can know the id before the call that
    minted it returns, so no other writer can have made or be making that run; its
    `run.created` is still published only where no event 1 is (the store refuses a taken
    sequence), like every append. After that a worker may take the run's lock and execute
    it at once — which the lock held until the creator returned only made it back off."""
    return RunLog(run_id=run_id)


@overload
async def astart_workflow(wf: Workflow[In, Any], input: In | None = None, *, world: WorldLike | str | None = None,
                          run_id: str | None = None, handle: Literal[False] = False,
                          deadline: Deadline | None = None) -> str: ...


@overload
async def astart_workflow(wf: Workflow[In, Out], input: In | None = None, *, world: WorldLike | str | None = None,
                          run_id: str | None = None, handle: Literal[True],
                          deadline: Deadline | None = None) -> RunHandle[Out]: ...


async def astart_workflow(wf: Workflow[In, Any], input: In | None = None, *, world: WorldLike | str | None = None,
                          run_id: str | None = None, handle: bool = False,
                          deadline: Deadline | None = None) -> Any:
    """`start_workflow` for async code: the writes run in a worker thread."""
    return await asyncio.to_thread(_start, wf, input, world, run_id, handle, deadline)


@overload
def start_workflow(wf: Workflow[In, Any], input: In | None = None, *, world: WorldLike | str | None = None,
                   run_id: str | None = None, handle: Literal[False] = False,
                   deadline: Deadline | None = None) -> str: ...


@overload
def start_workflow(wf: Workflow[In, Out], input: In | None = None, *, world: WorldLike | str | None = None,
                   run_id: str | None = None, handle: Literal[True],
                   deadline: Deadline | None = None) -> RunHandle[Out]: ...


def start_workflow(wf: Workflow[In, Any], input: In | None = None, *, world: WorldLike | str | None = None,
                   run_id: str | None = None, handle: bool = False,
                   deadline: Deadline | None = None) -> Any:
    """Validate the input and create the run without executing it (a worker will);
    returns its run id, or with `handle=True` a `RunHandle` on it (`.result()` waits for
    whichever process executes it). `deadline` (a timedelta or seconds; default: the
    workflow's `timeout`): the run is cancelled once that much time has passed on the
    World's clock since its creation, whatever it is doing (DESIGN §17); an existing run
    keeps its own."""
    return _start(wf, input, world, run_id, handle, deadline)


def _start(wf: Workflow[In, Any], input: Any, world: WorldLike | str | None, run_id: str | None,
           handle: bool, deadline: Deadline | None = None) -> Any:
    world = _world(world)
    run_id = create_unless_exists(wf, input, world, run_id, deadline)
    return RunHandle(world, run_id, wf) if handle else run_id


__all__ = ["acancel_run", "astart_workflow", "cancel_run", "start_workflow"]
