"""Queues (DESIGN §17) in one process: declaring, enqueueing, the worker starting queued
runs within their limits, dedup, debounce, and the errors. Worker processes racing on
local_world, local files and S3 are tests/test_queues_processes.py."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import private_memory

import little_workflow as lw
from little_workflow.runtime.queue_layout import slot_name
from little_workflow.testing import FakeClock

LEDGER: list[tuple[str, str, float]] = []  # (run id, "start" | "end", time.monotonic())
LEDGER_LOCK = threading.Lock()


def note(run_id: str, what: str) -> None:
    with LEDGER_LOCK:
        LEDGER.append((run_id, what, time.monotonic()))


def hold(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@lw.workflow(id="q-busy")
async def busy(ctx: lw.RunContext, input: dict) -> dict:
    note(ctx.run_id, "start")
    await ctx.step("work", hold, float(input.get("seconds", 0.05)))
    note(ctx.run_id, "end")
    return {"n": input.get("n"), "key": input.get("key")}


@lw.workflow(id="q-waits")
async def waits(ctx: lw.RunContext, input: dict) -> dict:
    note(ctx.run_id, "start")
    got = await ctx.wait_for_event("go", "go")
    note(ctx.run_id, "end")
    return {"got": got}


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    points = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals],
                    key=lambda p: (p[0], p[1]))
    now = best = 0
    for _, d in points:
        now += d
        best = max(best, now)
    return best


def intervals(run_ids: set[str] | None = None) -> list[tuple[float, float]]:
    starts: dict[str, float] = {}
    out = []
    with LEDGER_LOCK:
        for run_id, what, t in LEDGER:
            if run_ids is not None and run_id not in run_ids:
                continue
            if what == "start":
                starts[run_id] = t
            elif run_id in starts:
                out.append((starts.pop(run_id), t))
    return out


@pytest.fixture(autouse=True)
def fresh_ledger():
    with LEDGER_LOCK:
        LEDGER.clear()
    yield


def drain(world, workflows=(busy,), concurrency: int = 8) -> lw.Worker:
    worker = lw.Worker(world, workflows=list(workflows), concurrency=concurrency)
    try:
        worker.run_until_idle()
    finally:
        worker.close()
    return worker


def first_admissions(world, run_ids) -> dict[str, dict]:
    """Each run's first `run.started` admission record (queue, time counted, counted)."""
    out = {}
    for run_id in run_ids:
        for e in world.list_events(run_id):
            if e.type == "run.started":
                out[run_id] = dict(e.payload["admission"])
                break
    return out


# ---- declaring ----------------------------------------------------------------------------

def test_a_queue_is_declared_before_use_and_declaring_again_replaces_its_limits(memory_world):
    with pytest.raises(lw.QueueNotFoundError, match="'llm'"):
        lw.enqueue(memory_world, busy, {"n": 1}, queue="llm")
    assert memory_world.list_runs() == []  # nothing written
    q = lw.declare_queue(memory_world, "llm", concurrency=8, per_key_concurrency=1,
                         rate_limit=lw.RateLimit(limit=50, period=60))
    assert (q.name, q.concurrency, q.per_key_concurrency, q.rate_limit) == (
        "llm", 8, 1, lw.RateLimit(50, 60))
    lw.declare_queue(memory_world, "llm", concurrency=2)
    lw.declare_queue(memory_world, "other")
    queues = lw.list_queues(memory_world)
    assert [(x.name, x.concurrency, x.per_key_concurrency, x.rate_limit) for x in queues] == [
        ("llm", 2, None, None), ("other", None, None, None)]


@pytest.mark.parametrize("bad, error", [
    (dict(concurrency=0), ValueError), (dict(per_key_concurrency=-1), ValueError),
    (dict(concurrency=True), ValueError), (dict(rate_limit=(5, 1)), TypeError)])
def test_declaring_with_bad_limits_names_them(memory_world, bad, error):
    with pytest.raises(error, match=next(iter(bad))):
        lw.declare_queue(memory_world, "q", **bad)


@pytest.mark.parametrize("limit, period", [(0, 1), (1.5, 1), (1, 0), (1, float("inf"))])
def test_a_bad_rate_limit_is_refused(limit, period):
    with pytest.raises(ValueError, match="RateLimit"):
        lw.RateLimit(limit=limit, period=period)


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "x" * 101, 7])
def test_a_bad_queue_name_is_refused(memory_world, name):
    with pytest.raises(ValueError, match="queue name"):
        lw.declare_queue(memory_world, name)


