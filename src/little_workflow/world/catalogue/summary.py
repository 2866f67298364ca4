"""What the catalogue knows of a run and how it learns it: the summary a caller gets
(`RunSummary`, `RunPage`), and the fold, written once — `summary_change` says what one
event changes in its run's summary (most events: nothing), `apply_change` folds that in
(moving the status by `vocabulary.status_after`, as `RunLog` does), `fold_envelopes` a
whole log."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Literal, Required, TypedDict

from ..vocabulary import FINISHED_STATUSES as _FINISHED
from ..vocabulary import (
    OWNER_EVENTS,
    RUN_ENDINGS,
    RUN_STATUSES,
    RunStatus,
    status_after,
)

#: "unknown" is a run whose log has no lifecycle (no `run.created`): one that only holds
#: data, e.g. a LangGraph thread (`OWNER_EVENTS`), as `materialize_run_state` says too.
STATUSES = RUN_STATUSES
TERMINAL = RUN_ENDINGS
FINISHED_STATUSES = frozenset(_FINISHED)
#: Worlds larger than this report progress while their catalogue is built.
PROGRESS_FROM = 1000
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: Order keys hold `MAX_US - createdAt in µs`, so names sort newest first (until 2286).
MAX_US = 10**16 - 1


# --- the stored document ----------------------------------------------------------------------

class SummaryDoc(TypedDict, total=False):
    """A run's summary as the catalogue stores it (JSON, these keys) and the fold makes it.
    `openWaits` holds every wait the run has open, by step path (`waiting` is the first);
    `sequence` is the last event folded in; `needsVersion` is set while a refused resume
    stands; `pending` is a file World's mark of a change on its way (files.py)."""

    runId: Required[str]
    workflowId: str | None
    status: Required[RunStatus]
    createdAt: Required[str]
    updatedAt: str
    steps: int
    #: `{kind: "sleep", stepPath, wakeAt}` or `{kind: "event", stepPath, name, deadline}`
    waiting: dict[str, Any] | None
    error: Any
    parentRunId: str | None
    openWaits: dict[str, dict[str, Any]]
    sequence: int
    needsVersion: str | None
    pending: dict[str, Any]


# --- what a caller gets --------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run as the catalogue knows it (`lw.list_runs`). `steps` counts the steps the
    run started, as of its last status change (a running run's count catches up at its
    next one); `updated_at` is the time of that change; `waiting` what a waiting run
    waits for (`kind`, `stepPath`, `wakeAt` or `name`/`deadline`); `error` a failed or
    cancelled run's error record; `needs_version` the version a refused resume asked for
    (runs are pinned to the version that created them), None once the run executes
    again."""

    run_id: str
    workflow_id: str | None
    status: RunStatus
    created_at: datetime
    updated_at: datetime
    steps: int
    waiting: dict[str, Any] | None
    error: dict[str, Any] | None
    parent_run_id: str | None
    needs_version: str | None = None

    @classmethod
    def from_doc(cls, doc: SummaryDoc) -> "RunSummary":
        return cls(run_id=doc["runId"], workflow_id=doc.get("workflowId"), status=doc["status"],
                   created_at=parse_time(doc["createdAt"]), updated_at=parse_time(doc["updatedAt"]),
                   steps=int(doc.get("steps") or 0), waiting=doc.get("waiting"),
                   error=doc.get("error"), parent_run_id=doc.get("parentRunId"),
                   needs_version=doc.get("needsVersion"))

    def to_json_dict(self) -> dict[str, Any]:
        return {"runId": self.run_id, "workflowId": self.workflow_id, "status": self.status,
                "createdAt": iso(self.created_at), "updatedAt": iso(self.updated_at),
                "steps": self.steps, "waiting": self.waiting, "error": self.error,
                "parentRunId": self.parent_run_id, "needsVersion": self.needs_version}


@dataclass(frozen=True, slots=True)
class RunPage:
    runs: list[RunSummary]
    #: Pass as `cursor=` for the next page; None when this page is the last.
    next_cursor: str | None


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def micros(moment: datetime) -> int:
    return (moment - _EPOCH) // _ONE_US


_ONE_US = datetime.resolution


def created_us(doc: SummaryDoc) -> int:
    return micros(parse_time(doc["createdAt"]))


# --- the fold, written once -------------------------------------------------------------------

ChangeKind = Literal["created", "owner", "started", "refused", "end", "step", "open", "close"]


@dataclass(frozen=True, slots=True)
class SummaryChange:
    """What one event changes in its run's summary (`summary_change`), for `apply_change`
    to fold in. `kind` says which fields mean something: `workflow_id` (created, owner),
    `parent_run_id` (created), `version` (refused), `error` (end), `step_path` (open,
    close) and `waiting` (open: what the run now waits for)."""

    kind: ChangeKind
    #: The event's type and `createdAt`.
    event_type: str
    at: str
    workflow_id: str | None = None
    parent_run_id: str | None = None
    version: str | None = None
    error: Any = None
    step_path: str | None = None
    waiting: dict[str, Any] | None = None


def summary_change(type_: str, payload: Any, created_at: str) -> SummaryChange | None:
    """What an event changes in its run's summary, or None (most events). Pure."""
    kind = _CHANGES.get(type_)
    if kind is None:
        return None
    p = payload if isinstance(payload, dict) else {}
    if kind == "step":
        return SummaryChange("step", type_, created_at) if p.get("attempt", 1) == 1 else None
    if kind == "created":
        return SummaryChange("created", type_, created_at, workflow_id=p.get("workflowId"),
                             parent_run_id=p.get("parentRunId"))
    if kind == "owner":
        return SummaryChange("owner", type_, created_at, workflow_id=OWNER_EVENTS[type_])
    if kind == "started":
        return SummaryChange("started", type_, created_at)
    if kind == "refused":
        version = p.get("version")
        return SummaryChange("refused", type_, created_at,
                             version=version if isinstance(version, str) else None)
    if kind == "end":
        error = p.get("error")
        if RUN_ENDINGS[type_] == "cancelled" and error is None:
            error = {"type": "RunCancelledError", "reason": p.get("reason")}
        return SummaryChange("end", type_, created_at, error=_plain(error))
    path = p.get("stepPath")
    if not isinstance(path, str):
        return None
    if type_ == "timer.scheduled":
        return SummaryChange("open", type_, created_at, step_path=path, waiting={
            "kind": "sleep", "stepPath": path, "wakeAt": p.get("wakeAt")})
    if type_ == "wait.started":
        return SummaryChange("open", type_, created_at, step_path=path, waiting={
            "kind": "event", "stepPath": path, "name": p.get("name"), "deadline": p.get("deadline")})
    return SummaryChange("close", type_, created_at, step_path=path)


