"""Folding a run's events into its state — one fold shared by resume, replay and the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Required, TypedDict, TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from ..world.models import Event
from ..world.vocabulary import FINISHED_STATUSES, RunStatus, status_after

#: The statuses a run ends in (also importable as `world.vocabulary.FINISHED_STATUSES`).
TERMINAL_STATUSES = FINISHED_STATUSES

#: A run's output type, for type checkers: `RunResult[Out].output` is an `Out`.
Out = TypeVar("Out")


@dataclass(slots=True)
class StepRecord:
    path: str
    first_sequence: int
    attempts: int = 0
    failures: int = 0
    status: str = "running"  # running | succeeded | failed
    output: Any = None
    output_ref: str | None = None
    error: dict[str, Any] | None = None
    succeeded_at: int = 0  # the sequence of the step.succeeded that counts (the first)
    finished_at: int = 0  # the sequence that finished it: that success, or its last failure


class TimerRecord(TypedDict, total=False):
    """A durable sleep the log holds (`timer.scheduled`, `timer.fired`), by step path."""

    sequence: Required[int]  # of the event that first named it
    wakeAt: str | None
    fired: bool
    firedAt: int  # the sequence of the first timer.fired


class WaitRecord(TypedDict, total=False):
    """A wait for an event the log holds (`wait.started` … `wait.completed`), by step path."""

    sequence: Required[int]  # of the event that first named it
    name: str | None
    deadline: str | None
    timedOutAt: int | None  # the sequence of its wait.timed_out
    completed: bool
    completedAt: int  # the sequence of the first wait.completed
    signalSequence: int | None  # the signal.received it took


class SubRunCall(TypedDict, total=False):
    """A workflow called as a sub-run (`harness.tool_call.*` with a `subRunId`), by call
    path; a call whose started event was not folded has only `status` and `result`."""

    sequence: int  # of its harness.tool_call.started
    subRunId: str
    name: str | None
    status: str  # started | succeeded
    result: Any


@dataclass
class RunLog:
    """What the committed events say about a run."""

    run_id: str
    # Counts and timestamps only: a long run would otherwise keep every Event and payload
    # alive, and Python's full garbage collections grow with what is alive.
    event_count: int = 0
    first_created_at: str | None = None
    last_created_at: str | None = None
    created: dict[str, Any] | None = None
    status: RunStatus = "unknown"
    output: Any = None
    output_ref: str | None = None
    error: dict[str, Any] | None = None
    traceback: str | None = None  # of a failed run, as run.failed stored it (bounded)
    starts: int = 0
    steps: dict[str, StepRecord] = field(default_factory=dict)
    harness_results: dict[str, dict[str, Any]] = field(default_factory=dict)  # callKey -> payload
    sub_runs: dict[str, SubRunCall] = field(default_factory=dict)  # call path -> info
    plans_reused: dict[str, dict[str, Any]] = field(default_factory=dict)
    memory_reads: dict[tuple[str, str, int], Any] = field(default_factory=dict)  # (scope, path, i)
    last_sequence: int = 0
    # durable time and messages (timers.py, signals.py)
    timers: dict[str, TimerRecord] = field(default_factory=dict)  # path -> scheduled/fired
    waits: dict[str, WaitRecord] = field(default_factory=dict)  # path -> started/outcome
    signals: list[tuple[int, str | None, Any]] = field(default_factory=list)  # (sequence, name, payload)
    signal_traces: dict[int, Any] = field(default_factory=dict)  # sequence -> sender's trace context
    taken: set[int] = field(default_factory=set)  # signal sequences a wait took
    open_waits: dict[str, dict[str, Any]] = field(default_factory=dict)  # what `waiting` waits for
    values: dict[str, Any] = field(default_factory=dict)  # value.recorded key -> value
    cancel_requested: dict[str, Any] | None = None
    # Records on the workflow's path other than steps, timers, waits and sub-run calls
    # (recorded values, memory reads and writes, kept and reused plans, patch markers), by
    # the key the code asks for them with (history.py), with their sequence.
    marks: dict[tuple[Any, ...], int] = field(default_factory=dict)
    # durable streams (streams.py): the key of each write from workflow code, by position;
    # the sequence of each stream's close, by key
    stream_writes: dict[int, str] = field(default_factory=dict)
    closed_streams: dict[str, int] = field(default_factory=dict)
    started_version: str | None = None  # the `version` of the first run.started naming one
    refused: dict[str, Any] | None = None  # run.resume_refused since the last run.started

    @classmethod
    def fold(cls, run_id: str, events: list[Event]) -> "RunLog":
        log = cls(run_id=run_id)
        for e in events:
            log.apply(e)
        return log

    def apply(self, e: Event) -> None:
        self.event_count += 1
        if self.first_created_at is None:
            self.first_created_at = e.created_at
        self.last_created_at = e.created_at
        self.last_sequence = e.sequence
        p = e.payload if isinstance(e.payload, dict) else {}
        t = e.type
        if t.startswith("step."):  # a step's two events: most of a log, checked first
            path = p.get("stepPath")
            if not isinstance(path, str):
                return
            rec = self.steps.get(path)
            if rec is None:
                rec = self.steps[path] = StepRecord(path=path, first_sequence=e.sequence)
            if t == "step.started":
                rec.attempts += 1
                if rec.status != "succeeded":
                    rec.status = "running"
            elif t == "step.succeeded":
                if rec.succeeded_at:
                    return  # the first recorded success is the step's result
                rec.status = "succeeded"
                rec.succeeded_at = rec.finished_at = e.sequence
                rec.output = p.get("output")
                rec.output_ref = p.get("outputRef")
            elif t == "step.failed":
                rec.failures += 1
                if not rec.succeeded_at:
                    rec.error = p.get("error")
                    rec.status = "running" if p.get("willRetry") else "failed"
                    if rec.status == "failed":
                        rec.finished_at = e.sequence
        elif t == "run.created":
            self.created = p
            self.status = status_after(self.status, t, bool(self.open_waits))
        elif t == "run.started":
            self.starts += 1
            self.refused = None
            if self.started_version is None and isinstance(p.get("version"), str):
                self.started_version = p["version"]
            self.status = status_after(self.status, t, bool(self.open_waits))
        elif t == "run.completed":
            self.status = status_after(self.status, t, bool(self.open_waits))
            self.output = p.get("output")
            self.output_ref = p.get("outputRef")
        elif t == "run.failed":
            self.status = status_after(self.status, t, bool(self.open_waits))
            self.error = p.get("error")
            self.traceback = p.get("traceback") if isinstance(p.get("traceback"), str) else None
        elif t == "run.cancelled":
            self.status = status_after(self.status, t, bool(self.open_waits))
            self.error = p.get("error") or {"type": "RunCancelledError", "reason": p.get("reason")}
        elif t == "run.cancel_requested":
            if self.cancel_requested is None:
                self.cancel_requested = p
        elif t == "run.resume_refused":
            self.refused = p
        elif t in TIME_AND_MESSAGE_EVENTS:
            fold_time_event(self, e, p)
        elif t == "stream.written":
            position = p.get("position")
            if isinstance(position, int) and isinstance(p.get("key"), str):
                self.stream_writes.setdefault(position, p["key"])
                self.marks.setdefault(("stream", position), e.sequence)
        elif t == "stream.closed":
            key = p.get("key")
            if isinstance(key, str):
                self.closed_streams.setdefault(key, e.sequence)
                self.marks.setdefault(("stream.closed", key), e.sequence)
        elif t.startswith("harness.") and t.endswith(".succeeded"):
            key = p.get("callKey")
            if isinstance(key, str):
                self.harness_results[key] = p
            call_path = p.get("callPath")
            if t == "harness.tool_call.succeeded" and isinstance(call_path, str):
                done = self.sub_runs.setdefault(call_path, {})
                done["status"], done["result"] = "succeeded", p.get("result")
        elif t == "harness.tool_call.started":
            call_path = p.get("callPath")
            args = p.get("args")
            if isinstance(call_path, str) and isinstance(args, dict) and "subRunId" in args:
                call = self.sub_runs.setdefault(call_path, {})
                call.setdefault("sequence", e.sequence)
                call["subRunId"], call["status"], call["name"] = args["subRunId"], "started", p.get("name")
        elif t == "memory.read":
            scope, path, index = p.get("scope"), p.get("path"), p.get("index")
            if isinstance(scope, str) and isinstance(path, str) and isinstance(index, int):
                self.memory_reads[(scope, path, index)] = p
                self.marks.setdefault(("memory", scope, path, index), e.sequence)
        elif t == "plan.reused":
            name = p.get("name")
            if isinstance(name, str):
                self.plans_reused[name] = p
                self.marks.setdefault(("plan.reused", name), e.sequence)
        elif t == "plan.kept":
            name = p.get("name")
            if isinstance(name, str):
                self.marks.setdefault(("plan.kept", name, p.get("contentHash")), e.sequence)
        elif t == "memory.written":
            scope, path, key = p.get("scope"), p.get("path"), e.append_idempotency_key
            if isinstance(key, str):
                self.marks.setdefault(("memory.written", scope, path, key), e.sequence)
        elif t == "patch.marked":
            patch_id = p.get("patchId")
            if isinstance(patch_id, str):
                self.marks.setdefault(("patch", patch_id), e.sequence)


def fold_time_event(log: RunLog, e: Event, p: dict[str, Any]) -> None:
    t = e.type
    if t == "signal.received":
        log.signals.append((e.sequence, p.get("name"), p.get("payload")))
        if "traceContext" in p:
            log.signal_traces[e.sequence] = p["traceContext"]
        return
    if t == "value.recorded":
        key = p.get("key")
        if isinstance(key, str):
            log.values.setdefault(key, p.get("value"))
            log.marks.setdefault(("value", key), e.sequence)
        return
    path = p.get("stepPath")
    if not isinstance(path, str):
        return
    if t == "timer.scheduled":
        log.timers[path] = {"wakeAt": p.get("wakeAt"), "fired": False, "sequence": e.sequence}
        log.open_waits[path] = {"kind": "sleep", "stepPath": path, "wakeAt": p.get("wakeAt")}
    elif t == "timer.fired":
        timer = log.timers.setdefault(path, {"wakeAt": None, "sequence": e.sequence})
        timer["fired"] = True
        timer.setdefault("firedAt", e.sequence)
        log.open_waits.pop(path, None)
    elif t == "wait.started":
        log.waits[path] = {"name": p.get("name"), "deadline": p.get("deadline"),
                           "sequence": e.sequence, "timedOutAt": None, "completed": False,
                           "signalSequence": None}
        log.open_waits[path] = {"kind": "event", "stepPath": path, "name": p.get("name"),
                                "deadline": p.get("deadline")}
    elif t == "wait.timed_out":
        rec = log.waits.get(path)
        if rec is not None and rec["timedOutAt"] is None:
            rec["timedOutAt"] = e.sequence
    elif t == "wait.completed":
        rec = log.waits.setdefault(path, {"name": p.get("name"), "deadline": None,
                                          "sequence": e.sequence, "timedOutAt": None})
        rec["completed"] = True
        rec.setdefault("completedAt", e.sequence)
        rec["signalSequence"] = p.get("signalSequence")
        if isinstance(p.get("signalSequence"), int):
            log.taken.add(p["signalSequence"])
        log.open_waits.pop(path, None)
    log.status = status_after(log.status, t, bool(log.open_waits))


TIME_AND_MESSAGE_EVENTS = frozenset({
    "timer.scheduled", "timer.fired", "wait.started", "wait.timed_out", "wait.completed",
    "signal.received", "value.recorded",
})


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, alias_generator=to_camel, populate_by_name=True)

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


class StepState(_Model):
    step_path: str
    status: str
    attempts: int
    output: Any = None
    output_ref: str | None = None
    error: dict[str, Any] | None = None


class RunState(_Model):
    run_id: str
    status: RunStatus
    workflow_id: str | None = None
    workflow_version_id: str | None = None
    input: Any = None
    output: Any = None
    error: dict[str, Any] | None = None
    steps: dict[str, StepState] = {}
    event_count: int = 0
    last_sequence: int = 0
    created_at: str | None = None
    updated_at: str | None = None
    waiting: dict[str, Any] | None = None
    forked_from: dict[str, Any] | None = None


class RunResult(_Model, Generic[Out]):
    """What `run_workflow` / `arun_workflow` / `run_pipeline` return for a finished run.

    Fields:
      run_id       the run's id (`run_...`); the same id again returns this result and
                   runs nothing.
      status       "completed" (a failed run raises `WorkflowFailedError` instead, with
                   `.run_id` and `.error`).
      output       what the workflow returned, typed by its return annotation (a
                   pydantic model comes back as the model): the run stores
                   its JSON, which is checked against the output schema when it has one.
      workflow_id  the `id` of the workflow that ran.
      outer_loop_id, result_kind, cycles
                   set for an outer loop (`max_outer_cycles=` / `supervise=`): its id; how
                   it ended, "done" (the supervisor returned `Done`) or "max_cycles"; one
                   record per cycle (cycleNumber, runId, input, output). None otherwise.

    `to_json_dict()` is the camelCase JSON form that `little run --json` prints.
    """

    run_id: str
    status: RunStatus
    output: Out = None  # type: ignore[assignment]  # None unless status is "completed"
    workflow_id: str | None = None
    outer_loop_id: str | None = None
    result_kind: str | None = None
    cycles: list[dict[str, Any]] | None = None
    waiting: dict[str, Any] | None = None


def materialize(log: RunLog, read_value: Callable[..., Any]) -> RunState:
    """The run's state; `read_value(value, ref=None)` reads a logged value back as the
    run produced it (`values.stored_value` bound to the World)."""
    resolve = read_value
    created = log.created or {}
    return RunState(
        run_id=log.run_id,
        status=log.status,
        workflow_id=created.get("workflowId"),
        workflow_version_id=created.get("workflowVersionId"),
        input=resolve(created.get("input")),
        output=resolve(log.output, log.output_ref),
        error=resolve(log.error),
        steps={
            path: StepState(
                step_path=path,
                status=rec.status,
                attempts=rec.attempts,
                output=resolve(rec.output, rec.output_ref) if rec.status == "succeeded" else None,
                output_ref=rec.output_ref,
                error=resolve(rec.error),
            )
            for path, rec in log.steps.items()
        },
        event_count=log.event_count,
        last_sequence=log.last_sequence,
        created_at=log.first_created_at,
        updated_at=log.last_created_at,
        waiting=waiting_info(log),
        forked_from=resolve(created.get("forkedFrom")),
    )


def waiting_info(log: RunLog) -> dict[str, Any] | None:
    """What a waiting run waits for: `{kind: "sleep", stepPath, wakeAt}` or
    `{kind: "event", stepPath, name, deadline}` (the earliest-opened one)."""
    if log.status != "waiting" or not log.open_waits:
        return None
    return dict(next(iter(log.open_waits.values())))
