"""fsck for workflow data: re-hash every artifact, check every run's log."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import LittleWorkflowError
from .ids import RUN_ID_RE, event_id, find_artifact_refs, request_digest


@dataclass
class VerifyReport:
    runs_checked: int = 0
    events_checked: int = 0
    artifacts_checked: int = 0
    problems: dict[str, list[str]] = field(default_factory=dict)  # run id or "artifacts"

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, where: str, problem: str) -> None:
        self.problems.setdefault(where, []).append(problem)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "runsChecked": self.runs_checked, "eventsChecked": self.events_checked,
            "artifactsChecked": self.artifacts_checked, "problems": self.problems,
        }


def verify_world(world: Any) -> VerifyReport:
    report = VerifyReport()
    for aid in world.artifacts.list_ids():
        report.artifacts_checked += 1
        try:
            world.read_artifact("artifact://" + aid)
        except LittleWorkflowError as e:
            report.add("artifacts", str(e))
    events = world.events
    for run_id in world.list_runs():
        if not RUN_ID_RE.fullmatch(run_id):
            continue
        report.runs_checked += 1
        sequences = events.listed_sequences(run_id)
        expected = list(range(1, len(sequences) + 1))
        if sequences != expected:
            missing = sorted(set(range(1, (max(sequences) if sequences else 0) + 1)) - set(sequences))
            report.add(run_id, f"event sequence is not contiguous: missing {missing[:10]}")
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
            for ref in sorted(find_artifact_refs(env.get("payload"))):
                try:
                    world.artifacts.read_manifest(ref)
                except LittleWorkflowError as e:
                    report.add(run_id, f"event {seq} references {ref}: {e}")
    return report
