"""Running one run: start or resume it under its lock, and replay it.

The public entry points (`run_workflow`, outer loops, pipelines) are in `api.py`; this
module knows nothing of them. A run that calls sub-workflows gets `arun_single` handed to
its context (`run_child`), so nothing here imports the features built on top."""

from __future__ import annotations

import asyncio
import functools
import signal
import threading
import traceback
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, Coroutine, TypeVar

from ..errors import (
    ClockStalledError,
    InputMismatchError,
    LeaseLostError,
    OutputSchemaError,
    ReplayDivergenceError,
    RunCancelledError,
    RunFinishedError,
    RunLockedError,
    RunQueuedError,
    SchemaValidationError,
    StorageError,
    WorkflowFailedError,
    WorkflowMismatchError,
    WorkflowVersionError,
    failure_text,
)
from ..world.ids import canonical_json, content_hash, new_run_id, validate_run_id
from ..world.models import thaw
from ..world.protocol import WorldLike
from .active_index import mark_active
from .context import RunContext, running
from .deadlines import (
    Deadline,
    deadline_of,
    deadline_record,
    request_cancel_if_past,
    seconds_of,
)
from .deadlines import passed as deadline_passed
from .loops import may_block_loop, run_on_own_loop
from .queue_layout import queue_fields
from .state import RunLog, RunResult, RunState, materialize
from .step_engine import INLINE_OUTPUT_LIMIT
from .steps import error_record
from .telemetry import observe_run, run_created_fields
from .values import decode_input, decode_output, encode_input, encode_output, stored_value
from .versions import refuse_other_versions
from .waiting import (
    RunSuspended,
    RunWatch,
    cancel_if_parent_cancelled,
    cancelled_on_entry,
    finish_if_cancelled,
    requested_reason,
    stop_if_superseded,
)
from .workflow import Workflow

