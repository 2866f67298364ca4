"""`RunHandle`: watch and drive one run from any process — its status, its result, cancel,
send. `lw.get_run(world, run_id)`, `lw.start_workflow(..., handle=True)` and `lw.enqueue`
return one.

A handle waiting for the result (`result()`, `aresult()`) reads only what the run's log
gained since its last read, and sleeps between reads (followers.py): the run's end
appended in this process — by `run_workflow`, a worker thread, `cancel_run` — wakes it at
once; a run another process executes is read again every `followers.POLL_SECONDS` (0.25 s).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast, overload

from ..errors import RunCancelledError, WorkflowFailedError, WorkflowMismatchError
from ..world.ids import validate_run_id
from ..world.models import Event
from ..world.protocol import WorldLike
from . import followers
from .api import resolve_world
from .cancel import cancel_run
from .followers import AsyncWakeup, Wakeup, aread_log_after, read_log_after
from .signals import send_event
from .state import TERMINAL_STATUSES, RunLog
from .values import decode_output, stored_value
from .waiting import observe, requested_reason, unobserve

if TYPE_CHECKING:
    from .workflow import Workflow

Out = TypeVar("Out")

#: What `RunHandle.status()` says (a run's statuses; `created` until a worker starts it).
HandleStatus = Literal["created", "running", "waiting", "completed", "failed", "cancelled"]


class RunHandle(Generic[Out]):
    """One run, from any process that reaches its World: `.run_id`, `.status()`,
    `.result(timeout=None)`, `await .aresult()`, `.cancel()`, `.send(name, payload)`.

    `RunHandle(world, run_id, workflow=None)` reads nothing; `lw.get_run` checks the run
    exists. With `workflow` the result is typed by its return annotation (a pydantic model
    comes back as the model); without, it is the stored JSON.
    """

    def __init__(self, world: WorldLike, run_id: str, workflow: Workflow[Any, Out] | None = None):
        self.world = resolve_world(world)
        self.run_id = validate_run_id(run_id)
        self.workflow = workflow
        self._log = RunLog(run_id=self.run_id)
        self._lock = threading.Lock()  # one fold of the log at a time (a handle shared by threads)

    def __repr__(self) -> str:
        wf = f", workflow={self.workflow.id!r}" if self.workflow is not None else ""
        return f"RunHandle({self.run_id!r}{wf})"

    # ---- reading ------------------------------------------------------------------

    def _fold(self, events: list[Event]) -> RunLog:
        for e in events:
            if e.sequence == self._log.last_sequence + 1:
                self._log.apply(e)
        return self._log

    def refresh(self) -> RunLog:
        """Fold what was appended since the last read into this handle's view of the run."""
        with self._lock:
            return self._fold(read_log_after(self.world, self.run_id, self._log.last_sequence))

    async def _arefresh(self) -> RunLog:
        events = await aread_log_after(self.world, self.run_id, self._log.last_sequence)
        with self._lock:
            return self._fold(events)

    def status(self) -> HandleStatus:
        """`created`, `running`, `waiting`, `completed`, `failed` or `cancelled`, as the
        log says now (a run whose process died mid-step stays `running` until resumed)."""
        return cast(HandleStatus, self.refresh().status)  # never "unknown": it has run.created

    # ---- the result ---------------------------------------------------------------

    def _outcome(self, log: RunLog) -> Out:
        if log.status == "completed":
            value = stored_value(self.world, log.output, log.output_ref)
            return decode_output(self.workflow, value, self.run_id)  # type: ignore[no-any-return]
        if log.status == "failed":
            raise WorkflowFailedError(self.run_id, None, stored_value(self.world, log.error) or {},
                                      log.traceback)
        reason = (log.error or {}).get("reason")
        raise RunCancelledError(self.run_id, reason if isinstance(reason, str)
                                else requested_reason(log))

    def _timed_out(self, timeout: float | None, log: RunLog) -> TimeoutError:
        return TimeoutError(f"run {self.run_id} did not finish within {timeout} s "
                            f"(it is {log.status})")

    def result(self, timeout: float | None = None) -> Out:
        """Block until the run finishes (run by any process) and return its output, typed
        like the workflow's output when the handle knows the workflow. Raises
        `WorkflowFailedError` (a failed run), `RunCancelledError` (a cancelled one) and
        `TimeoutError` when `timeout` seconds (wall clock) pass first. A queued or created
        run is waited for too: something else (a worker) must execute it."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        wakeup = Wakeup()
        observe(self.world, self.run_id, wakeup)
        try:
            while True:
                wakeup.clear()  # before reading: an append after the read wakes the wait
                log = self.refresh()
                if log.status in TERMINAL_STATUSES:
                    return self._outcome(log)
                pause = followers.POLL_SECONDS
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise self._timed_out(timeout, log)
                    pause = min(pause, left)
                wakeup.wait(pause)
        finally:
            unobserve(self.world, self.run_id, wakeup)

    async def aresult(self, timeout: float | None = None) -> Out:
        """`result()` for async code: waits without blocking the event loop."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        wakeup = AsyncWakeup()
        observe(self.world, self.run_id, wakeup)
        try:
            while True:
                wakeup.clear()
                log = await self._arefresh()
                if log.status in TERMINAL_STATUSES:
                    return self._outcome(log)
                pause = followers.POLL_SECONDS
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise self._timed_out(timeout, log)
                    pause = min(pause, left)
                await wakeup.wait(pause)
        finally:
            unobserve(self.world, self.run_id, wakeup)

    # ---- driving ------------------------------------------------------------------

    def cancel(self, reason: str | None = None) -> None:
        """`lw.cancel_run`: a waiting or unstarted run ends at once, a running one at its
        next step boundary, sleep or wait. A run already cancelled: a no-op."""
        cancel_run(self.world, self.run_id, reason)

    def send(self, name: str, payload: Any = None, *, idempotency_key: str | None = None) -> Event:
        """`lw.send_event` to this run: the event `name` for a `ctx.wait_for_event`."""
        return send_event(self.world, self.run_id, name, payload, idempotency_key=idempotency_key)


@overload
def get_run(world: WorldLike, run_id: str) -> RunHandle[Any]: ...


@overload
def get_run(world: WorldLike, run_id: str, *, workflow: Workflow[Any, Out]) -> RunHandle[Out]: ...


def get_run(world: WorldLike, run_id: str, *, workflow: Workflow[Any, Any] | None = None) -> RunHandle[Any]:
    """A handle on an existing run (`RunNotFoundError` when there is none). Give
    `workflow=` to get its result typed like that workflow's output; a run of another
    workflow is then a `WorkflowMismatchError`."""
    handle: RunHandle[Any] = RunHandle(world, run_id, workflow)
    log = handle.refresh()
    workflow_id = (log.created or {}).get("workflowId")
    if workflow is not None and workflow_id != workflow.id:
        raise WorkflowMismatchError(handle.run_id, str(workflow_id), workflow.id)
    return handle


__all__ = ["HandleStatus", "RunHandle", "get_run"]
