"""Durable time, messages and cancellation (DESIGN §11) through the public API, on every
World of the conformance suite. A FakeClock moves time: no test sleeps for an hour."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
import time
import uuid
from datetime import datetime, timezone

import pytest

import little_workflow as lw
from little_workflow.testing import FakeClock

T0 = 1_800_000_000.0
HOUR = 3600.0


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="microseconds").replace(
        "+00:00", "Z")


def in_thread(fn, *args, **kwargs) -> concurrent.futures.Future:
    pool = concurrent.futures.ThreadPoolExecutor(1)
    fut = pool.submit(fn, *args, **kwargs)
    pool.shutdown(wait=False)
    return fut


def wait_until(cond, timeout=10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        time.sleep(0.005)


def status(world, run_id) -> str:
    return lw.materialize_run_state(world, run_id).status


class Calls:
    def __init__(self):
        self.names: list[str] = []
        self.lock = threading.Lock()

    def fn(self, name, value=None):
        def call():
            with self.lock:
                self.names.append(name)
            return value if value is not None else name
        return call


# ---- the clock --------------------------------------------------------------------------

def test_world_clock_stamps_events_and_artifacts(make_world):
    clock = FakeClock(start=T0)
    world = make_world(clock=clock)
    assert world.clock is clock
    e = world.append_event("run_clock1", "note", {"a": 1})
    assert e.created_at == iso(T0)
    clock.advance(90.5)
    m = world.write_artifact("run_clock1", "s", "out", {"x": 1})
    assert m.created_at == iso(T0 + 90.5)
    assert world.append_event("run_clock1", "note", {}).created_at == iso(T0 + 90.5)


def test_fake_clock_wakes_sleepers_in_other_loops():
    clock = FakeClock(start=10.0)
    woke = []

    async def sleeper():
        await clock.sleep_until(20.0)
        woke.append(clock.now())

    fut = in_thread(asyncio.run, sleeper())
    time.sleep(0.05)
    clock.advance(5)
    time.sleep(0.05)
    assert not woke
    clock.advance(5)
    fut.result(timeout=5)
    assert woke == [20.0]
    with pytest.raises(ValueError):
        clock.advance(-1)


# ---- sleeps -----------------------------------------------------------------------------

def make_sleeper(calls: Calls):
    @lw.workflow(id="sleeper")
    async def sleeper(ctx, input):
        a = await ctx.step("before", calls.fn("before"))
        await ctx.sleep("nap", input["seconds"])
        b = await ctx.step("after", calls.fn("after"))
        return {"a": a, "b": b, "woke": ctx.now().isoformat()}
    return sleeper


def test_sleep_suspends_and_resumes_at_the_committed_wake_time(make_world):
    clock = FakeClock(start=T0)
    world = make_world(clock=clock)
    calls = Calls()
    wf = make_sleeper(calls)
    r = lw.run_workflow(wf, {"seconds": HOUR}, world=world, run_id="run_nap", suspend=True)
    assert r.status == "waiting"
    assert r.waiting == {"kind": "sleep", "stepPath": "nap", "wakeAt": iso(T0 + HOUR)}
    state = lw.materialize_run_state(world, "run_nap")
    assert state.status == "waiting" and state.waiting["wakeAt"] == iso(T0 + HOUR)
    # The lock is released: calling again before the wake time waits again, same wake time.
    clock.advance(HOUR - 1)
    r = lw.run_workflow(wf, {"seconds": HOUR}, world=make_world.reopen(clock=clock),
                        run_id="run_nap", suspend=True)
    assert r.status == "waiting" and r.waiting["wakeAt"] == iso(T0 + HOUR)
    clock.advance(1)
    r = lw.run_workflow(wf, {"seconds": HOUR}, world=make_world.reopen(clock=clock),
                        run_id="run_nap", suspend=True)
    assert r.status == "completed"
    assert r.output["woke"] == datetime.fromtimestamp(T0 + HOUR, timezone.utc).isoformat()
    assert calls.names == ["before", "after"]
    types = [e.type for e in world.list_events("run_nap")]
    assert types.count("timer.scheduled") == 1 and types.count("timer.fired") == 1
    replayed = lw.replay_run(world, "run_nap", wf)
    assert replayed.status == "completed" and replayed.output == r.output
    assert calls.names == ["before", "after"]


def test_blocking_sleep_wakes_when_the_clock_reaches_the_wake_time(make_world):
    clock = FakeClock(start=T0)
    world = make_world(clock=clock)
    calls = Calls()
    wf = make_sleeper(calls)
    fut = in_thread(lw.run_workflow, wf, {"seconds": 60}, world=world, run_id="run_block")
    wait_until(lambda: calls.names == ["before"] and status(world, "run_block") == "waiting")
    clock.advance(59)
    time.sleep(0.1)
    assert not fut.done()
    clock.advance(1)
    assert fut.result(timeout=10).status == "completed"
    assert calls.names == ["before", "after"]


def test_sleep_until_a_past_time_returns_at_once(make_world):
    clock = FakeClock(start=T0)
    world = make_world(clock=clock)

    @lw.workflow(id="until")
    async def until(ctx, input):
        await ctx.sleep_until("past", datetime.fromtimestamp(T0 - 10, timezone.utc))
        await ctx.sleep_until("epoch", T0 + 5)
        return "done"

    r = lw.run_workflow(until, None, world=world, run_id="run_until", suspend=True)
    assert r.status == "waiting" and r.waiting["wakeAt"] == iso(T0 + 5)
    clock.advance(5)
    assert lw.run_workflow(until, None, world=world, run_id="run_until").output == "done"


# ---- messages -----------------------------------------------------------------------------

def make_approver(calls: Calls, timeout=None):
    @lw.workflow(id="approver")
    async def approver(ctx, input):
        await ctx.step("draft", calls.fn("draft"))
        first = await ctx.wait_for_event("first", "approval", timeout=timeout)
        second = await ctx.wait_for_event("second", "approval", timeout=timeout)
        return {"first": first, "second": second, "id": str(ctx.uuid())}
    return approver


def test_event_sent_before_the_wait_is_kept_for_it(make_world):
    clock = FakeClock(start=T0)
    world = make_world(clock=clock)
    calls = Calls()
    wf = make_approver(calls)
    run_id = lw.start_workflow(wf, {}, world=world, run_id="run_early")
    assert status(world, run_id) == "created"
    lw.send_event(world, run_id, "approval", {"ok": 1}, idempotency_key="mail-1")
    lw.send_event(world, run_id, "approval", {"ok": 1}, idempotency_key="mail-1")  # no-op
    lw.send_event(world, run_id, "other", {"ok": 0})
    r = lw.run_workflow(wf, {}, world=world, run_id=run_id, suspend=True)
    assert r.status == "waiting"
    assert r.waiting == {"kind": "event", "stepPath": "second", "name": "approval", "deadline": None}
    lw.send_event(world, run_id, "approval", {"ok": 2})
    r = lw.run_workflow(wf, {}, world=make_world.reopen(clock=clock), run_id=run_id, suspend=True)
    assert r.status == "completed"
    assert r.output["first"] == {"ok": 1} and r.output["second"] == {"ok": 2}
    assert uuid.UUID(r.output["id"])
    assert [e.type for e in world.list_events(run_id)].count("signal.received") == 3
    assert lw.replay_run(world, run_id, wf).output == r.output
    assert calls.names == ["draft"]


def test_blocked_waiter_is_woken_by_send_event(make_world):
    world = make_world(clock=FakeClock(start=T0))
    calls = Calls()
    wf = make_approver(calls)
    fut = in_thread(lw.run_workflow, wf, {}, world=world, run_id="run_wake")
    wait_until(lambda: status(world, "run_wake") == "waiting")
    lw.send_event(world, "run_wake", "approval", "a")
    wait_until(lambda: (lw.materialize_run_state(world, "run_wake").waiting or {}).get("stepPath")
               == "second")
    t = time.monotonic()
    lw.send_event(world, "run_wake", "approval", "b")
    r = fut.result(timeout=10)
    woke_after = time.monotonic() - t
    assert r.output["first"] == "a" and r.output["second"] == "b"
    assert woke_after < 2.0


def test_wait_timeout_and_log_order_decide(make_world):
    clock = FakeClock(start=T0)
    world = make_world(clock=clock)
    calls = Calls()
    wf = make_approver(calls, timeout=100)
    r = lw.run_workflow(wf, {}, world=world, run_id="run_to", suspend=True)
    assert r.waiting == {"kind": "event", "stepPath": "first", "name": "approval",
                         "deadline": iso(T0 + 100)}
    # The deadline passes, but the event lands in the log before the run records its
    # timeout: log order says it arrived first, so the wait takes it.
    clock.advance(150)
    lw.send_event(world, "run_to", "approval", "late-but-first")
    r = lw.run_workflow(wf, {}, world=world, run_id="run_to", suspend=True)
    assert r.status == "waiting" and r.waiting["stepPath"] == "second"
    assert r.waiting["deadline"] == iso(T0 + 250)
    # Now the timeout is recorded first: the event sent afterwards is not taken.
    clock.advance(100)
    r = lw.run_workflow(wf, {}, world=world, run_id="run_to", suspend=True)
    assert r.status == "completed"
    assert r.output["first"] == "late-but-first" and r.output["second"] is None
    types = [e.type for e in world.list_events("run_to")]
    assert types.count("wait.timed_out") == 1
    assert lw.replay_run(world, "run_to", wf).output == r.output


def test_blocking_wait_times_out_on_the_clock(make_world):
    clock = FakeClock(start=T0)
    world = make_world(clock=clock)
    wf = make_approver(Calls(), timeout=30)
    fut = in_thread(lw.run_workflow, wf, {}, world=world, run_id="run_bto")
    wait_until(lambda: status(world, "run_bto") == "waiting")
    clock.advance(30)
    wait_until(lambda: (lw.materialize_run_state(world, "run_bto").waiting or {}).get("stepPath")
               == "second")
    clock.advance(30)
    assert fut.result(timeout=10).output["first"] is None


def test_send_event_errors(make_world):
    world = make_world(clock=FakeClock(start=T0))

    @lw.workflow(id="quick")
    async def quick(ctx, input):
        return 1

    with pytest.raises(lw.RunNotFoundError):
        lw.send_event(world, "run_nobody", "x", {})
    with pytest.raises(lw.WorldPathError):
        lw.send_event(world, "not a run id", "x", {})
    lw.run_workflow(quick, None, world=world, run_id="run_done")
    with pytest.raises(lw.RunFinishedError):
        lw.send_event(world, "run_done", "x", {})
    assert [e.type for e in world.list_events("run_done")][-1] == "run.completed"


# ---- cancellation -------------------------------------------------------------------------

def test_cancel_a_waiting_and_an_unstarted_run(make_world):
    clock = FakeClock(start=T0)
    world = make_world(clock=clock)
    calls = Calls()
    wf = make_sleeper(calls)
    lw.run_workflow(wf, {"seconds": 60}, world=world, run_id="run_cw", suspend=True)
    lw.cancel_run(world, "run_cw", reason="changed my mind")
    assert status(world, "run_cw") == "cancelled"
    types = [e.type for e in world.list_events("run_cw")]
    assert types[-2:] == ["run.cancel_requested", "run.cancelled"]
    clock.advance(60)
    with pytest.raises(lw.RunCancelledError):
        lw.run_workflow(wf, {"seconds": 60}, world=world, run_id="run_cw")
    assert calls.names == ["before"]
    assert lw.replay_run(world, "run_cw", wf).status == "cancelled"
    started = lw.start_workflow(wf, {"seconds": 1}, world=world)
    lw.cancel_run(world, started)
    assert status(world, started) == "cancelled"
    with pytest.raises(lw.RunNotFoundError):
        lw.cancel_run(world, "run_never")


def test_cancel_a_running_run_cancels_its_async_step(make_world):
    world = make_world(clock=FakeClock(start=T0))
    in_step = threading.Event()
    finished = []

    async def slow():
        in_step.set()
        await asyncio.sleep(30)
        finished.append(1)

    @lw.workflow(id="slow")
    async def slow_wf(ctx, input):
        await ctx.step("slow", slow)
        await ctx.step("next", lambda: finished.append(2))

    fut = in_thread(lw.run_workflow, slow_wf, None, world=world, run_id="run_cr")
    assert in_step.wait(10)
    lw.cancel_run(world, "run_cr")
    with pytest.raises(lw.RunCancelledError):
        fut.result(timeout=10)
    assert finished == []
    assert status(world, "run_cr") == "cancelled"
    assert lw.replay_run(world, "run_cr", slow_wf).status == "cancelled"


def test_cancel_a_blocked_sleeper_and_its_sub_run(make_world):
    clock = FakeClock(start=T0)
    world = make_world(clock=clock)

    @lw.workflow(id="child")
    async def child(ctx, input):
        await ctx.sleep("child-nap", HOUR)
        return "child done"

    async def parent(ctx, input):
        await ctx.call_workflow("child", {})
        return "parent done"

    fut = in_thread(lw.run_pipeline, [child], {}, orchestrator=parent, world=world,
                    run_id="run_parent")

    def sub_run_id():
        return next((r for r in world.list_runs() if r != "run_parent"), None)

    wait_until(lambda: sub_run_id() is not None and status(world, sub_run_id()) == "waiting")
    lw.cancel_run(world, "run_parent")
    with pytest.raises(lw.RunCancelledError):
        fut.result(timeout=10)
    assert status(world, "run_parent") == "cancelled"
    assert status(world, sub_run_id()) == "cancelled"


# ---- fork ---------------------------------------------------------------------------------

def test_fork_from_the_first_failed_step_with_fixed_code(make_world):
    world = make_world(clock=FakeClock(start=T0))
    calls = Calls()

    def broken():
        calls.names.append("broken")
        raise ValueError("bug")

    @lw.workflow(id="fixme", version="1")
    async def v1(ctx, input):
        a = await ctx.step("a", calls.fn("a", "A"))
        ctx.plans.keep("route", {"via": a})
        b = await ctx.step("b", broken)
        return [a, b]

    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(v1, {"n": 1}, world=world, run_id="run_src")
    before = [e.to_json_dict() for e in world.list_events("run_src")]
    fork_id = lw.fork_run(world, "run_src", new_run_id="run_fixed")
    assert fork_id == "run_fixed"
    assert status(world, fork_id) == "created"
    state = lw.materialize_run_state(world, fork_id)
    assert state.forked_from == {"runId": "run_src", "stepPath": "b"}
    assert world.list_events(fork_id)[0].payload["forkedFrom"] == {"runId": "run_src",
                                                                    "stepPath": "b"}
    # The kept plan comes with its record: the fork offers it to later runs too.
    kept = [e.payload for e in world.list_events(fork_id) if e.type == "plan.kept"]
    plan_file = f"runs/{{}}/planner-reuse/{kept[0]['workflowVersionId']}/route.json"
    assert world.read_file(plan_file.format(fork_id)) == world.read_file(plan_file.format("run_src"))
    assert json.loads(world.read_file(plan_file.format(fork_id))) == {"via": "A"}

    @lw.workflow(id="fixme", version="2")
    async def v2(ctx, input):
        a = await ctx.step("a", calls.fn("a", "A"))
        ctx.plans.keep("route", {"via": a})  # the fork's history holds it: asked for again
        b = await ctx.step("b", calls.fn("b", "B"))
        return [a, b]

    r = lw.run_workflow(v2, {"n": 1}, world=world, run_id=fork_id)
    assert r.output == ["A", "B"]
    assert calls.names == ["a", "broken", "b"]
    assert [e.to_json_dict() for e in world.list_events("run_src")] == before
    assert lw.replay_run(world, fork_id, v2).output == ["A", "B"]
    with pytest.raises(lw.StepError):
        lw.fork_run(world, fork_id)  # no failed step in it


def test_fork_from_a_named_step_copies_sleeps_waits_values_and_artifacts(make_world):
    clock = FakeClock(start=T0)
    world = make_world(clock=clock)
    calls = Calls()
    big = "x" * 70_000  # above the inline limit: an artifact

    @lw.workflow(id="long")
    async def long(ctx, input):
        text = await ctx.step("fetch", calls.fn("fetch", big))
        await ctx.sleep("nap", 60)
        decision = await ctx.wait_for_event("decision", "go")
        stamp = str(ctx.uuid())
        summary = await ctx.step("summarize", calls.fn("summarize", "S"))
        return {"n": len(text), "decision": decision, "stamp": stamp, "summary": summary}

    lw.send_event(world, lw.start_workflow(long, {}, world=world, run_id="run_long"), "go", 7)
    r = lw.run_workflow(long, {}, world=world, run_id="run_long", suspend=True)
    clock.advance(60)
    r = lw.run_workflow(long, {}, world=world, run_id="run_long")
    assert r.output["decision"] == 7
    fork_id = lw.fork_run(world, "run_long", from_step="summarize")
    assert fork_id != "run_long"
    fr = lw.run_workflow(long, {}, world=world, run_id=fork_id)
    assert fr.output == {**r.output, "summary": "S"}
    assert calls.names == ["fetch", "summarize", "summarize"]
    fork_refs = [e.payload["outputRef"] for e in world.list_events(fork_id)
                 if e.type == "step.succeeded" and "outputRef" in e.payload]
    fork_artifacts = {m.artifact_ref for m in world.list_artifacts(fork_id)}
    assert fork_refs and set(fork_refs) <= fork_artifacts
    assert lw.replay_run(world, fork_id, long).output == fr.output
    with pytest.raises(lw.StepError):
        lw.fork_run(world, "run_long", from_step="no-such-step")
    with pytest.raises(lw.RunNotFoundError):
        lw.fork_run(world, "run_missing")


# ---- workers ------------------------------------------------------------------------------

def test_worker_starts_continues_and_leaves_unknown_workflows_alone(make_world):
    clock = FakeClock(start=T0)
    world = make_world(clock=clock)
    calls = Calls()
    sleeper = make_sleeper(calls)
    approver = make_approver(calls)

    @lw.workflow(id="stranger")
    async def stranger(ctx, input):
        return 1

    a = lw.start_workflow(sleeper, {"seconds": 60}, world=world)
    b = lw.start_workflow(approver, {}, world=world)
    c = lw.start_workflow(stranger, {}, world=world)
    worker = lw.Worker(world, workflows=[sleeper, approver], concurrency=4)
    worker.run_until_idle()
    assert status(world, a) == "waiting" and status(world, b) == "waiting"
    assert status(world, c) == "created"
    clock.advance(59)
    worker.run_until_idle()
    assert status(world, a) == "waiting"
    clock.advance(1)
    lw.send_event(world, b, "approval", 1)
    lw.send_event(world, b, "approval", 2)
    worker.run_until_idle()
    assert status(world, a) == "completed" and status(world, b) == "completed"
    assert lw.materialize_run_state(world, b).output["second"] == 2
    assert status(world, c) == "created"
    assert sorted(calls.names) == ["after", "before", "draft"]
    worker.close()


def test_worker_run_wakes_on_send_and_stops(make_world):
    world = make_world(clock=FakeClock(start=T0))
    calls = Calls()
    approver = make_approver(calls)
    worker = lw.Worker(world, workflows=[approver])
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        run_id = lw.start_workflow(approver, {}, world=world)
        wait_until(lambda: status(world, run_id) == "waiting")
        lw.send_event(world, run_id, "approval", "x")
        lw.send_event(world, run_id, "approval", "y")
        wait_until(lambda: status(world, run_id) == "completed")
    finally:
        worker.stop()
        thread.join(10)
    assert not thread.is_alive()


def test_two_workers_race_over_twenty_runs_each_step_once(make_world):
    world = make_world(clock=FakeClock(start=T0))
    calls = Calls()

    @lw.workflow(id="three")
    async def three(ctx, input):
        out = []
        for i in range(3):
            out.append(await ctx.step(f"s{i}", calls.fn(f"{input['n']}/{i}")))
        return out

    ids = [lw.start_workflow(three, {"n": n}, world=world) for n in range(20)]
    # Two workers on one World (separate filesystem objects of a virtual_world do not
    # share locks, DESIGN §6); local_world: a second World object over the same dir.
    second = make_world(clock=world.clock) if make_world.kind == "local_world" else world
    workers = [lw.Worker(w, workflows=[three], concurrency=4) for w in (world, second)]
    threads = [threading.Thread(target=w.run_until_idle) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(status(world, r) == "completed" for r in ids)
    assert sorted(calls.names) == sorted(f"{n}/{i}" for n in range(20) for i in range(3))
    for w in workers:
        w.close()
