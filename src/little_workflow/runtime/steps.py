"""Step policy and the per-step view: retries, current_step(), scratch folders,
harness (model/tool) calls recorded so a retried step never repeats a finished call,
and the parallel group a step runs in."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import random
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import NotInStepError
from ..world.ids import canonical_json, request_digest, sha256_hex
from ..world.models import thaw
from .values import stored_value


@dataclass(frozen=True)
class Retry:
    """Retry a failing step. `backoff` is the first delay in seconds (doubled each time,
    up to `max_backoff`, with ±`jitter` fraction) or a function attempt -> seconds."""

    max_attempts: int = 3
    backoff: float | Callable[[int], float] = 0.1
    multiplier: float = 2.0
    max_backoff: float = 30.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("Retry.max_attempts must be at least 1")

    def delay(self, failed_attempt: int) -> float:
        if callable(self.backoff):
            return max(0.0, float(self.backoff(failed_attempt)))
        base = min(self.backoff * self.multiplier ** (failed_attempt - 1), self.max_backoff)
        return max(0.0, base * (1 + random.uniform(-self.jitter, self.jitter)))


NO_RETRY = Retry(max_attempts=1)


def error_record(exc: BaseException) -> dict[str, Any]:
    # module + qualname: the type as data, so a failure served from the log can name (and
    # an integration can raise again) the exact class, not only its short name.
    cls = type(exc)
    return {"type": cls.__name__, "message": str(exc), "module": cls.__module__,
            "qualname": cls.__qualname__}


class StepSlot:
    """A world-wide step slot (`world.step_slots`), held while a step's function runs. A
    step whose function starts durable work of its own (a nested step or parallel group)
    becomes a container and gives its slot back, so nesting never deadlocks under
    `max_concurrent_steps`. Releasing is idempotent and safe from any thread (an
    abandoned step thread gives its slot back when it finally returns)."""

    def __init__(self, slots: Any):
        self._slots = slots
        self._held = False
        self._lock = threading.Lock()

    async def acquire(self) -> None:
        await self._slots.acquire()
        self._held = True

    def release(self) -> None:
        with self._lock:
            held, self._held = self._held, False
        if held:
            self._slots.release()


@dataclass
class StepInfo:
    """What `lw.current_step()` returns inside a step function."""

    run_id: str
    step_path: str
    attempt: int
    _ctx: Any = field(repr=False)
    _call_index: int = field(default=0, repr=False)
    _scratch: Any = field(default=None, repr=False)
    slot: StepSlot | None = field(default=None, repr=False)

    @property
    def world(self) -> Any:
        return self._ctx.world

    @property
    def scratch(self) -> Any:
        """This step's scratch folder as an fsspec filesystem rooted there."""
        if self._scratch is None:
            self._scratch = self._ctx.scratch_view("steps", *self.step_path.split("/"), "scratch")
        return self._scratch

    def _call_key(self, kind: str, name: str, request: Any) -> tuple[str, int, str]:
        index = self._call_index
        self._call_index += 1
        digest = request_digest(f"{kind}:{name}", request)
        key = "hc_" + sha256_hex(
            canonical_json(
                {"runId": self.run_id, "stepPath": self.step_path, "kind": kind,
                 "index": index, "requestDigest": digest}
            )
        )[:32]
        return key, index, digest

    def write_stream(self, key: str, value: Any) -> None:
        """Append `value` to the run's durable stream `key` (`lw.read_stream` readers see
        it at once). At least once: a step that runs again writes again. Committed now
        and synced with the step's success. A closed stream is a StepError."""
        from .streams import write_from_step

        write_from_step(self._ctx, self.step_path, self.attempt, key, value)

    async def awrite_stream(self, key: str, value: Any) -> None:
        """`write_stream` for async step functions: the write leaves the event loop free
        where the World's writes may block (local disk, object stores)."""
        from .streams import write_from_step

        if self._ctx.world.blocking:
            await asyncio.to_thread(write_from_step, self._ctx, self.step_path, self.attempt,
                                    key, value)
        else:
            write_from_step(self._ctx, self.step_path, self.attempt, key, value)

    def call_model(self, name: str, fn: Callable[[Any], Any], request: Any) -> Any:
        """Call a model through `fn(request)`, journaled as harness.model_call.*."""
        return self._harness_call("model_call", name, fn, request)

    def call_tool(self, name: str, fn: Callable[[Any], Any], args: Any) -> Any:
        """Call a tool through `fn(args)`, journaled as harness.tool_call.*."""
        return self._harness_call("tool_call", name, fn, args)

    def _harness_call(self, kind: str, name: str, fn: Callable[[Any], Any], request: Any) -> Any:
        key, index, _ = self._call_key(kind, name, request)
        ctx = self._ctx
        recorded = ctx.log.harness_results.get(key)
        base = {"stepPath": self.step_path, "name": name, "index": index, "callKey": key}

        def started() -> None:
            ctx.append_sync(f"harness.{kind}.started", {**base, "request": request},
                            idempotency_key=key + ":started", durable=False)

        def failed(e: BaseException) -> None:
            ctx.append_sync(f"harness.{kind}.failed", {**base, "error": error_record(e)})

        if inspect.iscoroutinefunction(fn):
            async def run_async() -> Any:
                if recorded is not None:
                    return stored_value(ctx.world, recorded.get("result"))
                started()
                try:
                    result = await fn(request)
                except BaseException as e:
                    failed(e)
                    raise
                return self._record_result(kind, key, base, result)

            return run_async()
        if recorded is not None:
            return stored_value(ctx.world, recorded.get("result"))
        started()
        try:
            result = fn(request)
        except BaseException as e:
            failed(e)
            raise
        return self._record_result(kind, key, base, result)

    def _record_result(self, kind: str, key: str, base: dict[str, Any], result: Any) -> Any:
        from .values import to_json_value

        value = to_json_value(result, self.run_id, f"{self.step_path} ({kind} {base['name']})")
        event = self._ctx.append_sync(
            f"harness.{kind}.succeeded", {**base, "result": value}, idempotency_key=key + ":succeeded"
        )
        self._ctx.log.harness_results[key] = dict(event.payload)
        return thaw(value)


