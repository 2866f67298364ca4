"""One vocabulary, one rule for a run's status (world/vocabulary.py, issue 33 item 2): the
runtime's fold (`RunLog`) and the catalogue's (`fold_envelopes`) say the same status and
the same open wait for any log, because both move a status with `status_after`."""

from __future__ import annotations

import random

from little_workflow.runtime.state import RunLog, SubRunCall, TimerRecord, WaitRecord
from little_workflow.world.catalogue import RunSummary, SummaryDoc, fold_envelopes
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


def keys_fit(record: dict, shape: type) -> bool:
    """Whether a record has every key its TypedDict requires and no key it does not name."""
    required = shape.__required_keys__  # type: ignore[attr-defined]
    return required <= record.keys() <= set(shape.__annotations__)


def test_the_typed_run_data_names_every_key_the_folds_write():
    """`SummaryDoc` (the catalogue's stored summary) and RunLog's `TimerRecord`,
    `WaitRecord`, `SubRunCall` describe what the folds actually make, for any log."""
    rng = random.Random(34)
    for _ in range(1500):
        log = random_log(rng)
        if rng.random() < 0.3:
            call = f"call-{rng.randrange(2)}-child"
            log.append(rng.choice([
                ("harness.tool_call.started", {"callPath": call, "name": "child",
                                               "args": {"subRunId": "run_child1"}}),
                ("harness.tool_call.succeeded", {"callPath": call, "callKey": "k", "result": 1}),
            ]))
        run_log, summary = both_folds(log)
        assert summary is not None and keys_fit(summary, SummaryDoc), (log, summary)
        for timer in run_log.timers.values():
            assert keys_fit(timer, TimerRecord), (log, timer)
        for wait in run_log.waits.values():
            assert keys_fit(wait, WaitRecord), (log, wait)
        for sub in run_log.sub_runs.values():
            assert keys_fit(sub, SubRunCall), (log, sub)


def test_a_stored_summary_is_a_summary_doc(memory_world, local_world_):
    for world in (memory_world, local_world_):
        world.append_event("run_shape1", "run.created", {"workflowId": "wf"})
        world.append_event("run_shape1", "run.started", {"start": 1})
        world.append_event("run_shape1", "wait.started", {"stepPath": "w#1", "name": "go",
                                                          "deadline": None})
        doc = world.catalogue.summary("run_shape1")
        assert doc is not None and doc["status"] == "waiting", doc
        assert keys_fit(doc, SummaryDoc), doc
        assert RunSummary.from_doc(doc).waiting == doc["waiting"]
