"""DESIGN §13 "A deleted run id is a new run" and §10 "A log has no holes", with a
process that remembers the old run: what a process remembers of a run (its ledger, a
worker's cached log) is a cache of storage, and its caches are bounded.

"Another process" is a real subprocess on local_world and local files (tests/stale_flows.py),
and a second World over a second filesystem object (its own in-process state, as a second
host has) on memory and S3.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import pytest
from checkout import SRC
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem
from soak import soak_size

import little_workflow as lw
from little_workflow.world import shared_state

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import stale_flows  # noqa: E402
from stale_flows import simple  # noqa: E402

KINDS = ["local_world", "local-file", "memory", "s3"]


class Other:
    """A second process (or host) acting on the same storage as the test's World."""

    def __init__(self, kind: str, data_dir: str, make_world: Any):
        self.kind, self.data_dir, self.make_world = kind, data_dir, make_world

    def __call__(self, command: str, *args: Any) -> Any:
        if self.kind in ("local_world", "local-file"):
            env = {**os.environ, "PYTHONPATH": SRC}
            out = subprocess.run(
                [sys.executable, os.path.join(ROOT, "tests", "stale_flows.py"), self.kind,
                 self.data_dir, command, *map(str, args)],
                env=env, capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr
            return json.loads(out.stdout.strip().splitlines()[-1])
        w = self.make_world()
        try:
            return stale_flows.act(w, command, [str(a) for a in args])
        finally:
            w.close()


@pytest.fixture(params=KINDS)
def pair(request: Any, tmp_path: Any) -> tuple[Any, Other]:
    """(this process's World, the other process)."""
    kind = request.param
    if kind == "local_world":
        data_dir = str(tmp_path / "lw")
        world = lw.local_world(data_dir)
        other = Other(kind, data_dir, None)
    elif kind == "local-file":
        data_dir = str(tmp_path / "wf")
        world = lw.virtual_world(LocalFileSystem(), data_dir)
        other = Other(kind, data_dir, None)
    elif kind == "memory":
        fs = MemoryFileSystem(skip_instance_cache=True, global_store=False)

        def second() -> Any:
            # Same store, another filesystem object: its own locks and ledgers.
            twin = MemoryFileSystem(skip_instance_cache=True, global_store=False)
            twin.store, twin.pseudo_dirs = fs.store, fs.pseudo_dirs
            return lw.virtual_world(twin, "/wf")

        world = lw.virtual_world(fs, "/wf")
        other = Other(kind, "/wf", second)
    else:
        s3 = request.getfixturevalue("moto_s3")
        bucket = s3.new_bucket()
        world = lw.virtual_world(s3.filesystem(), f"{bucket}/wf")
        other = Other(kind, f"{bucket}/wf", lambda: lw.virtual_world(s3.filesystem(), f"{bucket}/wf"))
    yield world, other
    world.close()


def rid() -> str:
    return "run_" + uuid.uuid4().hex[:12]


def contiguous(world: Any, run_id: str) -> list[Any]:
    """The run's whole log, read by a World that has never seen it (no cache)."""
    events = world.list_events(run_id)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    return events


def fresh_reader(world: Any, other: Other) -> Any:
    if other.kind == "local_world":
        return world  # one SQLite connection per storage in a process: reads are uncached
    if other.kind == "local-file":
        return lw.virtual_world(LocalFileSystem(), other.data_dir)
    return other.make_world()


# ---- 1. gc, then a reused run id --------------------------------------------------------


def test_reused_run_id_after_foreign_gc_starts_fresh(pair: Any) -> None:
    world, other = pair
    run_id = rid()
    assert lw.run_workflow(simple, {"n": 2}, world=world, run_id=run_id).output["n"] == 2
    assert other("gc")["deleted"] == [run_id]
    again = lw.run_workflow(simple, {"n": 3}, world=world, run_id=run_id)
    assert again.status == "completed" and again.output == {"n": 3, "total": 6}
    events = contiguous(world, run_id)
    assert events[0].type == "run.created" and events[0].payload["input"] == {"n": 3}
    assert [e.type for e in events].count("run.completed") == 1


# ---- 2. a sender that remembers the old run ---------------------------------------------


def _waiting_run_sent_to_then_recreated(world: Any, other: Other, steps_again: int,
                                        key: str | None = None) -> tuple[str, int, int]:
    """The other process runs `run_id` to its wait; this process sends to it (its ledger
    now at K+1); the other finishes the run, gc's it and runs the id again, to its wait
    after `steps_again` steps. Returns (run_id, K+1, length of the new log)."""
    run_id = rid()
    assert other("run", run_id, 1)["status"] == "waiting"
    sent = lw.send_event(world, run_id, "go", 1, idempotency_key=key)
    assert other("run", run_id, 1) == {"status": "completed", "output": {"total": 0, "got": 1}}
    assert other("gc")["deleted"] == [run_id]
    assert other("run", run_id, steps_again)["status"] == "waiting"
    return run_id, sent.sequence, len(fresh_reader(world, other).list_events(run_id))


def test_send_after_foreign_gc_and_rerun_leaves_no_hole(pair: Any) -> None:
    world, other = pair
    run_id, first, now = _waiting_run_sent_to_then_recreated(world, other, 1)
    assert now == first - 1  # the new run waits where the old one did
    try:
        sent = lw.send_event(world, run_id, "go", 2)
    except (lw.RunFinishedError, lw.StorageError) as e:
        assert run_id in str(e)  # refused, naming the run: fine too
        sent = None
    events = contiguous(fresh_reader(world, other), run_id)  # no hole, for every reader
    assert contiguous(world, run_id) == events
    if sent is not None:
        assert sent.sequence == now + 1 and events[-1].payload == {"name": "go", "payload": 2}
        assert other("run", run_id, 1)["output"] == {"total": 0, "got": 2}


def test_stale_receipt_is_not_answered_from_the_old_run(pair: Any) -> None:
    # The new run already has more events than the old one had when this process sent:
    # the old receipt's sequence now holds an event of the new run.
    world, other = pair
    run_id, first, now = _waiting_run_sent_to_then_recreated(world, other, 3, key="k1")
    assert now >= first
    sent = lw.send_event(world, run_id, "go", 1, idempotency_key="k1")
    assert sent.type == "signal.received" and sent.sequence == now + 1
    assert contiguous(fresh_reader(world, other), run_id)[-1] == sent
    assert other("run", run_id, 3)["output"] == {"total": 6, "got": 1}


def test_raw_append_from_a_stale_ledger_leaves_no_hole(pair: Any) -> None:
    # No read before the append: the ledger (at K+1 of the old run) is all this process has.
    world, other = pair
    run_id, first, now = _waiting_run_sent_to_then_recreated(world, other, 1)
    try:
        e = world.append_event(run_id, "note.added", {"x": 1})
    except (lw.RunFinishedError, lw.StorageError) as err:
        assert run_id in str(err)
        e = None
    events = contiguous(fresh_reader(world, other), run_id)
    if e is not None:
        assert e.sequence == now + 1 and events[-1] == e


def test_stale_finished_ledger_does_not_refuse_the_new_run(pair: Any) -> None:
    # This process saw the old run end; the new one (same id) takes an event.
    world, other = pair
    run_id = rid()
    assert lw.run_workflow(simple, {"n": 1}, world=world, run_id=run_id).status == "completed"
    assert other("gc")["deleted"] == [run_id]
    assert other("run", run_id, 1)["status"] == "waiting"
    sent = lw.send_event(world, run_id, "go", 5)
    assert contiguous(fresh_reader(world, other), run_id)[-1] == sent
    assert other("run", run_id, 1)["output"] == {"total": 0, "got": 5}


# ---- 3. a long-lived worker and a re-created run ----------------------------------------


def test_long_lived_worker_runs_a_recreated_run(pair: Any) -> None:
    world, other = pair
    worker = lw.Worker(world, workflows=[simple], concurrency=2, sweep_seconds=0.05)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        run_id = rid()

        def wait_output(expected: dict) -> None:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                events = world.list_events(run_id)
                done = [e for e in events if e.type == "run.completed"]
                if done:
                    assert done[0].payload["output"] == expected
                    return
                time.sleep(0.05)
            raise AssertionError(f"the worker never finished {run_id}: {events}")

        other("start", run_id, 2)
        wait_output({"n": 2, "total": 2})
        assert other("gc")["deleted"] == [run_id]
        other("start", run_id, 3)
        wait_output({"n": 3, "total": 6})
        deadline = time.monotonic() + 10
        while worker.runs_executed < 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # counted once its thread is back, just after run.completed
        time.sleep(0.3)
        assert worker.runs_executed == 2  # each run once, no attempt wasted
        contiguous(world, run_id)
    finally:
        worker.stop()
        thread.join(30)


# ---- 4. caches are bounded ---------------------------------------------------------------


BOUNDED_KINDS = ["local_world", "memory"]


@pytest.mark.parametrize("kind", BOUNDED_KINDS)
def test_a_worker_holds_state_only_for_runs_in_flight(kind: str, tmp_path: Any,
                                                      monkeypatch: Any) -> None:
    if kind == "local_world":
        world = lw.local_world(str(tmp_path / "lw"))
    else:
        world = lw.virtual_world(MemoryFileSystem(skip_instance_cache=True, global_store=False), "/wf")
    # Short: the idle-ledger cap lowered so that twice as many runs as it holds are few.
    cap = soak_size("LW_IDLE_LEDGERS", short=64, full=shared_state.MAX_IDLE_LEDGERS)
    monkeypatch.setattr(shared_state, "MAX_IDLE_LEDGERS", cap)
    n = 2 * cap
    with world:
        for i in range(n):
            lw.start_workflow(simple, {"n": 1}, world=world, run_id=f"run_b{i}")
        worker = lw.Worker(world, workflows=[simple], concurrency=4)
        worker.run_until_idle()
        assert worker.runs_executed == n
        assert len(world.state.ledgers) <= 4, len(world.state.ledgers)
        assert sum(len(c) for c in (worker._logs, worker._backoff._blocked,
                                    worker._no_log_since, worker._finished, worker._reread)) <= 4
        # Reading and sending to many runs: the cache stays bounded all the same.
        for i in range(n):
            world.list_events(f"run_b{i}")
        assert len(world.state.ledgers) <= shared_state.MAX_IDLE_LEDGERS


@pytest.mark.parametrize("kind", BOUNDED_KINDS)
def test_evicted_ledger_keeps_idempotency(kind: str, tmp_path: Any) -> None:
    if kind == "local_world":
        world = lw.local_world(str(tmp_path / "lw"))
    else:
        world = lw.virtual_world(MemoryFileSystem(skip_instance_cache=True, global_store=False), "/wf")
    with world:
        first = world.append_event("run_keyed", "note.added", {"v": 1}, idempotency_key="k")
        for i in range(shared_state.MAX_IDLE_LEDGERS + 10):
            world.append_event(f"run_fill{i}", "note.added", {"v": i})
        assert "run_keyed" not in world.state.ledgers  # evicted
        assert world.append_event("run_keyed", "note.added", {"v": 1}, idempotency_key="k") == first
        with pytest.raises(lw.IdempotencyConflictError):
            world.append_event("run_keyed", "note.added", {"v": 2}, idempotency_key="k")
        assert [e.sequence for e in world.list_events("run_keyed")] == [1]


def test_worker_cache_of_a_run_deleted_and_created_again_between_sweeps(pair: Any) -> None:
    # The worker read the run once (created, input n=2); between two of its sweeps the run
    # was executed elsewhere, gc'd, and created again with another input.
    world, other = pair
    worker = lw.Worker(world, workflows=[simple], concurrency=1, sweep_seconds=0.05)
    run_id = rid()
    other("start", run_id, 2)
    assert [d[0] for d in worker.due_runs()] == [run_id]
    assert other("simple", run_id, 2)["status"] == "completed"
    assert other("gc")["deleted"] == [run_id]
    other("start", run_id, 3)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            events = contiguous(world, run_id)
            if events[-1].type == "run.completed":
                break
            time.sleep(0.05)
        assert events[-1].type == "run.completed", "the worker never ran the new run"
        assert events[-1].payload["output"] == {"n": 3, "total": 6}
    finally:
        worker.stop()
        thread.join(30)
