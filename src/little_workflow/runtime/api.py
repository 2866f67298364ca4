"""The public entry points: `run_workflow`, `arun_workflow`, `run_pipeline`.

They pick the World, then hand over to one run (`runner.arun_single`), an outer loop
(`outer_loop.arun_outer_loop`) or a pipeline's orchestrator run."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping, TypeVar

from ..world.protocol import WorldLike
from .deadlines import Deadline
from .memory import pipeline_key
from .outer_loop import arun_outer_loop
from .pipeline import Pipeline, pipeline_members
from .runner import arun_single, run_sync
from .state import RunResult
from .workflow import Workflow, workflow

if TYPE_CHECKING:
    from .context import RunContext
    from .outer_loop import Supervisor

In = TypeVar("In")
Out = TypeVar("Out")


def resolve_world(world: WorldLike | str | None) -> WorldLike:
    """A World object as given, a World for an fsspec URL (`"memory://wf"`,
    `"file:///data/wf"`, `"s3://bucket/prefix"`), or `local_world()` in the current
    directory when None. A string is always a `virtual_world` (one file per event), a
    plain path too: `local_world(path)` is the SQLite one (`little --data-dir`)."""
    if world is None:
        from ..world import default_world

        return default_world()
    if isinstance(world, str):
        from ..world import virtual_world

        return virtual_world(world)
    return world


async def arun_workflow(
    wf: Workflow[In, Out],
    input: In | None = None,
    *,
    world: WorldLike | str | None = None,
    run_id: str | None = None,
    max_outer_cycles: int | None = None,
    supervise: Supervisor[In, Out] | None = None,
    outer_loop_id: str | None = None,
    suspend: bool = False,
    deadline: Deadline | None = None,
) -> RunResult[Out]:
    """Start or resume a run and return its result (the coroutine form of `run_workflow`).

    - `world`: a World, an fsspec URL, or None for `local_world()` in the current directory.
    - `run_id`: `run_[A-Za-z0-9_-]{1,80}`; None generates `run_<uuid hex>`. The same id
      again returns a completed run's stored result, resumes an unfinished one, and raises
      `InputMismatchError` for a different input.
    - `max_outer_cycles`, `supervise`, `outer_loop_id`: run an outer loop — each cycle one
      run, `supervise(cycle, history)` returning `Done(final_output)` or `Continue(next_input)`.
    - `suspend`: a run that must wait (`ctx.sleep`, `ctx.wait_for_event`) releases its
      lock and returns `status="waiting"` with `waiting={kind, stepPath, ...}` instead of
      waiting in this process; calling again (or a `Worker`) continues it.
    - `deadline`: a timedelta or seconds (default: the workflow's `timeout`). A new run
      is cancelled with its sub-runs once that much time has passed on the World's clock
      since its creation (`RunCancelledError`, reason "deadline"); a resumed run keeps
      the deadline it was created with. One run's: an outer loop's cycles take the
      workflow's `timeout`.

    Raises `WorkflowFailedError` when the run fails, `SchemaValidationError` for invalid
    input (before anything is written), `RunLockedError` when the run is running elsewhere,
    `RunCancelledError` when it was cancelled (or its deadline passed).
    """
    if not isinstance(wf, Workflow):
        raise TypeError(f"{wf!r} is not a workflow: decorate it with @little_workflow.workflow")
    world = resolve_world(world)
    if max_outer_cycles is not None or supervise is not None or outer_loop_id is not None:
        if deadline is not None:
            raise ValueError("deadline= is one run's: give the workflow a timeout= for the "
                             "runs of an outer loop's cycles")
        return await arun_outer_loop(
            wf, input, world=world, max_outer_cycles=max_outer_cycles,
            supervise=supervise, outer_loop_id=outer_loop_id,
        )
    return await arun_single(wf, input, world=world, run_id=run_id, suspend=suspend,
                             deadline=deadline)


def run_workflow(
    wf: Workflow[In, Out],
    input: In | None = None,
    *,
    world: WorldLike | str | None = None,
    run_id: str | None = None,
    max_outer_cycles: int | None = None,
    supervise: Supervisor[In, Out] | None = None,
    outer_loop_id: str | None = None,
    suspend: bool = False,
    deadline: Deadline | None = None,
) -> RunResult[Out]:
    """Start or resume a run and wait for its result. Works in plain scripts and inside a
    running event loop (a notebook cell). Arguments and errors as `arun_workflow`."""
    return run_sync(lambda: arun_workflow(
        wf, input, world=world, run_id=run_id, max_outer_cycles=max_outer_cycles,
        supervise=supervise, outer_loop_id=outer_loop_id, suspend=suspend, deadline=deadline))


async def arun_pipeline(
    workflows: Iterable[Workflow[Any, Any]] | Mapping[str, Workflow[Any, Any]],
    input: In | None = None,
    *,
    orchestrator: Workflow[In, Out] | Callable[[RunContext, In], Awaitable[Out]],
    world: WorldLike | str | None = None,
    run_id: str | None = None,
    deadline: Deadline | None = None,
) -> RunResult[Out]:
    """Coroutine form of `run_pipeline`."""
    members = pipeline_members(workflows)
    if not isinstance(orchestrator, Workflow):
        if not inspect.iscoroutinefunction(orchestrator):
            raise TypeError("the orchestrator must be a workflow or an async function (ctx, input)")
        orchestrator = workflow(id=getattr(orchestrator, "__name__", "orchestrator"))(orchestrator)
    key = pipeline_key([wf.definition_hash for wf in members.values()])
    return await arun_single(orchestrator, input, world=resolve_world(world), run_id=run_id,
                             pipeline=Pipeline(workflows=members, key=key), deadline=deadline)


def run_pipeline(
    workflows: Iterable[Workflow[Any, Any]] | Mapping[str, Workflow[Any, Any]],
    input: In | None = None,
    *,
    orchestrator: Workflow[In, Out] | Callable[[RunContext, In], Awaitable[Out]],
    world: WorldLike | str | None = None,
    run_id: str | None = None,
    deadline: Deadline | None = None,
) -> RunResult[Out]:
    """Run `orchestrator` as the top-level run; it calls members with
    `await ctx.call_workflow(name, input)`, each a sub-run whose id is reserved first.
    `deadline` as for `run_workflow`: the sub-runs end no later than the orchestrator."""
    return run_sync(lambda: arun_pipeline(workflows, input, orchestrator=orchestrator,
                                          world=world, run_id=run_id, deadline=deadline))
