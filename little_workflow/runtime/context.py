"""RunContext: what a workflow function gets. Steps, parallel groups, replay checks."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Literal,
    TypeVar,
    TypeVarTuple,
    overload,
)

from ..errors import (
    FatalError,
    IdempotencyConflictError,
    LeaseLostError,
    ReplayDivergenceError,
    StepError,
    StepFailedError,
    StepTimeoutError,
)
from ..world import incarnations
from ..world.core import World
from ..world.ids import canonical_json, validate_name, validate_step_path
from ..world.models import Event
from .active_index import TERMINAL_EVENTS, mark_finished
from .bash_steps import BashResult, run_bash_step
from .codec import Codec, codec_for, return_codec
from .history import FREE_EVENTS, Key, RunHistory
from .loops import may_block_loop
from .memory import RunMemory
from .pipeline import call_workflow
from .plans import Plans
from .state import RunLog, StepRecord
from .steps import (
    NO_RETRY,
    Retry,
    StepInfo,
    StepSlot,
    call_step_fn,
    error_record,
    release_enclosing_slot,
    reset_current,
    set_current,
)
from .telemetry import step_attempt
from .values import decode_stored, encode_step_output, stored_value
from .waiting import announce

if TYPE_CHECKING:
    from uuid import UUID

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

#: Step outputs larger than this (canonical JSON bytes) go to an artifact, not the event.
INLINE_OUTPUT_LIMIT = 64 * 1024

Mode = Literal["execute", "replay"]


@dataclass
class _Group:
    floor: int
    highest: int = 0


_group: contextvars.ContextVar[_Group | None] = contextvars.ContextVar("lw_group", default=None)
_current_run: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "little_workflow_current_run", default=None)


def current_run() -> RunContext | None:
    """The RunContext of the workflow whose code is running here, or None outside a run.
    Set for the workflow body and everything it calls (step functions included: check
    `lw.current_step()` to tell them apart), so a library called from a workflow (an agent
    framework's durability hook) can make its own durable steps without being handed ctx."""
    return _current_run.get()


@contextlib.contextmanager
def running(ctx: RunContext) -> Iterator[None]:
    """Make `ctx` what current_run() returns while a workflow body runs."""
    token = _current_run.set(ctx)
    try:
        yield
    finally:
        _current_run.reset(token)


class RunContext:
    """Handed to the workflow function: `await ctx.step(...)`, `await ctx.parallel(...)`."""

    suspend = False  # run_workflow(suspend=True): a run that must wait stops instead
    watch: Any = None  # waiting.RunWatch while this process executes the run
    body_task: "asyncio.Task[Any] | None" = None  # the task running the workflow body
    #: This execution's `start` (DESIGN §15), stamped on every record it appends; None
    #: before its `run.started` (and in replay).
    incarnation: int | None = None
    started_sequence = 0  # the sequence of this execution's run.started
    #: Why this execution must stop: another one started after it (read from the log).
    superseded: str | None = None
    #: telemetry.RunTelemetry while this execution reports to OpenTelemetry, else None.
    telemetry: Any = None

    def __init__(
        self,
        *,
        world: World,
        workflow: Any,
        run_id: str,
        input: Any,
        log: RunLog,
        mode: Mode = "execute",
        pipeline: Any = None,
        run_child: Callable[..., Any] | None = None,
    ):
        self.world = world
        self.workflow = workflow
        self.run_id = run_id
        self.input = input
        self.log = log
        self.mode = mode
        self.pipeline = pipeline
        #: Starts a sub-run (pipelines): `await run_child(wf, input, world=, run_id=, pipeline=)`.
        self.run_child = run_child
        self._claimed: set[str] = set()
        self._floor = 0
        self._log_lock = threading.Lock()
        self._memory: RunMemory | None = None
        self._plans: Plans | None = None
        self._calls = 0  # sub-workflow calls made so far (pipelines)
        # Threads of sync steps that overran their timeout and still run: no retry of that
        # step starts before its thread has returned (one attempt at a time).
        self._abandoned: dict[str, threading.Event] = {}
        #: What the log held when this execution began, and what the code has asked for
        #: again (history.py); None for a new run.
        self.history: RunHistory | None = RunHistory.of(log)

    @property
    def workflow_id(self) -> str:
        return self.workflow.id

    @property
    def replaying(self) -> bool:
        return self.mode == "replay"

    # ---- appends --------------------------------------------------------------------

    def begin_execution(self, started: Event) -> None:
        """`started` is this execution's `run.started`: from now on every record carries
        its incarnation, and another execution's start ends this one."""
        self.incarnation = int(started.payload["start"])
        self.started_sequence = started.sequence

    def check_fence(self) -> None:
        """LeaseLostError once another execution of the run started after this one."""
        if self.superseded is not None:
            raise LeaseLostError(self.run_id, self.superseded)

    def _stamped(self, payload: Any) -> Any:
        if self.incarnation is None:
            return payload
        if self.superseded is not None:
            self.check_fence()  # a superseded execution appends nothing more
        if isinstance(payload, dict):
            return {**payload, incarnations.INCARNATION: self.incarnation}
        return payload

    def _as_first_written(self, conflict: IdempotencyConflictError, payload: Any) -> Any:
        """A keyed record written again by a later execution (a memory write in the body,
        a restarted harness call, a sub-run entered again) differs from the first only by
        its incarnation: the payload as that execution stamped it, so the World answers
        with the first record. None when the records really differ."""
        if self.incarnation is None or conflict.sequence is None or not isinstance(payload, dict):
            return None
        earlier = self.world.read_event(self.run_id, conflict.sequence)
        first = earlier.payload.get(incarnations.INCARNATION) \
            if isinstance(earlier.payload, dict) else None
        if first == self.incarnation:
            return None
        return dict(payload) if first is None else {**payload, incarnations.INCARNATION: first}

    def append_sync(
        self, type_: str, payload: Any, *, idempotency_key: str | None = None, durable: bool = True
    ) -> Event:
        self.check_history(type_, payload)
        stamped = self._stamped(payload)
        try:
            event = self.world.append_event(
                self.run_id, type_, stamped, idempotency_key=idempotency_key, durable=durable
            )
        except IdempotencyConflictError as e:
            first = self._as_first_written(e, payload)
            if first is None:
                raise
            event = self.world.append_event(
                self.run_id, type_, first, idempotency_key=idempotency_key, durable=durable)
        self._fold_own(event)
        if type_ in TERMINAL_EVENTS:
            mark_finished(self.world, self.run_id)  # after the terminal event
            announce(self.world, self.run_id)  # handles waiting for the result, stream readers
        return event

    async def append(
        self, type_: str, payload: Any, *, idempotency_key: str | None = None, durable: bool = True
    ) -> Event:
        if self.history is not None:
            await self._settle_history(type_, payload)
        if durable and self.world.blocking and not may_block_loop():
            # An fsync or a network round trip: keep the event loop free for the other
            # tasks (sibling steps, the caller's app). Alone on a loop of ours the thread
            # hop would only add latency, so a serial workflow appends inline; so do
            # non-durable appends,
            # whose commit is short (measured: moving them to threads halved the
            # throughput of a parallel group on local_world).
            return await asyncio.to_thread(
                self.append_sync, type_, payload, idempotency_key=idempotency_key, durable=durable
            )
        if _group.get() is None:
            return self.append_sync(type_, payload, idempotency_key=idempotency_key,
                                    durable=durable)
        # In a parallel group: hand the event to the store, let the sibling tasks hand
        # theirs too, then wait — appends that arrive together share one commit.
        stamped = self._stamped(payload)
        try:
            pending = self.world.submit_event(
                self.run_id, type_, stamped, idempotency_key=idempotency_key, durable=durable
            )
        except IdempotencyConflictError as e:
            first = self._as_first_written(e, payload)
            if first is None:
                raise
            pending = self.world.submit_event(
                self.run_id, type_, first, idempotency_key=idempotency_key, durable=durable)
        try:
            if not pending.done:
                await asyncio.sleep(0)
        finally:
            event = pending.result()
            self._fold_own(event)
        return event

    def _fold_own(self, event: Event) -> None:
        """Fold an event this run appended into its log. Its sequence tells whether
        anyone else wrote since the last event folded: the next one is the hot path (no
        read); a jump means others got events in first — another process, `send_event`,
        `cancel_run`, a holder that lost its lease. Then storage decides: what this run
        has not seen is read and folded in log order before the run goes on (DESIGN §13)."""
        with self._log_lock:
            last = self.log.last_sequence
            if event.sequence == last + 1:
                self.log.apply(event)
                return
            if event.sequence <= last:
                return  # folded already: read back with others' events, or a receipt
            others = self._fold_from_storage()
            if event.sequence > self.log.last_sequence:  # storage did not show it yet
                self.log.apply(event)
        if self.watch is not None and any(e.sequence != event.sequence for e in others):
            self.watch.wake()

    def _fold_from_storage(self) -> list[Event]:
        events = self.world.list_events(self.run_id, after=self.log.last_sequence)
        for e in events:
            self.log.apply(e)
            if self.incarnation is not None and self.superseded is None \
                    and incarnations.started_elsewhere(self.started_sequence, e):
                self.superseded = (
                    f"execution {e.payload.get('start')} of this run started at sequence "
                    f"{e.sequence}, after this one ({self.incarnation}), which stops")
        return events

    def fold_new_events(self) -> list[Event]:
        """Read what was appended to this run after the last event folded into its log
        (by anyone) and fold it in; returns those events."""
        with self._log_lock:
            return self._fold_from_storage()

    # ---- the log's history, asked for again (history.py) ------------------------------

    def asked(self, key: Key) -> None:
        """The code asked for a record the log may hold (it need not ask for it again)."""
        if self.history is not None:
            self.history.ask(key)

    def _in_body(self) -> bool:
        """Running in the workflow body's own task (not a parallel group's, a gathered
        one's, or a thread): its order is the log's order."""
        if _group.get() is not None:
            return False
        try:
            task = asyncio.current_task()
        except RuntimeError:  # a thread: its task checked before handing the append over
            return False
        return self.body_task is None or task is self.body_task

    def check_history(self, type_: str, payload: Any) -> None:
        """Before this execution appends anything: every record the log held when it
        began must have been asked for again (`ReplayDivergenceError` otherwise). Only
        the body's task is checked here: other tasks go through `append`, which lets
        their siblings ask for their records first."""
        history = self.history
        if history is None or type_ in FREE_EVENTS:
            return
        if history.diverged is not None:
            raise history.diverged
        due = history.first_due()
        if due is not None and self._in_body():
            raise history.diverge(self.log, due, type_, payload)

    async def _settle_history(self, type_: str, payload: Any) -> None:
        """`check_history` for `append`, where another task than the body's that finds a
        record still due first lets its siblings ask for theirs."""
        history = self.history
        if history is None or type_ in FREE_EVENTS:
            return
        if history.diverged is not None:
            raise history.diverged
        due = history.first_due()
        if due is None:
            return
        if not self._in_body():
            due = await history.settle()
            if due is None:
                return
        raise history.diverge(self.log, due, type_, payload)

    def _check_order(self, key: Key, first_sequence: int) -> None:
        """A step served to the body comes in the log's order: no earlier step of the
        log may still be waiting to be asked for."""
        history = self.history
        if history is None:
            return
        earlier = history.first_due_step()
        if earlier is not None and earlier.sequence < first_sequence and self._in_body():
            raise history.diverge(self.log, earlier, "step.started", {}, key)

    def patched(self, patch_id: str) -> bool:
        """Whether this code reaches here in a run that takes the patched path: True in a
        run whose log holds no later record (recorded as `patch.marked {patchId}`, so a
        resume and a replay answer True again), False in a run whose log already went
        past this point without the marker (nothing is recorded). Lets one body serve
        runs started before a change and runs started after it:

            if ctx.patched("search-v2"):
                found = await ctx.step("search_tool", search)
            else:
                found = await ctx.step("tool", old_search)
        """
        validate_name("patch id", patch_id)
        key = ("patch", patch_id)
        if key in self.log.marks:
            self.asked(key)
            return True
        if self.history is not None and self.history.ahead:
            return False
        if not self.replaying:
            self.append_sync("patch.marked", {"patchId": patch_id})
        return True

    # ---- paths ----------------------------------------------------------------------

    def _claim(self, path: str) -> None:
        validate_step_path(path)
        if path in self._claimed:
            raise StepError(self.run_id, path, "this step path is already used in this run; "
                            "step paths must be unique")
        self._claimed.add(path)

    def scratch_view(self, *parts: str) -> Any:
        """A folder under `runs/<runId>/` as an fsspec filesystem (through the World)."""
        return self.world.file_view("/".join(("runs", self.run_id, *parts)))

    @property
    def scratch(self) -> Any:
        """The run's scratch folder (`runs/<runId>/scratch/`) as an fsspec filesystem."""
        return self.scratch_view("scratch")

    def next_call_index(self) -> int:
        """The index of the next sub-workflow call (pipelines), in call order."""
        index = self._calls
        self._calls += 1
        return index

    # ---- steps ----------------------------------------------------------------------

    # Typed for callers: the result is what `fn` returns (awaited when `fn` is async), and
    # `*args` are checked against `fn`'s parameters.
    @overload
    async def step(self, path: str, fn: Callable[[*Ts], Awaitable[T]], *args: *Ts,  # type: ignore[overload-overlap]
                   retry: Retry | None = None, timeout: float | None = None) -> T: ...

    @overload
    async def step(self, path: str, fn: Callable[[*Ts], T], *args: *Ts,
                   retry: Retry | None = None, timeout: float | None = None) -> T: ...

    async def step(  # type: ignore[misc]  # mypy cannot match *args: Any to *Ts
        self,
        path: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: Retry | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Run `fn(*args)` once, durably: a committed result is served from the log."""
        return await self._step(path, fn, args, retry, timeout, group_child=False)

    async def _step(
        self,
        path: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        retry: Retry | None,
        timeout: float | None,
        *,
        group_child: bool,
    ) -> Any:
        self._claim(path)
        release_enclosing_slot()
        if not callable(fn):
            raise StepError(self.run_id, path, f"{fn!r} is not callable")
        rec = self.log.steps.get(path)
        self.asked(("step", path))
        codec = return_codec(fn)
        if self.mode == "replay":
            return self._replayed(path, rec, codec)
        if rec is not None and rec.status != "running":
            self._check_order(("step", path), rec.first_sequence)
            return self._served(rec, codec)
        if self.watch is not None:
            self.watch.at_boundary()  # a cancelled run stops before its next step
        return await self._execute(path, fn, args, retry or NO_RETRY, timeout, rec, codec,
                                   durable=not group_child)

    def _served(self, rec: StepRecord, codec: Codec) -> Any:
        if rec.status == "failed":
            raise StepFailedError(self.run_id, rec.path, stored_value(self.world, rec.error) or {})
        return decode_stored(codec, stored_value(self.world, rec.output, rec.output_ref),
                             self.run_id, rec.path, "output")

    def _replayed(self, path: str, rec: StepRecord | None, codec: Codec) -> Any:
        if rec is None or rec.status == "running":
            raise ReplayDivergenceError(
                self.run_id, path, "the code asks for a step the log holds no finished record of"
            )
        group = _group.get()
        floor = group.floor if group is not None else self._floor
        if rec.first_sequence <= floor:
            raise ReplayDivergenceError(
                self.run_id, path, "the code asks for this step in another order than the log"
            )
        if group is not None:
            group.highest = max(group.highest, rec.first_sequence)
        else:
            self._floor = rec.first_sequence
        return self._served(rec, codec)

    async def _execute(
        self,
        path: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        policy: Retry,
        timeout: float | None,
        rec: StepRecord | None,
        codec: Codec,
        *,
        durable: bool,
    ) -> Any:
        """`durable=False` (children of a parallel group): the success is committed but
        not synced here; the group syncs once when it completes, before the workflow
        goes on. It survives a process kill either way."""
        attempt = rec.attempts if rec else 0
        failures = rec.failures if rec else 0
        threaded = _group.get() is not None
        slots = self.world.step_slots if self.world.max_concurrent_steps else None
        while True:
            earlier = self._abandoned.pop(path, None)
            if earlier is not None:
                await asyncio.to_thread(earlier.wait)  # one attempt at a time
            attempt += 1
            # Not fsynced on its own: the step's success (or the next durable event) makes
            # it durable; losing it in a power cut only forgets an attempt number.
            await self.append("step.started", {"stepPath": path, "attempt": attempt}, durable=False)
            recorded = self._recorded_success(path)
            if recorded is not None:  # another holder's success came in first
                return self._served(recorded, codec)
            info = StepInfo(run_id=self.run_id, step_path=path, attempt=attempt, _ctx=self)
            token = set_current(info)
            try:
                if slots is not None:
                    info.slot = StepSlot(slots)
                    await info.slot.acquire()
                with step_attempt(self, path, attempt):
                    try:
                        result = await self._invoke(path, fn, args, timeout, threaded, info)
                    finally:
                        if info.slot is not None and path not in self._abandoned:
                            info.slot.release()
                    # Encoded and decoded before anything is recorded: a value that does not
                    # fit its annotation is this attempt's failure, never a success.
                    value, typed = encode_step_output(codec, result, self.run_id, path)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if isinstance(e, ReplayDivergenceError):
                    raise  # found by a nested step: not a failure of this one
                failures += 1
                fatal = isinstance(e, (FatalError, StepError))
                will_retry = not fatal and failures < policy.max_attempts
                await self.append(
                    "step.failed",
                    {"stepPath": path, "attempt": attempt, "error": error_record(e),
                     "willRetry": will_retry},
                )
                if will_retry:
                    await asyncio.sleep(policy.delay(failures))
                    continue
                raise StepFailedError(self.run_id, path, error_record(e)) from e
            finally:
                reset_current(token)
            recorded = self._recorded_success(path)
            if recorded is not None:
                # Another holder (one that lost its lease while this attempt ran) recorded
                # this step's success: that output is the step's, this attempt ends here.
                return self._served(recorded, codec)
            payload: dict[str, Any] = {"stepPath": path, "attempt": attempt}
            encoded_size = len(canonical_json(value)) if not _is_small_scalar(value) else 0
            if encoded_size > INLINE_OUTPUT_LIMIT:
                manifest = await self._blocking(
                    self.world.write_artifact, self.run_id, path, "output", value
                )
                payload["outputRef"] = manifest.artifact_ref
            else:
                payload["output"] = value
            event = await self.append("step.succeeded", payload, durable=durable)
            rec = self.log.steps[path]
            if rec.succeeded_at != event.sequence:  # another success landed first: it wins
                return self._served(rec, codec)
            return typed

    def _recorded_success(self, path: str) -> StepRecord | None:
        """The step's success as the log holds it, once folded in from another writer."""
        rec = self.log.steps.get(path)
        return rec if rec is not None and rec.status == "succeeded" else None

    async def _invoke(
        self, path: str, fn: Callable[..., Any], args: tuple[Any, ...], timeout: float | None,
        threaded: bool, info: StepInfo,
    ) -> Any:
        if timeout is None:
            return await call_step_fn(fn, args, threaded=threaded)
        if inspect.iscoroutinefunction(fn):
            try:
                return await asyncio.wait_for(fn(*args), timeout)  # cancelled on timeout
            except TimeoutError:
                raise StepTimeoutError(path, timeout) from None
        # A sync function cannot be stopped: on timeout its thread is abandoned. It keeps
        # its world slot until it returns, and no retry starts before then.
        finished = threading.Event()
        lock = threading.Lock()
        abandoned = False

        def run() -> Any:
            nonlocal abandoned
            try:
                return fn(*args)
            finally:
                with lock:
                    finished.set()
                    if abandoned and info.slot is not None:
                        info.slot.release()

        work = asyncio.ensure_future(asyncio.to_thread(run))
        try:
            return await asyncio.wait_for(asyncio.shield(work), timeout)
        except TimeoutError:
            with lock:
                if not finished.is_set():
                    abandoned = True
                    self._abandoned[path] = finished
            work.add_done_callback(_consume_result)
            raise StepTimeoutError(path, timeout) from None

    async def _blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self.world.blocking:
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    # Typed for callers: a list of what the callables return (awaited when async).
    @overload
    async def parallel(self, path: str, callables: Iterable[Callable[[], Awaitable[T]]],  # type: ignore[overload-overlap]
                       max_concurrency: int | None = None, *, retry: Retry | None = None,
                       timeout: float | None = None) -> list[T]: ...

    @overload
    async def parallel(self, path: str, callables: Iterable[Callable[[], T]],
                       max_concurrency: int | None = None, *, retry: Retry | None = None,
                       timeout: float | None = None) -> list[T]: ...

    async def parallel(
        self,
        path: str,
        callables: Iterable[Callable[[], Any]],
        max_concurrency: int | None = None,
        *,
        retry: Retry | None = None,
        timeout: float | None = None,
    ) -> list[Any]:
        """Run each zero-argument callable as durable step `path/<index>`; results in
        input order. `retry` and `timeout` apply to each child as in `step`. A failing
        child (after its retries) cancels its siblings. The group takes no step slot."""
        self._claim(path)
        release_enclosing_slot()
        children = list(callables)
        if max_concurrency is not None and max_concurrency < 1:
            raise StepError(self.run_id, path, "max_concurrency must be at least 1")
        group_slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        results: list[Any] = [None] * len(children)
        if self.history is not None:
            # The group asks for all its children at once: they run in any order.
            logged = [rec.first_sequence for i in range(len(children))
                      if (rec := self.log.steps.get(f"{path}/{i}")) is not None]
            for i in range(len(children)):
                self.asked(("step", f"{path}/{i}"))
            if logged and self.mode == "execute":
                self._check_order(("step", path), min(logged))

        async def child(i: int, fn: Callable[[], Any]) -> None:
            child_path = f"{path}/{i}"
            rec = self.log.steps.get(child_path)
            if group_slots is None or (rec is not None and rec.status != "running"):
                results[i] = await self._step(child_path, fn, (), retry, timeout, group_child=True)
                return
            async with group_slots:
                results[i] = await self._step(child_path, fn, (), retry, timeout, group_child=True)

        group = _Group(floor=self._floor)
        token = _group.set(group)
        try:
            async with asyncio.TaskGroup() as tg:
                for i, fn in enumerate(children):
                    tg.create_task(child(i, fn))
        except BaseExceptionGroup as eg:
            raise _first_leaf(eg) from None
        finally:
            _group.reset(token)
            if self.mode == "execute":
                # One sync for the whole group: every child's success is durable before
                # the workflow goes on (one fsync instead of one per child).
                await self._blocking(self.world.sync)
        if self.mode == "replay" and group.highest:
            self._floor = max(self._floor, group.highest)
        return results

    # ---- durable time and messages (timers.py, signals.py) ---------------------------

    def claim_path(self, path: str) -> None:
        """Check a step path and take it for this run (unique per run)."""
        self._claim(path)

    async def sleep(self, path: str, seconds: float) -> None:
        """A durable timer: the wake time is committed first; a resumed run sleeps only
        the time left."""
        from .timers import sleep_seconds

        await sleep_seconds(self, path, seconds)

    async def sleep_until(self, path: str, when: datetime | float) -> None:
        """Sleep until `when` (an aware datetime or epoch seconds), durably."""
        from .timers import sleep_until_time

        await sleep_until_time(self, path, when)

    # Typed for callers: `type=Approval` gives an `Approval | None`; without it, JSON.
    @overload
    async def wait_for_event(self, path: str, name: str, timeout: float | None = None,
                             ) -> Any | None: ...

    @overload
    async def wait_for_event(self, path: str, name: str, timeout: float | None = None, *,  # type: ignore[overload-overlap]
                             type: type[T]) -> T | None: ...

    @overload
    async def wait_for_event(self, path: str, name: str, timeout: float | None = None, *,
                             type: Any) -> Any | None: ...

    async def wait_for_event(self, path: str, name: str, timeout: float | None = None, *,
                             type: Any = None) -> Any | None:
        """The payload of the first event `name` sent to this run (`lw.send_event`) that
        no earlier wait took, or None once `timeout` seconds have passed. With `type=T`
        (a pydantic model, dataclass, or any annotation) the payload is decoded to a T,
        on the first run as on resume and replay (DESIGN §16); one that does not fit is
        a StepError naming the wait and the type."""
        from .signals import wait_for_event

        return await wait_for_event(self, path, name, timeout,
                                    codec_for(type) if type is not None else None)

    def now(self) -> datetime:
        """The World clock's time as an aware UTC datetime, recorded: a resumed or
        replayed run gets the same value."""
        from .timers import now

        return now(self)

    def uuid(self) -> UUID:
        """A random uuid.UUID, recorded: a resumed or replayed run gets the same value."""
        from .timers import new_uuid

        return new_uuid(self)

    # ---- features built on top (memory, plans, pipelines, bash) -----------------------

    @property
    def memory(self) -> RunMemory:
        """Memory stores: `.org` (read-only), `.pipeline`, `.workflow`; writes journaled."""
        if self._memory is None:
            self._memory = RunMemory(self)
        return self._memory

    @property
    def plans(self) -> Plans:
        """Kept plans: `keep(name, value)` and `reuse(name)`."""
        if self._plans is None:
            self._plans = Plans(self)
        return self._plans

    async def call_workflow(self, name: str, input: Any) -> Any:
        """Run pipeline member `name` as a sub-run (its id reserved in this run's log)."""
        return await call_workflow(self, name, input)

    async def bash(self, path: str, script: str, **options: Any) -> BashResult:
        """Run `script` in just-bash (a bash interpreter in Python: no host shell, no
        host files) as the durable step `path`, and return its result: a dict
        {"stdout", "stderr", "exitCode"} that also has `.stdout`, `.stderr`, `.exit_code`.
        A non-zero exit code is a result, not an error. A resumed run gets the recorded
        result without running the script again.

        The script sees views of this World: `/scratch` (this step's folder, read-write,
        the working directory), `/run` (the run's scratch), `/memory/org` (read-only),
        `/memory/pipeline` and `/memory/workflow` (writes journaled), `/skills/<name>`
        (the workflow's skills, read-only). Options: `mounts={"/at": lw.read_only("folder")
        | lw.file_mount("file") | "folder"}`, `env={...}`, `limits=...` (just-bash
        ExecutionLimits or a dict), `network=...` (no network unless given). Needs the
        `bash` extra (`pip install 'little-workflow[bash]'`); without it, raises
        `MissingExtraError`."""
        return await run_bash_step(self, path, script, **options)


def _consume_result(work: "asyncio.Future[Any]") -> None:
    # An abandoned step's late result or error is of no use to anyone; reading it keeps
    # asyncio from reporting "exception was never retrieved".
    if not work.cancelled():
        work.exception()


def _is_small_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float))


def _first_leaf(eg: BaseExceptionGroup) -> BaseException:
    exc: BaseException = eg
    while isinstance(exc, BaseExceptionGroup):
        non_cancel = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        exc = (non_cancel or list(exc.exceptions))[0]
    return exc
