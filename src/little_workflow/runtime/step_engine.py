"""The step engine: `ctx.step` served from the log or executed — attempts, retries,
timeouts (an overrunning sync step's thread abandoned, never overlapped), the World's
step slots, and the success recorded unless another holder's came first."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any, Awaitable, Callable, Literal, TypeVar, TypeVarTuple, overload

from ..errors import (
    FatalError,
    ReplayDivergenceError,
    StepError,
    StepFailedError,
    StepTimeoutError,
)
from ..world.ids import canonical_json, validate_step_path
from ..world.protocol import WorldLike
from ..world.vocabulary import INLINE_LIMIT
from .claims import PathDigests
from .codec import Codec, return_codec
from .history import Key
from .recording import RunRecorder
from .state import RunLog, StepRecord
from .steps import (
    NO_RETRY,
    Retry,
    StepInfo,
    StepSlot,
    call_step_fn,
    current_group,
    error_record,
    release_enclosing_slot,
    reset_current,
    set_current,
)
from .telemetry import step_attempt
from .values import decode_stored, encode_step_output, stored_value

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

#: Step outputs larger than this (canonical JSON bytes) go to an artifact, not the event.
INLINE_OUTPUT_LIMIT = INLINE_LIMIT

Mode = Literal["execute", "replay"]


class StepEngine(RunRecorder):
    """The stepping half of a RunContext (its base class): step paths, `step`, and how
    one step is served, replayed or executed."""

    def __init__(self, *, world: WorldLike, run_id: str, log: RunLog, mode: Mode):
        super().__init__(world=world, run_id=run_id, log=log)
        self.mode = mode
        if self.history is not None:
            self.history.resuming = mode == "execute"
        # The paths this execution took, as digests (a long run keeps no string per step),
        # and exactly the taken paths whose step.started this execution has not appended:
        # a digest taken twice is checked against those and the log (`_taken`).
        self._claimed = PathDigests()
        self._unlogged: set[str] = set()
        # Threads of sync steps that overran their timeout and still run: no retry of that
        # step starts before its thread has returned (one attempt at a time).
        self._abandoned: dict[str, threading.Event] = {}

    @property
    def replaying(self) -> bool:
        return self.mode == "replay"

    # ---- paths ----------------------------------------------------------------------

    def _claim(self, path: str) -> None:
        validate_step_path(path)
        if not self._claimed.add(path) and self._taken(path):
            raise StepError(self.run_id, path, "this step path is already used in this run; "
                            "step paths must be unique")
        self._unlogged.add(path)

    def _taken(self, path: str) -> bool:
        """Whether this execution took `path` already, asked when its digest is taken
        (a path used twice, or two paths with one digest): the paths not in `_unlogged`
        are those whose step.started it appended, after its own run.started (no other
        executor appends after that: the log fences them)."""
        if path in self._unlogged:
            return True
        return any(e.type == "step.started" and isinstance(e.payload, dict)
                   and e.payload.get("stepPath") == path
                   for e in self.world.list_events(self.run_id, after=self.started_sequence))

    def claim_path(self, path: str) -> None:
        """Check a step path and take it for this run (unique per run)."""
        self._claim(path)

    def _check_order(self, key: Key, first_sequence: int) -> None:
        """A step served to the body comes in the log's order: no earlier step of the
        log may still be waiting to be asked for. The one order rule of resume and replay:
        steps of other tasks (a parallel group's, a bare gather's, an agent framework's
        parallel tool calls) are logged in the order they ran, not the order they are
        asked for again."""
        history = self.history
        if history is None:
            return
        earlier = history.first_due_step()
        if earlier is not None and earlier.sequence < first_sequence and self._in_body():
            raise history.diverge(self.log, earlier, "step.started", {}, key)

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
        self._check_order(("step", path), rec.first_sequence)
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
        threaded = current_group() is not None
        slots = self.world.step_slots if self.world.max_concurrent_steps else None
        while True:
            earlier = self._abandoned.pop(path, None)
            if earlier is not None:
                await asyncio.to_thread(earlier.wait)  # one attempt at a time
            attempt += 1
            # Not fsynced on its own: the step's success (or the next durable event) makes
            # it durable; losing it in a power cut only forgets an attempt number.
            await self.append("step.started", {"stepPath": path, "attempt": attempt}, durable=False)
            self._unlogged.discard(path)  # the log names it now
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
            # Nothing in this execution asks for this step's record again (its path is
            # taken): a long run would otherwise hold one record per step until its end.
            del self.log.steps[path]
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


def _consume_result(work: "asyncio.Future[Any]") -> None:
    # An abandoned step's late result or error is of no use to anyone; reading it keeps
    # asyncio from reporting "exception was never retrieved".
    if not work.cancelled():
        work.exception()


def _is_small_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float))

