"""Appends of one run that arrive together share one SQLite commit (local_world), without
breaking DESIGN §10: sequences stay contiguous and in each writer's order, and a failed
commit fails every append allocated after it, so the log never has a hole."""

from __future__ import annotations

import errno
import threading
from typing import Any

import pytest

import little_workflow as lw
from little_workflow.errors import StorageError
from little_workflow.testing import FaultPlan, faulty_local_world

THREADS, PER_THREAD = 12, 40


def count_commits(world: Any) -> list[int]:
    """Count the store's transactions (wraps its public commit_rows on this instance)."""
    store, calls = world.events, [0]
    real = store.commit_rows

    def counted(rows: list, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(rows, **kwargs)

    store.commit_rows = counted
    return calls


def race(world: Any, run_id: str) -> tuple[dict[int, list[Any]], list[BaseException]]:
    """THREADS threads append PER_THREAD events each to one run, all at once."""
    start = threading.Barrier(THREADS)
    done: dict[int, list[Any]] = {t: [] for t in range(THREADS)}
    errors: list[BaseException] = []

    def writer(t: int) -> None:
        start.wait()
        for i in range(PER_THREAD):
            try:
                done[t].append(world.append_event(run_id, "test.note", {"t": t, "i": i},
                                                  durable=i % 3 == 0))
            except StorageError as e:
                errors.append(e)

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return done, errors


def check_log(world: Any, run_id: str, done: dict[int, list[Any]]) -> list[Any]:
    log = world.list_events(run_id)
    assert [e.sequence for e in log] == list(range(1, len(log) + 1))  # contiguous
    by_seq = {e.sequence: e for e in log}
    returned = [e for events in done.values() for e in events]
    assert len(returned) == len(log)  # every success is in the log, nothing else is
    for e in returned:
        assert by_seq[e.sequence].payload == e.payload
    for t, events in done.items():  # each writer's appends in its own order
        if t < 0:
            continue
        seqs = [e.sequence for e in events]
        assert seqs == sorted(seqs)
        assert [e.payload["i"] for e in log if e.payload.get("t") == t] == \
            [e.payload["i"] for e in events]
    return log


def test_concurrent_appends_of_one_run_share_commits_in_order(tmp_path: Any) -> None:
    world = lw.local_world(str(tmp_path / "data"))
    commits = count_commits(world)
    done, errors = race(world, "run_race")
    assert not errors
    log = check_log(world, "run_race", done)
    assert len(log) == THREADS * PER_THREAD
    # One commit at a time per run would take one transaction per append.
    assert commits[0] < len(log), (commits[0], len(log))
    world.close()


def test_a_parallel_group_shares_commits(tmp_path: Any) -> None:
    world = lw.local_world(str(tmp_path / "data"))
    commits = count_commits(world)

    async def noop() -> int:
        return 1

    @lw.workflow(id="pipeline-group")
    async def wf(ctx: lw.RunContext, input: Any) -> int:
        return sum(await ctx.parallel("g", [noop] * 200, max_concurrency=8))

    result = lw.run_workflow(wf, {}, world=world, run_id="run_group")
    assert result.output == 200
    log = world.list_events("run_group")
    assert [e.sequence for e in log] == list(range(1, len(log) + 1))
    first: dict[str, int] = {}
    for e in log:
        path = e.payload.get("stepPath") if isinstance(e.payload, dict) else None
        if e.type == "step.started":
            first.setdefault(path, e.sequence)
        elif e.type == "step.succeeded":
            assert first[path] < e.sequence
    assert sum(e.type == "step.succeeded" for e in log) == 200
    # 400 child appends; eight children at a time share commits.
    assert commits[0] < 200, commits[0]
    world.close()


def test_a_failed_commit_fails_every_later_append_of_the_run(tmp_path: Any) -> None:
    plan = FaultPlan(error=errno.ENOSPC, times=1)
    world = faulty_local_world(str(tmp_path / "data"), plan)
    run_id = "run_fail"
    first = world.append_event(run_id, "test.note", {"n": 1})
    other = world.append_event("run_other", "test.note", {"n": 1})
    p2 = world.submit_event(run_id, "test.note", {"n": 2})
    p3 = world.submit_event(run_id, "test.note", {"n": 3}, durable=False)
    o2 = world.submit_event("run_other", "test.note", {"n": 2})
    assert (p2.event.sequence, p3.event.sequence) == (2, 3)
    late: list[Any] = []
    real = world.events.commit_rows

    def failing_commit(rows: list, **kwargs: Any) -> Any:
        # While this batch commits, one more append of the run is queued behind it.
        if not late:
            late.append(world.submit_event(run_id, "test.note", {"n": 4}))
            plan.crash_at = plan.count + 1  # the next insert fails: disk full, once
        return real(rows, **kwargs)

    world.events.commit_rows = failing_commit
    with pytest.raises(StorageError, match="events.db"):
        p2.result()
    for p in (p3, late[0]):  # allocated after the failed one: they fail too
        with pytest.raises(StorageError):
            p.result()
    with pytest.raises(StorageError):
        o2.result()  # in the same transaction
    # The ledger is back at what is committed: the next append takes sequence 2.
    again = world.append_event(run_id, "test.note", {"n": "again"})
    assert again.sequence == 2
    assert world.append_event("run_other", "test.note", {"n": "again"}).sequence == 2
    log = world.list_events(run_id)
    assert [(e.sequence, e.payload["n"]) for e in log] == [(1, 1), (2, "again")]
    assert first.sequence == 1 and other.sequence == 1
    world.close()


def test_a_failed_commit_in_a_race_leaves_no_hole(tmp_path: Any) -> None:
    plan = FaultPlan(error=errno.ENOSPC, times=1)
    world = faulty_local_world(str(tmp_path / "data"), plan)
    world.append_event("run_race", "test.note", {"warm": True})
    plan.crash_at = plan.count + 150  # one insert in the middle of the race fails
    done, errors = race(world, "run_race")
    assert errors, "the injected failure must have hit an append"
    done[-1] = [world.list_events("run_race")[0]]
    log = check_log(world, "run_race", done)
    assert len(log) == 1 + THREADS * PER_THREAD - len(errors)
    # Later appends still go on contiguously.
    assert world.append_event("run_race", "test.note", {"end": True}).sequence == len(log) + 1
    world.close()


def test_a_finished_run_rolls_back_when_its_end_is_lost(tmp_path: Any) -> None:
    plan = FaultPlan(error=errno.ENOSPC, times=1)
    world = faulty_local_world(str(tmp_path / "data"), plan)
    world.append_event("run_end", "test.note", {})
    plan.crash_at = plan.count + 1
    with pytest.raises(StorageError):
        world.append_event("run_end", "run.completed", {"output": 1})
    # The end was never committed: the run is still open.
    assert world.append_event("run_end", "run.completed", {"output": 1}).sequence == 2
    with pytest.raises(lw.errors.RunFinishedError):
        world.append_event("run_end", "test.note", {})
    world.close()
