"""fsck for workflow data: re-hash every artifact, check every run's log."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import LittleWorkflowError
from .catalogue import SummaryDoc, fold_envelopes, summary_lags
from .ids import RUN_ID_RE, event_id, find_artifact_refs, request_digest
from .incarnations import history_problems


@dataclass
class VerifyReport:
    runs_checked: int = 0
    events_checked: int = 0
    artifacts_checked: int = 0
    problems: dict[str, list[str]] = field(default_factory=dict)  # run id or "artifacts"
    # Where the run catalogue disagrees with the logs. Not damage — the logs are the
    # truth and the catalogue is derived from them — and `rebuild_catalogue` (`little
    # verify --repair`) mends each kind:
    #: runs whose summary says other than their log (it lags after a crash);
    catalogue_stale: list[str] = field(default_factory=list)
    #: runs with a log and no summary;
    catalogue_missing: list[str] = field(default_factory=list)
    #: summaries whose run has no log any more;
    catalogue_ghosts: list[str] = field(default_factory=list)
    #: index entries a summary does not need, and entries a summary needs that are
    #: missing (file and object-store Worlds), one line each naming the run.
    catalogue_wrong_entries: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def catalogue_agrees(self) -> bool:
        return not (self.catalogue_stale or self.catalogue_missing or self.catalogue_ghosts
                    or self.catalogue_wrong_entries)

    def add(self, where: str, problem: str) -> None:
        self.problems.setdefault(where, []).append(problem)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "runsChecked": self.runs_checked, "eventsChecked": self.events_checked,
            "artifactsChecked": self.artifacts_checked, "problems": self.problems,
            "catalogueStale": self.catalogue_stale, "catalogueMissing": self.catalogue_missing,
            "catalogueGhosts": self.catalogue_ghosts,
            "catalogueWrongEntries": self.catalogue_wrong_entries,
        }


def verify_world(world: Any) -> VerifyReport:
    """Check a World's stored data, as `fsck` does a disk, and return a `VerifyReport`
    (`.ok`, `.problems` keyed by run id or "artifacts", counts checked). Read-only.

    Checks: every artifact re-hashed against its manifest and owned by a run that has a
    log; every run's log contiguous from sequence 1, self-consistent, and a history one
    executor at a time could write (no step committed twice, no record of an execution
    after a newer one started, starts rising: one executor per run); every
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
    folds: dict[str, SummaryDoc | None] = {}
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
        if run_id not in report.problems:
            folds[run_id] = fold_envelopes(run_id, envelopes)
    if world.catalogue is not None:
        _check_catalogue(world, folds, logged, report)
    return report


def _check_one_executor(run_id: str, envelopes: list[dict[str, Any]],
                        report: VerifyReport) -> None:
    """What no single executor writes, as one executor per run would not
    (incarnations.history_problems)."""
    records = [(int(env["sequence"]), str(env.get("type")), env.get("payload"))
               for env in envelopes]
    for _, problem in history_problems(records):
        report.add(run_id, problem)


def _check_catalogue(world: Any, folds: dict[str, SummaryDoc | None], logged: set[str],
                     report: VerifyReport) -> None:
    """The catalogue against the logs (`folds`: each readable log folded, by run id):
    every summary, then every index entry."""
    catalogue = world.catalogue
    docs: dict[str, SummaryDoc] = {}
    for run_id in catalogue.summarized_runs():
        doc = catalogue.summary(run_id)
        if doc is None:
            continue
        docs[run_id] = doc
        if run_id not in logged:
            report.catalogue_ghosts.append(run_id)
    for run_id, expected in folds.items():
        found = docs.get(run_id)
        if expected is None:
            if found is not None:  # a log that holds no run (no run.created): no summary
                report.catalogue_stale.append(run_id)
            continue
        if found is None:
            report.catalogue_missing.append(run_id)
            continue
        if summary_lags(found, expected):
            report.catalogue_stale.append(run_id)
    report.catalogue_wrong_entries = catalogue.entry_problems(docs, float(world.clock.now()))


def rebuild_catalogue(world: Any) -> int:
    """Bring the run catalogue in line with the logs (`little verify --repair`): every
    summary re-folded, wrong index entries removed and missing ones added, summaries
    whose log is gone removed — safe while other processes run and write. Progress on
    stderr for a large World. The number of runs folded."""
    return int(world.catalogue.rebuild(now=float(world.clock.now())))


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