_current: contextvars.ContextVar[StepInfo | None] = contextvars.ContextVar(
    "little_workflow_current_step", default=None
)


def current_step() -> StepInfo:
    info = _current.get()
    if info is None:
        raise NotInStepError("current_step() is only available inside a step function")
    return info


def current_step_or_none() -> StepInfo | None:
    """The running step, or None in a workflow body."""
    return _current.get()


def set_current(info: StepInfo | None) -> contextvars.Token[StepInfo | None]:
    return _current.set(info)


def release_enclosing_slot() -> None:
    """Called when durable work starts: an enclosing step is a container from now on."""
    outer = _current.get()
    if outer is not None and outer.slot is not None:
        outer.slot.release()


def reset_current(token: contextvars.Token[StepInfo | None]) -> None:
    _current.reset(token)


class Group:
    """The parallel group whose children run here (groups.py): their appends share
    commits, sync functions run in threads, and they are asked for in any order (the
    group as a whole comes in the log's order)."""


_group: contextvars.ContextVar[Group | None] = contextvars.ContextVar("lw_group", default=None)


def current_group() -> Group | None:
    """The parallel group running here, or None in the workflow body."""
    return _group.get()


def enter_group(group: Group) -> contextvars.Token[Group | None]:
    return _group.set(group)


def leave_group(token: contextvars.Token[Group | None]) -> None:
    _group.reset(token)


async def call_step_fn(fn: Callable[..., Any], args: tuple[Any, ...], *, threaded: bool) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn(*args)
    if threaded:
        # A sync function in a parallel group runs in a worker thread so it overlaps its
        # siblings; context (current_step) is copied.
        return await asyncio.to_thread(fn, *args)
    result = fn(*args)
    if inspect.isawaitable(result):
        return await result
    return result