@pytest.mark.parametrize("bad, error", [
    (dict(priority="high"), TypeError), (dict(key=3), TypeError), (dict(dedup_id=""), TypeError),
    (dict(on_duplicate="ignore"), ValueError), (dict(debounce=0), ValueError)])
def test_enqueue_with_bad_arguments_names_them_and_writes_nothing(memory_world, bad, error):
    lw.declare_queue(memory_world, "q")
    with pytest.raises(error, match=next(iter(bad))):
        lw.enqueue(memory_world, busy, {"n": 1}, queue="q", **bad)
    assert memory_world.list_runs() == []


def test_invalid_input_is_refused_before_anything_is_written(memory_world):
    @lw.workflow(id="q-typed", input_schema={"type": "object", "required": ["n"]})
    async def typed(ctx, input):
        return input

    lw.declare_queue(memory_world, "q")
    with pytest.raises(lw.SchemaValidationError):
        lw.enqueue(memory_world, typed, {"m": 1}, queue="q")
    assert memory_world.list_runs() == []
    assert memory_world.read_document("queues/q/order.json") is None


# ---- a queued run -------------------------------------------------------------------------

def test_a_queued_run_is_created_and_only_a_worker_starts_it(make_world):
    world = make_world()
    lw.declare_queue(world, "q", concurrency=2)
    handle = lw.enqueue(world, busy, {"n": 7}, queue="q", key="k", priority=3)
    assert handle.status() == "created"
    created = world.list_events(handle.run_id)[0].payload
    assert dict(created["queue"]) == {"name": "q", "key": "k", "priority": 3, "order": 1}
    with pytest.raises(lw.RunQueuedError, match="queue 'q'"):
        lw.run_workflow(busy, {"n": 7}, world=world, run_id=handle.run_id)
    assert handle.status() == "created"  # refused before anything was appended
    assert lw.list_queues(world)[0].depth == 1
    drain(world)
    assert handle.result(timeout=10) == {"n": 7, "key": None}
    assert lw.run_workflow(busy, {"n": 7}, world=world, run_id=handle.run_id).output == {
        "n": 7, "key": None}  # a finished queued run answers like any finished run
    assert lw.list_queues(world)[0].depth == 0


def test_enqueue_order_is_recorded_in_run_created(memory_world):
    lw.declare_queue(memory_world, "q")
    handles = [lw.enqueue(memory_world, busy, {"n": i}, queue="q") for i in range(5)]
    orders = [memory_world.list_events(h.run_id)[0].payload["queue"]["order"] for h in handles]
    assert orders == [1, 2, 3, 4, 5]


def test_runs_start_by_priority_then_enqueue_order_with_one_slot(memory_world):
    lw.declare_queue(memory_world, "one", concurrency=1)
    priorities = [3, 1, 2, 1, 0, 2, 0]
    handles = [lw.enqueue(memory_world, busy, {"n": i, "seconds": 0.01}, queue="one", priority=p)
               for i, p in enumerate(priorities)]
    drain(memory_world)
    started = [h.run_id for h in sorted(handles, key=lambda h: first_admissions(
        memory_world, [h.run_id])[h.run_id]["at"])]
    expected = [h.run_id for _, _, h in sorted(
        (p, i, h) for i, (p, h) in enumerate(zip(priorities, handles, strict=True)))]
    assert started == expected
    assert max_overlap(intervals()) == 1


def test_concurrency_caps_the_runs_executing_at_once(memory_world):
    lw.declare_queue(memory_world, "q", concurrency=2)
    handles = [lw.enqueue(memory_world, busy, {"n": i, "seconds": 0.05}, queue="q")
               for i in range(8)]
    drain(memory_world, concurrency=8)
    assert all(h.status() == "completed" for h in handles)
    assert max_overlap(intervals()) == 2


def test_per_key_concurrency_caps_each_key_and_a_full_key_holds_back_no_other(memory_world):
    lw.declare_queue(memory_world, "q", concurrency=4, per_key_concurrency=1)
    hot = [lw.enqueue(memory_world, busy, {"n": i, "seconds": 0.05}, queue="q", key="hot")
           for i in range(6)]
    cold = [lw.enqueue(memory_world, busy, {"n": i, "seconds": 0.05}, queue="q", key=f"c{i}")
            for i in range(3)]
    drain(memory_world)
    hot_ids = {h.run_id for h in hot}
    assert max_overlap(intervals(hot_ids)) == 1
    assert max_overlap(intervals()) <= 4
    # Fair across keys: every cold key started while the hot key's backlog was still there.
    starts = {run_id: t for run_id, what, t in LEDGER if what == "start"}
    last_hot = max(starts[r] for r in hot_ids)
    assert all(starts[c.run_id] < last_hot for c in cold)
    assert max(starts[c.run_id] for c in cold) < sorted(starts[r] for r in hot_ids)[1]


