"""What `little worker` says while it works: a line per run started, completed, failed,
cancelled, left waiting or left alone (or a JSON object per line), counts at the end, and
the two-step Ctrl-C (the first waits for the runs in flight, the second stops at once).

The lines come from the run events the worker's runs append, seen through
`tracing_world`: the worker itself is not changed to report. A run the worker's code may
not run (another version, a divergence from its log) appends nothing that says so, so
that line comes from the worker's log record of it (`lw_run_id`, `lw_refusal`), once."""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from typing import Any, Callable

from ..errors import LittleWorkflowError, failure_text
from ..world.protocol import WorldLike
from ..world.tracing import tracing_world
from ..world.vocabulary import RUN_ENDING_EVENTS

WAIT_EVENTS = {"timer.scheduled": "sleep", "wait.started": "event"}
OUTCOMES = ("completed", "failed", "cancelled", "waiting", "refused")


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class WorkerReport:
    def __init__(self, world: WorldLike, *, as_json: bool, say: Callable[[str], None],
                 emit: Callable[[str], None]):
        self.world, self.as_json, self.say, self.emit = world, as_json, say, emit
        self.counts = dict.fromkeys(("started", *OUTCOMES), 0)
        #: Each run's latest outcome here: a run resumed twice (a sleep, then a wait) is
        #: one run in the summary, counted by how it ended last.
        self.outcomes: dict[str, str] = {}
        self.in_flight: dict[str, float] = {}  # run id -> when it started here
        self.workflow_ids: dict[str, str] = {}
        self._lock = threading.Lock()

    def traced(self) -> Any:
        return tracing_world(self.world, self.on_call)

    def on_call(self, name: str, args: tuple, kwargs: dict) -> None:
        if name != "append_event" or len(args) < 3 or not isinstance(args[2], dict):
            return
        run_id, kind, payload = str(args[0]), args[1], args[2]
        if kind == "run.created":
            self.workflow_ids[run_id] = str(payload.get("workflowId"))
        elif kind == "run.started":
            self._report(run_id, "started", resumed=payload.get("start", 1) > 1)
        elif kind in RUN_ENDING_EVENTS:
            self._report(run_id, kind.split(".", 1)[1], error=payload.get("error"))
        elif kind in WAIT_EVENTS and run_id in self.in_flight:
            what = (f"sleep until {payload.get('wakeAt')}" if WAIT_EVENTS[kind] == "sleep"
                    else f"event {payload.get('name')!r}")
            self._report(run_id, "waiting", detail=what, step=payload.get("stepPath"))

    def on_log_record(self, record: logging.LogRecord) -> None:
        """The worker's log: a refused run is a line of the report; other warnings are
        printed as they are (as Python would print them with no logging set up)."""
        refusal = getattr(record, "lw_refusal", None)
        if isinstance(refusal, BaseException):
            self._report(str(getattr(record, "lw_run_id", "?")), "refused",
                         error={"type": type(refusal).__name__, "message": str(refusal)})
        elif record.levelno >= logging.WARNING:
            self.say(record.getMessage())

    def _workflow_id(self, run_id: str) -> str:
        if run_id not in self.workflow_ids:
            try:  # a run resumed here: its workflow is in its first event
                first = self.world.read_event(run_id, 1).payload
                self.workflow_ids[run_id] = str(first.get("workflowId"))
            except (LittleWorkflowError, OSError):
                # Deliberate: a report line never stops the run it reports on. The run
                # reads its own log next and fails with this error, which is reported.
                self.workflow_ids[run_id] = "?"
        return self.workflow_ids[run_id]

    def _report(self, run_id: str, event: str, *, resumed: bool = False, error: Any = None,
                detail: str | None = None, step: Any = None) -> None:
        workflow_id = self._workflow_id(run_id)
        with self._lock:
            self.counts[event] += 1
            if event != "started" or run_id not in self.outcomes:
                self.outcomes[run_id] = event
            now = time.monotonic()
            began = self.in_flight.pop(run_id, None) if event != "started" else None
            if event == "started":
                self.in_flight[run_id] = now
            if self.as_json:
                line: dict[str, Any] = {"runId": run_id, "event": event, "workflowId": workflow_id}
                if event == "started":
                    line["resumed"] = resumed
                if isinstance(error, dict):
                    line["error"] = error
                if step is not None:
                    line["stepPath"], line["waitingFor"] = step, detail
                if began is not None:
                    line["seconds"] = round(now - began, 3)
                self.emit(json.dumps(line, ensure_ascii=False))
                return
            took = f" ({now - began:.1f} s)" if began is not None else ""
            if event == "started":
                text = f"{run_id} {'resumed' if resumed else 'started'} (workflow {workflow_id})"
            elif event == "failed":
                text = f"{run_id} failed: {failure_text(run_id, error or {})}{took}"
            elif event == "waiting":
                text = f"{run_id} waiting at {step}: {detail}"
            elif event == "refused":
                text = f"{run_id} left alone: {(error or {}).get('message')}"
            else:
                text = f"{run_id} {event}{took}"
            self.say(text)

    def summary(self) -> str:
        ended = list(self.outcomes.values())
        ends = [f"{ended.count(o)} {o}" for o in OUTCOMES if ended.count(o)]
        in_flight = ended.count("started")
        if in_flight:
            ends.append(f"{in_flight} unfinished")
        return f"worker stopped: {plural(len(self.outcomes), 'run')} started" + (
            ": " + ", ".join(ends) if ends else "")

    def run(self, worker: Any, *, until_idle: bool) -> int:
        """Run the worker in a thread; the main thread takes Ctrl-C and SIGTERM. The first
        asks the worker to stop and says which runs it waits for; a second Ctrl-C ends the
        process at once (those runs stay unfinished, resumable, as after a crash).
        Returns the exit code."""
        failure: list[BaseException] = []

        def target() -> None:
            try:
                worker.run_until_idle() if until_idle else worker.run()
            except BaseException as e:  # handed to the main thread below
                failure.append(e)
            finally:
                worker.close()

        thread = threading.Thread(target=target, name="little-worker", daemon=True)
        stops: list[int] = []

        def on_signal(signum: int, frame: Any) -> None:
            stops.append(signum)
            with self._lock:
                running = sorted(self.in_flight)
            if len(stops) == 1 or signum != signal.SIGINT:
                worker.stop()
                if running:
                    self.say(f"stopping: waiting for {plural(len(running), 'run')} in flight "
                             f"({', '.join(running)}) to finish or reach a wait; "
                             "Ctrl-C again to stop at once")
                return
            left = f"{', '.join(running)} left unfinished" if running else "nothing in flight"
            self.say(f"stopped at once: {left} (a worker resumes them)")
            self.say(self.summary())
            os._exit(130)  # the worker's threads are busy in step code: no clean exit waits

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        worker_log = logging.getLogger("little_workflow.worker")
        handler = _ReportHandler(self)
        worker_log.addHandler(handler)
        try:
            thread.start()
            while thread.is_alive():
                thread.join(0.2)  # a short join: signal handlers run in between
        finally:
            worker_log.removeHandler(handler)
            for s, handler_ in previous.items():
                signal.signal(s, handler_)
        if failure:
            raise failure[0]
        self.say(self.summary())
        return 0


class _ReportHandler(logging.Handler):
    def __init__(self, report: WorkerReport):
        super().__init__(logging.INFO)
        self.report = report

    def emit(self, record: logging.LogRecord) -> None:
        self.report.on_log_record(record)