T = TypeVar("T")
Out = TypeVar("Out")


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@contextmanager
def interruptible() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt at once, as in plain Python code. (`asyncio.run`
    otherwise only cancels its task, which a workflow of synchronous steps never hands
    the event loop a chance to deliver: the run would go on to its end.) A run stopped
    this way is left unfinished, as after a crash, and resumes with the same run id.
    Only in the main thread, and only where Ctrl-C still has Python's own handler."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield
        return
    previous = signal.signal(signal.SIGINT, _raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def run_sync(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from sync code — also inside a running event loop
    (a notebook cell), where it runs on a private loop in a worker thread."""
    try:
        asyncio.get_running_loop()
        in_a_loop = True
    except RuntimeError:
        in_a_loop = False
    if not in_a_loop:  # outside the except block: a failure must not chain "no running event loop"
        with interruptible():
            return run_on_own_loop(factory)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = run_on_own_loop(factory)
        except BaseException as e:  # handed back to the caller's thread below
            box["error"] = e

    t = threading.Thread(target=target, name="little-workflow-run", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def input_json(wf: Workflow[Any, Any], input: Any, run_id: str) -> Any:
    """The run input as plain JSON — encoded by the annotation of the workflow's `input`
    (a pydantic model becomes its JSON) — validated against the workflow's input schema."""
    try:
        frozen = encode_input(wf, input, run_id)
    except RecursionError:
        raise SchemaValidationError(f"input of run {run_id}", "nested too deeply") from None
    value = thaw(frozen)
    try:
        wf.validate_input(value)
    except RecursionError:
        raise SchemaValidationError(f"input of run {run_id}", "nested too deeply") from None
    return value


async def offload(world: WorldLike, fn: Callable[..., T], *args: Any) -> T:
    """Call a World method, in a worker thread where it may block for long — unless the
    run is alone on a loop of ours (a plain `run_workflow`, a worker's run), where a
    thread hop would only add latency (measured: two per run, most of a zero-step run's
    cost). See loops.py."""
    if world.blocking and not may_block_loop():
        return await asyncio.to_thread(fn, *args)
    return fn(*args)


#: The version records each World (this object) has found or written: a record is never
#: changed nor removed, so later runs need not look for it (a request per run on an
#: object store).
_versions_seen: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def register_version(world: WorldLike, wf: Workflow[Any, Any]) -> None:
    try:
        seen = _versions_seen.setdefault(world, set())
    except TypeError:  # a World that cannot be weakly referenced: look each time
        seen = set()
    if wf.version_id in seen:
        return
    path = f"workflow-versions/{wf.version_id}.json"
    if world.file_info(path) is None:
        world.create_document(path, wf.version_record())
    seen.add(wf.version_id)


async def arun_single(
    wf: Workflow[Any, Any], input: Any, *, world: WorldLike, run_id: str | None, pipeline: Any = None,
    suspend: bool = False, parent_run_id: str | None = None, deadline: Deadline | None = None,
    deadline_cap: float | None = None, parent_seen: int = 0,
) -> RunResult[Any]:
    """Start or resume one run of `wf` (no outer loop). With `suspend=True` a run that
    must wait (a sleep, an event) releases its lock and returns `status="waiting"`.
    A new run takes `deadline` (else the workflow's timeout), no later than
    `deadline_cap` (epoch seconds: a parent run's deadline)."""
    if not isinstance(wf, Workflow):
        raise TypeError(f"{wf!r} is not a workflow: decorate it with @little_workflow.workflow")
    run_id = validate_run_id(run_id) if run_id is not None else new_run_id()
    seconds = seconds_of(deadline, f"the deadline of run {run_id}")
    value = input_json(wf, input, run_id)
    if wf.skills:
        from .bash_steps import check_skill_sources

        check_skill_sources(world, wf)
    with world.run_lock(run_id):
        return await _run_locked(world, wf, value, run_id, pipeline, suspend, parent_run_id,
                                 (wf.timeout if seconds is None else seconds, deadline_cap),
                                 parent_seen=parent_seen)


async def arun_admitted(wf: Workflow[Any, Any], input: Any, *, world: WorldLike, run_id: str,
                        admission: Any) -> RunResult[Any]:
    """Start or resume a queued run that a worker admitted: the caller holds the run's
    lock and the queue's places (`queue_picking.Admission`), and gives them back after.
    Suspends at a wait, so the places are not held while the run waits."""
    value = input_json(wf, input, run_id)
    return await _run_locked(world, wf, value, run_id, None, True, None, (wf.timeout, None),
                             admission)


async def _run_locked(
    world: WorldLike, wf: Workflow[Any, Any], input: Any, run_id: str, pipeline: Any, suspend: bool = False,
    parent_run_id: str | None = None, deadline: tuple[float | None, float | None] = (None, None),
    admission: Any = None, *, parent_seen: int = 0,
) -> RunResult[Any]:
    if admission is None:
        log = RunLog.fold(run_id, await offload(world, world.list_events, run_id))
    else:
        # Read whole by the worker that admitted it, under the lock held since: only
        # what others appended after that read (a cancel request, an event) is new.
        log = admission.log
        for e in await offload(world, functools.partial(world.list_events, run_id,
                                                        after=log.last_sequence)):
            log.apply(e)
    input_hash = content_hash(input)
    if log.created is not None:
        if log.created.get("workflowId") != wf.id:
            raise WorkflowMismatchError(run_id, str(log.created.get("workflowId")), wf.id)
        if log.created.get("inputHash") != input_hash:
            raise InputMismatchError(run_id, str(log.created.get("inputHash")), input_hash)
        if log.status == "completed":
            return _result(world, log, wf)
        if log.status == "failed":
            raise WorkflowFailedError(run_id, None, stored_value(world, log.error) or {},
                                      log.traceback)
        queue = queue_fields(log.created)
        if queue is not None and admission is None and log.status != "cancelled":
            raise RunQueuedError(run_id, queue["name"])
    ctx = RunContext(world=world, workflow=wf, run_id=run_id, input=input, log=log,
                     pipeline=pipeline, run_child=arun_single)
    ctx.suspend = suspend
    ctx.parent_seen = parent_seen
    try:
        return await observe_run(ctx, _execute_run(ctx, wf, input, input_hash, parent_run_id,
                                                    deadline, admission))
    except RunFinishedError:
        # Another writer ended the run after it was read (a holder that lost its lease
        # got its last events in first; a canceller that saw no holder): the log says
        # how it ended, and that is this call's answer.
        await offload(world, ctx.fold_new_events)
        if ctx.log.status == "completed":
            return _result(world, ctx.log, wf)
        if ctx.log.status == "failed":
            raise WorkflowFailedError(run_id, None, stored_value(world, ctx.log.error) or {}) from None
        if ctx.log.status == "cancelled":
            raise RunCancelledError(run_id, requested_reason(ctx.log)) from None
        raise


async def _execute_run(ctx: RunContext, wf: Workflow[Any, Any], input: Any, input_hash: str,
                       parent_run_id: str | None,
                       deadline: tuple[float | None, float | None],
                       admission: Any = None) -> RunResult[Any]:
    world, run_id, log = ctx.world, ctx.run_id, ctx.log
    resuming = log.created is not None
    if not resuming:
        # A sub-run names its parent, so the catalogue can list a pipeline's runs.
        extra = {"parentRunId": parent_run_id} if parent_run_id else {}
        seconds, cap = deadline
        # Counted from now: run.created is the next record (a resume keeps the stored one).
        extra.update(deadline_record(world.clock.now(), seconds, cap))
        await create_run(ctx, wf, input, input_hash, extra or None)
    if deadline_passed(ctx.log, world.clock.now()):  # then it is cancelled here
        await offload(world, request_cancel_if_past, ctx)
    if (log.created or {}).get("parentRunId"):
        await offload(world, cancel_if_parent_cancelled, ctx)
    await cancelled_on_entry(ctx)
    if resuming:
        await offload(world, refuse_other_versions, world, log, wf)
    started = {"start": log.starts + 1, "version": wf.code_version}
    if admission is not None:
        started.update(admission.started_fields())  # the queue, and when it counted
    ctx.begin_execution(await ctx.append("run.started", started, durable=False))
    ctx.watch = RunWatch(ctx, deadline=deadline_of(log),
                         on_deadline=functools.partial(request_cancel_if_past, ctx)).start()
    ctx.body_task = asyncio.current_task()
    try:
        with running(ctx):
            returned = await wf.fn(ctx, decode_input(wf, input, run_id))
            output, typed_output = encode_output(wf, returned, run_id)
            output = thaw(output)
        # Returning is new too: the log may hold records this code never asked for.
        ctx.check_history("run.completed", {})
    except RunSuspended as s:
        return RunResult(run_id=run_id, status="waiting", workflow_id=wf.id, waiting=s.waiting)
    except asyncio.CancelledError:
        stop_if_superseded(ctx)  # raises LeaseLostError when another execution started
        await finish_if_cancelled(ctx)  # raises RunCancelledError when cancel_run asked
        raise  # not a failure of the run: it stays unfinished and resumable
    except (KeyboardInterrupt, SystemExit, StorageError, LeaseLostError, ClockStalledError,
            RunLockedError, ReplayDivergenceError, WorkflowVersionError):
        # Not a failure of the run: it stays unfinished and resumable. (RunLockedError:
        # a sub-run another process executes; the last two: this code may not run it.)
        raise
    except Exception as e:
        await finish_if_cancelled(ctx)  # a cancelled run is cancelled, not failed
        failure = failure_payload(e)
        await ctx.append("run.failed", failure)
        raise WorkflowFailedError(run_id, e, failure["error"], failure["traceback"]) from e
    finally:
        ctx.watch.stop()
    try:
        wf.validate_output(output)
    except SchemaValidationError as e:
        await ctx.append("run.failed", failure_payload(e))
        raise OutputSchemaError(run_id, e) from e
    payload: dict[str, Any] = {}
    if output is not None and len(canonical_json(output)) > INLINE_OUTPUT_LIMIT:
        manifest = await offload(world, world.write_artifact, run_id, "", "run-output", output)
        payload["outputRef"] = manifest.artifact_ref
    else:
        payload["output"] = output
    await ctx.append("run.completed", payload)
    return RunResult(run_id=run_id, status="completed", output=typed_output, workflow_id=wf.id)


TRACEBACK_FRAMES = 50  # the innermost ones, per exception of the chain
TRACEBACK_BYTES = 8 * 1024


def failure_payload(e: BaseException) -> dict[str, Any]:
    """`run.failed`'s payload: the error's `{type, message}` and its traceback as Python
    prints it (causes first), so a failure can be read where it happened, later, from the
    log alone. Bounded: the innermost frames of each exception, then at most 8 KiB, cut in
    the middle (the head names the first cause, the tail the exception the run ended on)."""
    tb = "".join(traceback.TracebackException.from_exception(e, limit=-TRACEBACK_FRAMES).format())
    data = tb.encode()
    if len(data) > TRACEBACK_BYTES:
        head = data[: TRACEBACK_BYTES // 4].decode(errors="ignore")
        tail = data[-(TRACEBACK_BYTES * 3 // 4 - 64):].decode(errors="ignore")
        tb = f"{head}\n  ... {len(data) - len(head.encode()) - len(tail.encode())} bytes cut ...\n{tail}"
    return {"error": error_record(e), "traceback": tb}


def create_run_sync(ctx: RunContext, wf: Workflow[Any, Any], input: Any, input_hash: str,
                    extra: dict[str, Any] | None = None) -> None:
    """Write a new run: its version record, index entry, `run.created`. Its scratch
    folder is made by the first view of it (`ctx.scratch`): most runs never use one, and
    making it costs two directory fsyncs."""
    world = ctx.world
    register_version(world, wf)
    mark_active(world, ctx.run_id, wf.id)  # before run.created
    ctx.append_sync("run.created", {
        "workflowId": wf.id, "workflowVersionId": wf.version_id, "version": wf.code_version,
        "definitionHash": wf.definition_hash, "input": input, "inputHash": input_hash,
        **(extra or {}), **run_created_fields(ctx),
    })


async def create_run(ctx: RunContext, wf: Workflow[Any, Any], input: Any, input_hash: str,
                     extra: dict[str, Any] | None = None) -> None:
    # One thread hop for the three writes (each may block on an fsync or the network).
    await offload(ctx.world, create_run_sync, ctx, wf, input, input_hash, extra)


def _result(world: WorldLike, log: RunLog, wf: Workflow[Any, Any] | None) -> RunResult[Any]:
    output = decode_output(wf, stored_value(world, log.output, log.output_ref), log.run_id)
    created = log.created or {}
    return RunResult(
        run_id=log.run_id, status=log.status, output=output,
        workflow_id=created.get("workflowId") or (wf.id if wf else None),
    )


def materialize_run_state(world: WorldLike, run_id: str) -> RunState:
    """Fold a run's events into its state (status, steps, output)."""
    validate_run_id(run_id)
    events = world.list_events(run_id)
    return materialize(RunLog.fold(run_id, events), functools.partial(stored_value, world))


async def areplay_run(world: WorldLike, run_id: str, wf: Workflow[Any, Out]) -> RunResult[Out]:
    validate_run_id(run_id)
    events = await offload(world, world.list_events, run_id)
    log = RunLog.fold(run_id, events)
    if log.created is None:
        raise ReplayDivergenceError(run_id, "-", "the log holds no run.created event")
    input = stored_value(world, log.created.get("input"))
    ctx = RunContext(world=world, workflow=wf, run_id=run_id, input=input, log=log,
                     mode="replay", run_child=arun_single)
    ctx.body_task = asyncio.current_task()  # its steps come in the log's order, as on resume
    try:
        with running(ctx):
            returned = await wf.fn(ctx, decode_input(wf, input, run_id))
            output, typed_output = encode_output(wf, returned, run_id)
            wf.validate_output(thaw(output))  # a run whose output broke its schema failed so
        # As on resume: the log may hold records this code never asked for.
        ctx.check_history("run.completed", {})
    except ReplayDivergenceError as e:
        rec = log.steps.get(e.step_path)
        if log.status == "cancelled" and (rec is None or rec.status == "running"):
            # The log of a cancelled run ends where the cancellation stopped it.
            return RunResult(run_id=run_id, status="cancelled", workflow_id=wf.id)
        raise
    except RunSuspended as s:
        if log.status == "cancelled":
            return RunResult(run_id=run_id, status="cancelled", workflow_id=wf.id)
        return RunResult(run_id=run_id, status="waiting", workflow_id=wf.id, waiting=s.waiting)
    except Exception as e:
        return _replay_failure(world, log, wf, e)
    if log.status == "failed":
        raise ReplayDivergenceError(run_id, "", f"the log says the run {_logged_end(world, log)}, "
                                    "but the code completed")
    return RunResult(run_id=run_id, status="completed", output=typed_output, workflow_id=wf.id)


def _replay_failure(world: WorldLike, log: RunLog, wf: Workflow[Any, Any],
                    e: Exception) -> RunResult[Any]:
    """The code raised `e` on replay: that is the run's outcome only where the log says the
    run failed with an error of the same type; anywhere else — a completed run, an
    unfinished one, another error — the code no longer fits the log."""
    error = stored_value(world, log.error) if log.status == "failed" else None
    if isinstance(error, dict) and error.get("type") == type(e).__name__:
        return RunResult(run_id=log.run_id, status="failed", workflow_id=wf.id)
    raise ReplayDivergenceError(
        log.run_id, "", f"the log says the run {_logged_end(world, log)}, but the code raised "
        f"{type(e).__name__}: {e}") from e


def _logged_end(world: WorldLike, log: RunLog) -> str:
    if log.status == "failed":
        error = stored_value(world, log.error)
        return "failed with " + (failure_text(log.run_id, error) if isinstance(error, dict)
                                 else "no recorded error")
    return {"completed": "completed", "cancelled": "was cancelled"}.get(
        log.status, f"is {log.status} (not finished)")


def replay_run(world: WorldLike, run_id: str, wf: Workflow[Any, Out]) -> RunResult[Out]:
    """Re-execute `wf` against the run's log, calling no step. Raises
    `ReplayDivergenceError` by the rules resuming checks (history.py): when the code asks
    for steps the log does not hold, or the body's steps in another order (concurrent
    tasks' steps come in any order), or returns without asking for records the log holds,
    or ends another way than the log says (raises where the run completed or is
    unfinished, fails with another error type, completes where the run failed) — the way
    to check a code change against old runs."""
    return run_sync(lambda: areplay_run(world, run_id, wf))


__all__ = [
    "areplay_run",
    "arun_single",
    "materialize_run_state",
    "replay_run",
]