def test_a_waiting_run_gives_its_slot_back_and_takes_one_to_resume(memory_world):
    lw.declare_queue(memory_world, "q", concurrency=1, rate_limit=lw.RateLimit(2, 3600))
    waiter = lw.enqueue(memory_world, waits, {}, queue="q")
    other = lw.enqueue(memory_world, busy, {"n": 1, "seconds": 0.01}, queue="q")
    drain(memory_world, workflows=(busy, waits))
    assert waiter.status() == "waiting"
    assert other.status() == "completed"  # started while the first one waited
    waiter.send("go", {"ok": True})
    drain(memory_world, workflows=(busy, waits))
    assert waiter.result(timeout=10) == {"got": {"ok": True}}
    starts = [e.payload for e in memory_world.list_events(waiter.run_id) if e.type == "run.started"]
    # The resume took the slot again and was not counted as a start (the window holds
    # 2 starts an hour: a third count would have blocked it).
    assert [s["admission"]["counted"] for s in starts] == [True, False]


def test_run_until_idle_waits_for_a_slot_another_holder_frees(memory_world):
    lw.declare_queue(memory_world, "q", concurrency=1)
    held = memory_world.take_slot(slot_name("q", 0), "another worker")
    handle = lw.enqueue(memory_world, busy, {"n": 1, "seconds": 0.01}, queue="q")
    worker = lw.Worker(memory_world, workflows=[busy])
    done = threading.Event()
    t = threading.Thread(target=lambda: (worker.run_until_idle(), done.set()))
    t.start()
    try:
        assert not done.wait(0.6)  # waits for the slot: the run is work, not idleness
        assert handle.status() == "created"
        held.release()
        assert done.wait(10)
        assert handle.status() == "completed"
    finally:
        worker.stop()
        t.join()
        worker.close()


def test_run_until_idle_does_not_wait_for_a_queued_run_another_caller_holds(memory_world):
    lw.declare_queue(memory_world, "q", concurrency=1)
    handle = lw.enqueue(memory_world, busy, {"n": 1}, queue="q")
    with memory_world.run_lock(handle.run_id):  # as another worker starting it would
        drain(memory_world)  # returns
        assert handle.status() == "created"
    drain(memory_world)
    assert handle.status() == "completed"


# ---- dedup --------------------------------------------------------------------------------

def test_dedup_returns_the_unfinished_run_and_raises_only_if_asked(memory_world):
    lw.declare_queue(memory_world, "q")
    first = lw.enqueue(memory_world, busy, {"n": 1}, queue="q", dedup_id="ticket-981")
    again = lw.enqueue(memory_world, busy, {"n": 2}, queue="q", dedup_id="ticket-981")
    assert again.run_id == first.run_id
    with pytest.raises(lw.DuplicateRunError) as info:
        lw.enqueue(memory_world, busy, {"n": 3}, queue="q", dedup_id="ticket-981",
                   on_duplicate="raise")
    assert info.value.run_id == first.run_id and "ticket-981" in str(info.value)
    lw.declare_queue(memory_world, "other")  # scoped to its queue
    elsewhere = lw.enqueue(memory_world, busy, {"n": 4}, queue="other", dedup_id="ticket-981")
    assert elsewhere.run_id != first.run_id
    drain(memory_world)
    assert first.result(timeout=10) == {"n": 1, "key": None}
    after = lw.enqueue(memory_world, busy, {"n": 5}, queue="q", dedup_id="ticket-981")
    assert after.run_id != first.run_id  # finished: the id is free again
    assert len([r for r in memory_world.list_runs()]) == 3


