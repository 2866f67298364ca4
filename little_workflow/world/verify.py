"""fsck for workflow data: re-hash every artifact, check every run's log."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import LittleWorkflowError
from .catalogue import FINISHED_STATUSES, fold_envelopes
from .ids import RUN_ID_RE, event_id, find_artifact_refs, request_digest
from .incarnations import history_problems


@dataclass
class VerifyReport:
    runs_checked: int = 0
    events_checked: int = 0
    artifacts_checked: int = 0
    problems: dict[str, list[str]] = field(default_factory=dict)  # run id or "artifacts"
    #: Runs whose catalogue summary lags behind their log (a crash between an event and
    #: its summary): not damage — the log is the truth — and `rebuild_catalogue` (`little
    #: verify --repair`) brings them up to date.
    catalogue_stale: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, where: str, problem: str) -> None:
        self.problems.setdefault(where, []).append(problem)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "runsChecked": self.runs_checked, "eventsChecked": self.events_checked,
            "artifactsChecked": self.artifacts_checked, "problems": self.problems,
            "catalogueStale": self.catalogue_stale,
        }


def verify_world(world: Any) -> VerifyReport:
    """Check a World's stored data, as `fsck` does a disk, and return a `VerifyReport`
    (`.ok`, `.problems` keyed by run id or "artifacts", counts checked). Read-only.

    Checks: every artifact re-hashed against its manifest and owned by a run that has a
    log; every run's log contiguous from sequence 1, self-consistent, and a history one
    executor at a time could write (no step committed twice, no record of an execution
    after a newer one started, starts rising: DESIGN §15); every
    outer-loop manifest's finished cycles naming runs that have a log. A wiped event store
    under surviving artifacts is therefore not ok. `little verify` prints this report and
    exits 1 when it is not ok."""
    report = VerifyReport()
    runs = [r for r in world.list_runs() if RUN_ID_RE.fullmatch(r)]
    logged = set(runs)
    for aid in world.artifacts.list_ids():
        report.artifacts_checked += 1
        try:
            world.read_artifact("artifact://" + aid)
            owner = world.artifacts.read_manifest(aid).run_id
        except LittleWorkflowError as e:
            report.add("artifacts", str(e))
            continue
        if owner not in logged:
            report.add("artifacts", f"orphan artifact {aid}: run {owner} has no event log")
    _check_outer_loop_manifests(world, logged, report)
    events = world.events
    for run_id in runs:
        report.runs_checked += 1
        sequences = events.listed_sequences(run_id)
        expected = list(range(1, len(sequences) + 1))
        if sequences != expected:
            missing = sorted(set(range(1, (max(sequences) if sequences else 0) + 1)) - set(sequences))
            report.add(run_id, f"event sequence is not contiguous: missing {missing[:10]}")
        envelopes = []
        for seq in sequences:
            report.events_checked += 1
            raw = events.read_one(run_id, seq)
            try:
                env = json.loads(raw or b"")
                if env.get("sequence") != seq or env.get("runId") != run_id:
                    raise ValueError(f"holds run {env.get('runId')!r} sequence {env.get('sequence')}")
                if env.get("eventId") != event_id(run_id, seq):
                    raise ValueError("eventId does not derive from run id and sequence")
                if env.get("requestDigest") != request_digest(env.get("type"), env.get("payload")):
                    raise ValueError("requestDigest does not match type and payload")
            except (ValueError, TypeError, AttributeError) as e:
                report.add(run_id, f"event {seq}: unreadable or inconsistent ({e})")
                continue
            envelopes.append(env)
            for ref in sorted(find_artifact_refs(env.get("payload"))):
                try:
                    world.artifacts.read_manifest(ref)
                except LittleWorkflowError as e:
                    report.add(run_id, f"event {seq} references {ref}: {e}")
        _check_one_executor(run_id, envelopes, report)
        if world.catalogue is not None and run_id not in report.problems:
            _check_summary(world, run_id, envelopes, report)
    return report


def _check_one_executor(run_id: str, envelopes: list[dict[str, Any]],
                        report: VerifyReport) -> None:
    """DESIGN §15: what no single executor writes (incarnations.history_problems)."""
    records = [(int(env["sequence"]), str(env.get("type")), env.get("payload"))
               for env in envelopes]
    for _, problem in history_problems(records):
        report.add(run_id, problem)


SUMMARY_FIELDS = ("status", "workflowId", "createdAt", "waiting", "error", "parentRunId")


def _check_summary(world: Any, run_id: str, envelopes: list[dict[str, Any]],
                   report: VerifyReport) -> None:
    expected = fold_envelopes(run_id, envelopes)
    found = world.catalogue.summary(run_id)
    if expected is None:
        return
    # A step count is written with the next status change: it may trail while a run runs.
    fields = SUMMARY_FIELDS + (("steps",) if expected["status"] in FINISHED_STATUSES else ())
    if found is None or any(found.get(k) != expected.get(k) for k in fields):
        report.catalogue_stale.append(run_id)


def rebuild_catalogue(world: Any) -> int:
    """Re-fold every run's catalogue summary from its log (`little verify --repair`),
    with progress on stderr for a large World. The number of runs folded."""
    return int(world.catalogue.rebuild())


def _check_outer_loop_manifests(world: Any, logged: set[str], report: VerifyReport) -> None:
    for name in world.publisher.list_names(world.path("outer-loops")):
        if not name.endswith(".json"):
            continue
        where = f"outer-loops/{name}"
        try:
            doc = world.read_document(where)
            cycles = doc.get("cycles") or []
            # pendingCycleRunId may name a run not created yet (a crash in between).
            named = [c.get("runId") for c in cycles]
        except (LittleWorkflowError, ValueError, TypeError, AttributeError) as e:
            report.add(where, f"unreadable manifest: {e}")
            continue
        for run_id in named:
            if run_id and run_id not in logged:
                report.add(where, f"names run {run_id}, which has no event log")
