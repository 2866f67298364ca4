"""The chaos checker's rules for what users see (issue 27), each proven on a hand-made
history that breaks it and one that does not: the catalogue against the logs, repeated
idempotency keys, a cancelled run's sub-runs before the drain."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from chaos import history


@dataclass
class Ev:
    sequence: int
    type: str
    payload: Any
    created_at: str = "2026-12-01T12:00:00+00:00"
    append_idempotency_key: str | None = None


def run(status: str, *extra: Ev) -> list[Ev]:
    events = [Ev(1, "run.created", {"workflowId": "chaos", "input": {}}),
              Ev(2, "run.started", {"start": 1})]
    events += [Ev(3 + i, e.type, e.payload, e.created_at, e.append_idempotency_key)
               for i, e in enumerate(extra)]
    end = {"completed": ("run.completed", {"output": 1}), "failed": ("run.failed", {"error": {}}),
           "cancelled": ("run.cancelled", {"reason": "x"})}
    if status in end:
        events.append(Ev(len(events) + 1, *end[status]))
    elif status == "waiting":
        events.append(Ev(len(events) + 1, "timer.scheduled",
                         {"stepPath": "nap", "wakeAt": "2030-01-01T00:00:00Z"}))
    return events


def view(statuses: dict[str, str]) -> history.CatalogueView:
    by_status: dict[str, set[str]] = {s: set() for s in history.STATUSES}
    for run_id, s in statuses.items():
        by_status[s].add(run_id)
    return history.CatalogueView(listed=dict(statuses), by_status=by_status)


def rules(found: list[history.Violation]) -> list[str]:
    return sorted({v.rule for v in found})


LOGS = {"run_a": run("completed"), "run_b": run("waiting"), "run_c": run("running")}
TRUE = {"run_a": "completed", "run_b": "waiting", "run_c": "running"}


def test_a_catalogue_that_is_the_fold_of_the_logs_breaks_no_rule():
    assert history.check_what_users_see(LOGS, view(TRUE)) == []


def test_a_catalogue_that_says_other_than_a_log():
    lagging = view({**TRUE, "run_a": "running"})
    assert rules(history.check_catalogue(LOGS, lagging)) == ["catalogue-filter", "catalogue-status"]
    missing = view({k: v for k, v in TRUE.items() if k != "run_b"})
    assert rules(history.check_catalogue(LOGS, missing)) == ["catalogue-filter", "catalogue-missing"]
    ghost = view({**TRUE, "run_gone": "completed"})
    assert rules(history.check_catalogue(LOGS, ghost)) == ["catalogue-ghost"]
    filtered = view(TRUE)
    filtered.by_status["completed"].discard("run_a")  # listed, but not under its status
    filtered.by_status["failed"].add("run_c")
    found = history.check_catalogue(LOGS, filtered)
    assert rules(found) == ["catalogue-filter"] and {v.run_id for v in found} == {"run_a", "run_c"}
    broken = history.CatalogueView(error="CatalogueQueryError: list_runs cursor: ...")
    assert rules(history.check_catalogue(LOGS, broken)) == ["catalogue-status"]


def signal(key: str | None, k: str, *, envelope: bool = True) -> Ev:
    return Ev(0, "signal.received", {"name": "poke", "payload": {"k": k, "key": key}},
              append_idempotency_key=key if envelope else None)


def test_a_key_sent_twice_is_one_event():
    once = run("waiting", signal("key-1", "a"), signal(None, "b"), signal(None, "b"))
    assert history.check_idempotency("run_a", once) == []  # keyless repeats are two events
    twice = run("waiting", signal("key-1", "a"), signal("key-1", "a"))
    assert rules(history.check_idempotency("run_a", twice)) == ["idempotency-repeated"]
    # A sender that dropped the key: the envelope has none, the payload still says it.
    dropped = run("waiting", signal("key-1", "a", envelope=False),
                  signal("key-1", "a", envelope=False))
    assert rules(history.check_idempotency("run_a", dropped)) == ["idempotency-repeated"]


def at(second: float) -> str:
    return f"2026-12-01T12:00:{second:06.3f}+00:00"


def parent_and_child(child_extra: list[Ev], parent_status: str = "cancelled"):
    parent = run(parent_status, Ev(0, "harness.tool_call.started", {
        "callPath": "call-0-chaos_child", "args": {"subRunId": "run_sub"}}))
    parent[-1].created_at = at(5.0)  # its end
    child = [Ev(1, "run.created", {"workflowId": "chaos_child"}, at(1.0)),
             Ev(2, "run.started", {"start": 1}, at(1.0))] + child_extra
    return {"run_p": parent, "run_sub": child}


def test_a_cancelled_runs_sub_run_is_asked_to_cancel_before_it_ends():
    # Left unfinished and never asked: seen before the drain (which then finishes it).
    before = parent_and_child([])
    after = parent_and_child([Ev(3, "run.completed", {"output": 1}, at(9.0))])
    assert rules(history.check_cancelled_sub_runs(before, after)) == ["sub-run-not-cancelled"]
    # Finished by a worker during the chaos, after its parent's end: seen by time.
    assert rules(history.check_cancelled_sub_runs(after, after)) == ["sub-run-not-cancelled"]
    # Asked before the parent ended: whatever came after, nothing broken.
    asked = [Ev(3, "run.cancel_requested", {"reason": "parent"}, at(4.0))]
    for end in ("run.cancelled", "run.completed"):
        done = parent_and_child(asked + [Ev(4, end, {}, at(9.0))])
        assert history.check_cancelled_sub_runs(parent_and_child(asked), done) == []
    # Asked only after the parent ended, then finished: broken.
    late = parent_and_child([Ev(3, "run.cancel_requested", {"reason": "x"}, at(6.0)),
                             Ev(4, "run.completed", {"output": 1}, at(7.0))])
    assert rules(history.check_cancelled_sub_runs(late, late)) == ["sub-run-not-cancelled"]
    # Finished before its parent was cancelled, or a parent that was not: nothing to ask.
    done = parent_and_child([Ev(3, "run.completed", {"output": 1}, at(2.0))])
    assert history.check_cancelled_sub_runs(done, done) == []
    running = parent_and_child([], parent_status="completed")
    assert history.check_cancelled_sub_runs(running, running) == []