def test_a_dedup_id_claimed_by_a_run_that_was_never_written_is_freed(memory_world):
    clock = FakeClock(start=1_800_000_000.0)
    world = lw.virtual_world(private_memory(), "/wf", clock=clock)
    lw.declare_queue(world, "q")
    from little_workflow.runtime.queue_layout import hashed

    # As if an enqueuer died between claiming the id and writing its run.
    world.write_document(f"queues/q/dedup/{hashed('d')}.json",
                         {"dedupId": "d", "runId": "run_unborn", "at": clock.now()})
    assert lw.enqueue(world, busy, {"n": 1}, queue="q", dedup_id="d").run_id == "run_unborn"
    clock.advance(61)
    handle = lw.enqueue(world, busy, {"n": 1}, queue="q", dedup_id="d")
    assert handle.run_id != "run_unborn" and handle.status() == "created"


# ---- debounce -----------------------------------------------------------------------------

def test_debounce_keeps_one_run_with_the_last_input_starting_after_the_window():
    clock = FakeClock(start=1_800_000_000.0)
    world = lw.virtual_world(private_memory(), "/wf", clock=clock)
    lw.declare_queue(world, "q")
    handles = []
    for i in range(3):
        handles.append(lw.enqueue(world, busy, {"n": i}, queue="q", key="user-1", debounce=30))
        clock.advance(10)
    other_key = lw.enqueue(world, busy, {"n": 9}, queue="q", key="user-2", debounce=30)
    for h in handles[:2]:
        assert h.status() == "cancelled"
        cancelled = [e for e in world.list_events(h.run_id) if e.type == "run.cancelled"]
        assert cancelled[0].payload["reason"] == "debounced"
    last = handles[2]
    assert last.status() == "created"
    drain(world)  # 20 s after the last enqueue: not yet, and not waited for
    assert last.status() == "created" and other_key.status() == "created"
    clock.advance(20)
    drain(world)
    assert last.result(timeout=10) == {"n": 2, "key": None}
    assert other_key.status() == "created"  # its own window: 10 s to go
    clock.advance(10)
    drain(world)
    assert other_key.result(timeout=10) == {"n": 9, "key": None}


def test_a_debounced_run_that_started_is_not_replaced():
    clock = FakeClock(start=1_800_000_000.0)
    world = lw.virtual_world(private_memory(), "/wf", clock=clock)
    lw.declare_queue(world, "q")
    first = lw.enqueue(world, busy, {"n": 1}, queue="q", key="k", debounce=5)
    clock.advance(5)
    drain(world)
    assert first.status() == "completed"
    second = lw.enqueue(world, busy, {"n": 2}, queue="q", key="k", debounce=5)
    assert second.run_id != first.run_id and first.status() == "completed"


def test_a_pending_run_the_debounce_document_moved_past_is_cancelled_by_the_worker():
    """An enqueuer that died after moving the key's document to its new run but before
    cancelling the old one: the worker cancels the old one instead of starting it."""
    clock = FakeClock(start=1_800_000_000.0)
    world = lw.virtual_world(private_memory(), "/wf", clock=clock)
    lw.declare_queue(world, "q")
    old = lw.enqueue(world, busy, {"n": 1}, queue="q", key="k", debounce=5)
    new = lw.enqueue(world, busy, {"n": 2}, queue="q", key="k", debounce=5)
    # Undo the cancel the enqueue made: as if it never got that far.
    from little_workflow.runtime.queue_layout import hashed

    world.delete_run(old.run_id)
    lw.enqueue(world, busy, {"n": 1}, queue="q", key="k", run_id=old.run_id)
    events = world.list_events(old.run_id)
    payload = {**events[0].payload, "queue": {**events[0].payload["queue"], "debounce": 5.0}}
    world.delete_run(old.run_id)
    world.append_event(old.run_id, "run.created", payload)
    from little_workflow.runtime.active_index import mark_active

    mark_active(world, old.run_id, "q-busy")
    assert world.read_document(f"queues/q/debounce/{hashed('k')}.json")["runId"] == new.run_id
    clock.advance(6)
    drain(world)
    assert old.status() == "cancelled" and new.result(timeout=10) == {"n": 2, "key": None}


# ---- deleting -----------------------------------------------------------------------------

def test_deleting_a_queue_with_unfinished_runs_needs_force_which_cancels_them(memory_world):
    lw.declare_queue(memory_world, "q")
    handle = lw.enqueue(memory_world, busy, {"n": 1}, queue="q")
    with pytest.raises(lw.QueueNotEmptyError, match=handle.run_id):
        lw.delete_queue(memory_world, "q")
    lw.delete_queue(memory_world, "q", force=True)
    assert handle.status() == "cancelled"
    assert lw.list_queues(memory_world) == []
    with pytest.raises(lw.QueueNotFoundError):
        lw.delete_queue(memory_world, "q")
    with pytest.raises(lw.QueueNotFoundError):
        lw.enqueue(memory_world, busy, {"n": 1}, queue="q")


