"""The handle `lw.enqueue` returns: `RunHandle(world, run_id, workflow=None)` with
`.run_id`, `.status()`, `.result(timeout=None)` (waits, from any process, by reading the
run's log), `await .aresult()`, `.cancel()`, `.send(name, payload)` — the shape of DESIGN
§18's `RunHandle`, until the runtime's own handles replace this one."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Generic, TypeVar

from ..errors import RunCancelledError, RunNotFoundError, WorkflowFailedError
from ..world.ids import validate_run_id
from .state import TERMINAL_STATUSES, RunLog
from .values import decode_output, stored_value
from .waiting import requested_reason

Out = TypeVar("Out")

#: How often `result()` reads the log of a run another thread or process executes.
POLL_SECONDS = 0.05


class RunHandle(Generic[Out]):
    def __init__(self, world: Any, run_id: str, workflow: Any = None):
        self.world = world
        self.run_id = validate_run_id(run_id)
        self.workflow = workflow
        self._log = RunLog(run_id=run_id)

    def __repr__(self) -> str:
        return f"<RunHandle {self.run_id}>"

    def _read(self) -> RunLog:
        for e in self.world.list_events(self.run_id, after=self._log.last_sequence):
            self._log.apply(e)
        return self._log

    def status(self) -> str:
        """`created`, `running`, `waiting`, `completed`, `failed` or `cancelled`."""
        log = self._read()
        if log.created is None:
            raise RunNotFoundError(self.run_id, f" in {self.world.data_dir}")
        return log.status

    def _outcome(self, log: RunLog) -> Out:
        if log.status == "completed":
            value = stored_value(self.world, log.output, log.output_ref)
            return decode_output(self.workflow, value, self.run_id)  # type: ignore[no-any-return]
        if log.status == "failed":
            raise WorkflowFailedError(self.run_id, None, stored_value(self.world, log.error) or {},
                                      log.traceback)
        raise RunCancelledError(self.run_id, requested_reason(log))

    def result(self, timeout: float | None = None) -> Out:
        """Wait until the run finishes: its output, or `WorkflowFailedError` /
        `RunCancelledError`; `TimeoutError` once `timeout` seconds have passed."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            log = self._read()
            if log.status in TERMINAL_STATUSES:
                return self._outcome(log)
            if end is not None and time.monotonic() >= end:
                raise TimeoutError(f"run {self.run_id} is still {log.status} after {timeout} s")
            time.sleep(POLL_SECONDS)

    async def aresult(self, timeout: float | None = None) -> Out:
        return await asyncio.to_thread(self.result, timeout)

    def cancel(self, reason: str | None = None) -> None:
        from .control import cancel_run

        cancel_run(self.world, self.run_id, reason)

    def send(self, name: str, payload: Any = None, *, idempotency_key: str | None = None) -> Any:
        from .signals import send_event

        return send_event(self.world, self.run_id, name, payload, idempotency_key=idempotency_key)
