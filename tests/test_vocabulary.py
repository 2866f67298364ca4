"""One vocabulary, one rule for a run's status (world/vocabulary.py, issue 33 item 2): the
runtime's fold (`RunLog`) and the catalogue's (`fold_envelopes`) say the same status and
the same open wait for any log, because both move a status with `status_after`."""

from __future__ import annotations

import random

from little_workflow.runtime.state import RunLog
from little_workflow.world.catalogue import RunSummary, fold_envelopes
from little_workflow.world.models import Event
from little_workflow.world.vocabulary import (
    FINISHED_STATUSES,
    RUN_ENDINGS,
    RUN_STATUSES,
    status_after,
)

RUN = "run_vocab1"


def lifecycle_event(rng: random.Random) -> tuple[str, dict]:
    path = rng.choice(["sleep#1", "wait#1", "wait#2"])
    return rng.choice([
        ("run.started", {"start": 1}),
        ("step.started", {"stepPath": "s#1", "attempt": rng.choice([1, 2])}),
        ("step.succeeded", {"stepPath": "s#1", "output": 1}),
        ("timer.scheduled", {"stepPath": path, "wakeAt": "2030-01-01T00:00:00Z"}),
        ("timer.fired", {"stepPath": path}),
        ("wait.started", {"stepPath": path, "name": "approval", "deadline": None}),
        ("wait.timed_out", {"stepPath": path}),
        ("wait.completed", {"stepPath": path, "signalSequence": None}),
        ("signal.received", {"name": "approval", "payload": {}}),
        ("run.resume_refused", {"version": "v2"}),
        ("run.cancel_requested", {"reason": "r"}),
        ("run.completed", {"output": 1}),
        ("run.failed", {"error": {"type": "E", "message": "m"}}),
        ("run.cancelled", {"reason": "r"}),
    ])


def random_log(rng: random.Random) -> list[tuple[str, dict]]:
    first = rng.choice([("run.created", {"workflowId": "wf"}), ("langgraph.thread", {"threadId": "t"})])
    return [first] + [lifecycle_event(rng) for _ in range(rng.randrange(12))]


def both_folds(log: list[tuple[str, dict]]) -> tuple[RunLog, dict | None]:
    at = "2026-12-02T00:00:00.000000Z"
    events = [Event(event_id=f"e{i}", run_id=RUN, sequence=i, type=t, payload=p, created_at=at,
                    append_idempotency_key=None, request_digest="")
              for i, (t, p) in enumerate(log, 1)]
    envelopes = [{"type": t, "payload": p, "createdAt": at, "sequence": i}
                 for i, (t, p) in enumerate(log, 1)]
    return RunLog.fold(RUN, events), fold_envelopes(RUN, envelopes)


def test_the_runtime_and_the_catalogue_fold_every_log_to_one_status_and_one_wait():
    rng = random.Random(33)
    seen = set()
    for _ in range(3000):
        log = random_log(rng)
        run_log, summary = both_folds(log)
        assert summary is not None, log
        assert summary["status"] == run_log.status, log
        seen.add(run_log.status)
        waiting = dict(next(iter(run_log.open_waits.values()))) \
            if run_log.status == "waiting" and run_log.open_waits else None
        assert summary["waiting"] == waiting, log
    assert seen == set(RUN_STATUSES), seen  # every status was reached


def test_status_after_ends_a_run_once_its_ending_event_comes_and_nothing_else_moves_it():
    for ending, status in RUN_ENDINGS.items():
        assert status_after("running", ending, True) == status
        for later in ("run.started", "timer.scheduled", "wait.completed", "step.started"):
            assert status_after(status, later, False) == status
    assert status_after("unknown", "run.created", False) == "created"
    assert status_after("created", "timer.scheduled", True) == "created"
    assert status_after("created", "run.started", True) == "waiting"
    assert status_after("waiting", "wait.completed", False) == "running"
    assert status_after("running", "step.started", True) == "running"
    assert set(FINISHED_STATUSES) == set(RUN_ENDINGS.values())


def test_a_run_summary_status_is_a_run_status():
    assert RunSummary.__annotations__["status"] == "RunStatus"