# ---- rate limit ---------------------------------------------------------------------------

def test_starts_within_any_window_never_exceed_the_rate_limit(memory_world):
    lw.declare_queue(memory_world, "r", rate_limit=lw.RateLimit(limit=3, period=0.5))
    handles = [lw.enqueue(memory_world, busy, {"n": i, "seconds": 0}, queue="r")
               for i in range(9)]
    drain(memory_world)
    assert all(h.status() == "completed" for h in handles)
    from little_workflow.world.clock import from_iso

    times = sorted(from_iso(a["at"]) for a in first_admissions(
        memory_world, [h.run_id for h in handles]).values())
    for i, t in enumerate(times):
        assert len([u for u in times[i:] if u < t + 0.5]) <= 3
    # and it does not wait longer than the window needs: 9 starts at 3 per 0.5 s
    assert times[-1] - times[0] < 3.0


def test_a_worker_starts_when_the_window_has_room_by_the_worlds_clock():
    # The window is 600 s of a FakeClock: a worker that slept until its next look (in
    # real seconds) instead of until the window frees would not start the next three
    # runs when the clock is moved to exactly that moment.
    t0 = 1_800_000_000.0
    clock = FakeClock(start=t0, stall_seconds=None)
    world = lw.virtual_world(private_memory(), "/wf", clock=clock)
    lw.declare_queue(world, "r", rate_limit=lw.RateLimit(limit=3, period=600))
    handles = [lw.enqueue(world, busy, {"n": i, "seconds": 0}, queue="r") for i in range(9)]
    run_ids = [h.run_id for h in handles]
    worker = lw.Worker(world, workflows=[busy], concurrency=8)
    drainer = threading.Thread(target=worker.run_until_idle, daemon=True)
    drainer.start()
    try:
        for started in (3, 6):
            give_up = time.monotonic() + 60
            while sum(h.status() == "completed" for h in handles) < started:
                assert time.monotonic() < give_up, f"fewer than {started} runs started"
                time.sleep(0.02)
            assert len(first_admissions(world, run_ids)) == started  # the window holds
            clock.advance(600)  # the window frees exactly now
        drainer.join(60)
        assert not drainer.is_alive(), "the worker did not start the last runs"
    finally:
        worker.close()
    from little_workflow.world.clock import from_iso

    times = sorted(from_iso(a["at"]) for a in first_admissions(world, run_ids).values())
    assert times == [t0] * 3 + [t0 + 600] * 3 + [t0 + 1200] * 3


def test_a_pass_counts_its_first_starts_in_the_window_with_one_write(memory_world):
    from little_workflow.world.tracing import tracing_world

    writes: list[str] = []

    def on_call(name, args, kwargs):
        if name == "update_document" and str(args[0]).endswith("/starts.json"):
            writes.append(args[0])

    world = tracing_world(memory_world, on_call)
    lw.declare_queue(world, "r", rate_limit=lw.RateLimit(limit=5, period=600))
    handles = [lw.enqueue(world, busy, {"n": i, "seconds": 0}, queue="r") for i in range(8)]
    worker = lw.Worker(world, workflows=[busy], concurrency=8)
    try:
        assert worker.sweep() == 5  # the window's room, not the worker's 8
        # The five run on the worker's threads: close() would cancel those not yet begun.
        for h in handles[:5]:
            h.result(timeout=120)
    finally:
        worker.close()
    assert writes == ["queues/r/starts.json"]  # one compare-and-swap for the five
    assert sorted(h.status() for h in handles) == ["completed"] * 5 + ["created"] * 3


def test_list_queues_counts_depth_running_and_recent_rate(memory_world):
    lw.declare_queue(memory_world, "q", concurrency=1)
    for i in range(3):
        lw.enqueue(memory_world, busy, {"n": i, "seconds": 0}, queue="q")
    lw.enqueue(memory_world, waits, {}, queue="q", priority=-1)
    assert [(q.depth, q.running) for q in lw.list_queues(memory_world)] == [(4, 0)]
    drain(memory_world, workflows=(busy, waits))
    (q,) = lw.list_queues(memory_world)
    assert (q.depth, q.running) == (0, 0)
    assert q.recent_rate > 0