_CHANGES = {"run.created": "created", "run.started": "started", "run.resume_refused": "refused",
            "run.completed": "end",
            "run.failed": "end", "run.cancelled": "end", "step.started": "step",
            "timer.scheduled": "wait", "wait.started": "wait", "timer.fired": "wait",
            "wait.completed": "wait", **{t: "owner" for t in OWNER_EVENTS}}


def changes_status(change: SummaryChange) -> bool:
    """False only for a step count: file Worlds write those with the next status change."""
    return change.kind != "step"


def _plain(value: Any) -> Any:
    """Frozen payload values as plain JSON."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def apply_change(summary: SummaryDoc | None, run_id: str, sequence: int,
                 change: SummaryChange) -> SummaryDoc | None:
    """The summary after one change (a new dict). A run whose `run.created` was not seen
    has no summary (None) until it is re-folded from its whole log."""
    kind, at = change.kind, change.at
    if kind == "created":
        created: SummaryDoc = {"runId": run_id, "workflowId": change.workflow_id,
                             "status": status_after("unknown", change.event_type, False),
                             "createdAt": at, "updatedAt": at, "steps": 0, "waiting": None,
                             "error": None, "parentRunId": change.parent_run_id,
                             "openWaits": {}, "sequence": sequence}
        return created
    if kind == "owner":
        if summary is not None:
            return summary  # a run with a lifecycle keeps it
        return {"runId": run_id, "workflowId": change.workflow_id, "status": "unknown", "createdAt": at,
                "updatedAt": at, "steps": 0, "waiting": None, "error": None,
                "parentRunId": None, "openWaits": {}, "sequence": sequence}
    if summary is None:
        return None
    s: SummaryDoc = {**summary, "updatedAt": at, "sequence": sequence}
    status = s["status"]
    if kind == "step":
        s["steps"] = int(s.get("steps") or 0) + 1
        return s
    if kind == "end":
        s["status"] = status_after(status, change.event_type, False)
        s["error"], s["waiting"] = change.error, None
        return s
    if kind == "refused":
        s["needsVersion"] = change.version
        return s
    if kind == "started":
        s.pop("needsVersion", None)
    waits = dict(s.get("openWaits") or {})
    # summary_change gives every open and close a step path, and every open what it waits for.
    if kind == "open" and change.step_path is not None and change.waiting is not None:
        waits[change.step_path] = change.waiting
    elif kind == "close" and change.step_path is not None:
        waits.pop(change.step_path, None)
    s["openWaits"] = waits
    s["status"] = status_after(status, change.event_type, bool(waits))
    s["waiting"] = dict(next(iter(waits.values()))) if s["status"] == "waiting" and waits else None
    return s


def fold_envelopes(run_id: str, envelopes: Iterable[dict[str, Any]]) -> SummaryDoc | None:
    """A run's summary from its whole log (envelopes in sequence order)."""
    summary = None
    for env in envelopes:
        change = summary_change(env.get("type", ""), env.get("payload"), env.get("createdAt", ""))
        if change is not None:
            summary = apply_change(summary, run_id, int(env["sequence"]), change)
        elif summary is not None:
            summary["sequence"] = int(env["sequence"])
    return summary


#: The fields a stored summary must share with the fold of its log.
SUMMARY_FIELDS = ("status", "workflowId", "createdAt", "waiting", "error", "parentRunId")


def summary_lags(found: SummaryDoc, expected: SummaryDoc) -> bool:
    """Whether a stored summary says other than the fold of its whole log (`expected`).
    A step count rides with the next status change, so it may trail while a run runs;
    a `pending` mark whose event is in the log is a change not written yet."""
    fields = SUMMARY_FIELDS + (("steps",) if expected["status"] in FINISHED_STATUSES else ())
    mark = found.get("pending")
    landed = isinstance(mark, dict) and isinstance(mark.get("sequence"), int) \
        and int(found.get("sequence") or 0) < mark["sequence"] <= int(expected["sequence"])
    return landed or any(found.get(k) != expected.get(k) for k in fields)


def summary_json(summary: SummaryDoc) -> str:
    return json.dumps(summary, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
