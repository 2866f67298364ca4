"""Deadlines (DESIGN §17): `deadline=` on run_workflow / start_workflow (or a workflow's
`timeout=`) is committed in `run.created`; once the World's clock reaches it the run is
cancelled with its sub-runs (`run.cancelled {reason: "deadline"}`) by whoever touches it
next — its executor at a step boundary, a sleep or wait that wakes at the deadline, a
caller resuming it, a worker's sweep. A FakeClock moves time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest
from checkout import SRC

import little_workflow as lw
from little_workflow.runtime import waiting
from little_workflow.testing import FakeClock

T0 = 1_800_000_000.0
HOUR = 3600.0
HERE = os.path.dirname(os.path.abspath(__file__))
#: The deadline rules hold on every World; these cover each kind of storage (memory,
#: SQLite, local files, an object store) without paying for all eight in every test.
SOME_WORLDS = ["memory", "local_world", "local-file", "s3"]
some_worlds = pytest.mark.parametrize("make_world", SOME_WORLDS, indirect=True)


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="microseconds").replace(
        "+00:00", "Z")


def in_thread(fn, *args, **kwargs):
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(1)
    fut = pool.submit(fn, *args, **kwargs)
    pool.shutdown(wait=False)
    return fut


def wait_until(cond, timeout=20.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)


def status(world, run_id) -> str:
    return lw.materialize_run_state(world, run_id).status


def types(world, run_id) -> list[str]:
    return [e.type for e in world.list_events(run_id)]


def cancelled_for_deadline(world, run_id) -> bool:
    events = world.list_events(run_id)
    return bool(events) and events[-1].type == "run.cancelled" \
        and events[-1].payload.get("reason") == "deadline"


@lw.workflow(id="dl-quick")
async def quick(ctx: lw.RunContext, input: None) -> int:
    return await ctx.step("one", lambda: 1)


@lw.workflow(id="dl-napper")
async def napper(ctx: lw.RunContext, input: None) -> str:
    await ctx.sleep("nap", HOUR)
    return await ctx.step("after", lambda: "woke")


@lw.workflow(id="dl-waiter")
async def waiter(ctx: lw.RunContext, input: None) -> object:
    return await ctx.wait_for_event("answer", "answer")


# ---- committed in run.created -----------------------------------------------------------

@some_worlds
def test_the_deadline_is_committed_in_run_created(make_world):
    clock = FakeClock(start=T0)
    world = make_world(clock=clock)
    lw.run_workflow(quick, None, world=world, run_id="run_dl_td", deadline=timedelta(minutes=30))
    created = world.list_events("run_dl_td")[0]
    assert created.type == "run.created" and created.payload["deadline"] == iso(T0 + 1800)
    clock.advance(10)
    lw.start_workflow(quick, None, world=world, run_id="run_dl_secs", deadline=90)
    assert world.list_events("run_dl_secs")[0].payload["deadline"] == iso(T0 + 10 + 90)
    lw.run_workflow(quick, None, world=world, run_id="run_dl_none")
    assert "deadline" not in world.list_events("run_dl_none")[0].payload


def test_a_workflows_timeout_is_the_default_deadline(memory_world):
    clock = FakeClock(start=T0)
    world = lw.virtual_world(memory_world.files, "/timeouts", clock=clock)

    @lw.workflow(id="dl-timed", timeout=timedelta(minutes=5))
    async def timed(ctx: lw.RunContext, input: None) -> int:
        return await ctx.step("one", lambda: 1)

    @lw.workflow(id="dl-timed-secs", timeout=30)
    async def timed_secs(ctx: lw.RunContext, input: None) -> int:
        return 2

    assert timed.timeout == 300.0 and timed_secs.timeout == 30.0
    lw.run_workflow(timed, None, world=world, run_id="run_dl_default")
    assert world.list_events("run_dl_default")[0].payload["deadline"] == iso(T0 + 300)
    lw.run_workflow(timed, None, world=world, run_id="run_dl_given", deadline=10)
    assert world.list_events("run_dl_given")[0].payload["deadline"] == iso(T0 + 10)
    lw.start_workflow(timed_secs, None, world=world, run_id="run_dl_started")
    assert world.list_events("run_dl_started")[0].payload["deadline"] == iso(T0 + 30)


def test_bad_deadlines_are_refused_before_anything_is_written(memory_world):
    world = memory_world
    with pytest.raises(ValueError, match="deadline of run run_dl_bad"):
        lw.run_workflow(quick, None, world=world, run_id="run_dl_bad", deadline=-1)
    with pytest.raises(TypeError, match="deadline of run run_dl_bad"):
        lw.run_workflow(quick, None, world=world, run_id="run_dl_bad", deadline="soon")
    with pytest.raises(TypeError, match="deadline"):
        lw.start_workflow(quick, None, world=world, run_id="run_dl_bad", deadline=True)
    with pytest.raises(ValueError, match="deadline"):
        lw.start_workflow(quick, None, world=world, run_id="run_dl_bad", deadline=float("nan"))
    assert world.list_events("run_dl_bad") == []
    with pytest.raises(ValueError, match="timeout.*dl-neg"):
        @lw.workflow(id="dl-neg", timeout=-5)
        async def negative(ctx: lw.RunContext, input: None) -> None:
            return None
    with pytest.raises(ValueError, match="deadline"):
        lw.run_workflow(quick, None, world=world, max_outer_cycles=2, deadline=10,
                        supervise=lambda cycle, history: lw.Done(cycle["output"]))


# ---- the executor enforces it ------------------------------------------------------------

@some_worlds
def test_a_deadline_stops_a_running_run_at_its_next_step_boundary(make_world):
    clock = FakeClock(start=T0)
    world = make_world(clock=clock)
    calls: list[str] = []

    def work(name: str, seconds: float) -> str:
        calls.append(name)
        clock.advance(seconds)  # the step takes this long on the World's clock
        return name

    @lw.workflow(id="dl-steps")
    async def steps(ctx: lw.RunContext, input: None) -> str:
        await ctx.step("first", lambda: work("first", 59))
        await ctx.step("second", lambda: work("second", 1))  # ends exactly at the deadline
        return await ctx.step("third", lambda: work("third", 0))

    with pytest.raises(lw.RunCancelledError) as err:
        lw.run_workflow(steps, None, world=world, run_id="run_dl_running", deadline=60)
    assert err.value.reason == "deadline"
    assert calls == ["first", "second"]  # now >= deadline: the third step never starts
    assert "third" not in lw.materialize_run_state(world, "run_dl_running").steps
    assert types(world, "run_dl_running")[-2:] == ["run.cancel_requested", "run.cancelled"]
    assert cancelled_for_deadline(world, "run_dl_running")
    assert lw.replay_run(world, "run_dl_running", steps).status == "cancelled"
    with pytest.raises(lw.RunCancelledError):  # never runs again
        lw.run_workflow(steps, None, world=world, run_id="run_dl_running")
    assert calls == ["first", "second"]


@some_worlds
def test_a_blocked_sleep_wakes_at_the_deadline_and_the_run_is_cancelled(make_world, monkeypatch):
    # No poll may do it instead: only the sleep waking at the deadline can end this run.
    monkeypatch.setattr(waiting, "POLL_SECONDS", 3600.0)
    clock = FakeClock(start=T0, stall_seconds=None)
    world = make_world(clock=clock)
    fut = in_thread(lw.run_workflow, napper, None, world=world, run_id="run_dl_nap", deadline=60)
    wait_until(lambda: status(world, "run_dl_nap") == "waiting")
    clock.advance(59)
    time.sleep(0.2)
    assert not fut.done()
    clock.advance(1)
    with pytest.raises(lw.RunCancelledError) as err:
        fut.result(timeout=20)
    assert err.value.reason == "deadline"
    assert cancelled_for_deadline(world, "run_dl_nap")
    assert "timer.fired" not in types(world, "run_dl_nap")


@some_worlds
def test_a_deadline_cancels_a_waiting_run_and_its_sub_run(make_world, monkeypatch):
    monkeypatch.setattr(waiting, "POLL_SECONDS", 3600.0)
    monkeypatch.setattr(waiting, "WAIT_POLL_SECONDS", 3600.0)
    clock = FakeClock(start=T0, stall_seconds=None)
    world = make_world(clock=clock)

    async def orchestrator(ctx: lw.RunContext, input: None) -> object:
        return await ctx.call_workflow("dl-waiter", None)

    fut = in_thread(lw.run_pipeline, [waiter], None, orchestrator=orchestrator, world=world,
                    run_id="run_dl_parent", deadline=120)

    def sub_run():
        return next((r for r in world.list_runs() if r != "run_dl_parent"), None)

    wait_until(lambda: sub_run() is not None and status(world, sub_run()) == "waiting")
    child = sub_run()
    # The sub-run's deadline is its parent's (it has none of its own).
    assert world.list_events(child)[0].payload["deadline"] == iso(T0 + 120)
    clock.advance(119)
    time.sleep(0.2)
    assert not fut.done()
    clock.advance(1)
    with pytest.raises(lw.RunCancelledError):
        fut.result(timeout=20)
    assert status(world, "run_dl_parent") == "cancelled" and status(world, child) == "cancelled"
    assert cancelled_for_deadline(world, "run_dl_parent")
    assert cancelled_for_deadline(world, child)


@lw.workflow(id="dl-child")
async def dl_child(ctx: lw.RunContext, input: None) -> object:
    return await ctx.wait_for_event("answer", "answer")


async def dl_orchestrator(ctx: lw.RunContext, input: None) -> object:
    return await ctx.call_workflow("dl-child", None)


def test_a_worker_cancels_a_killed_processes_waiting_run_and_its_sub_run(tmp_path):
    """A process runs a pipeline whose sub-run waits for an event, and is SIGKILLed while
    it waits; later, past the deadline, a worker's sweep cancels the run and its sub-run
    (whose process is gone) with reason "deadline"."""
    data = str(tmp_path / "lw")
    child = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys; sys.path.insert(0, %r)\n"
            "import little_workflow as lw\n"
            "from little_workflow.testing import FakeClock\n"
            "from test_deadlines import T0, dl_child, dl_orchestrator\n"
            "world = lw.local_world(%r, clock=FakeClock(start=T0, stall_seconds=None))\n"
            "lw.run_pipeline([dl_child], None, orchestrator=dl_orchestrator, world=world,\n"
            "                run_id='run_dl_killed', deadline=60)\n") % (HERE, data)],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (os.environ.get("PYTHONPATH"), SRC) if p)})
    try:
        world = lw.local_world(data, clock=FakeClock(start=T0 + 30))

        def sub_run():
            return next((r for r in world.list_runs() if r != "run_dl_killed"), None)

        wait_until(lambda: sub_run() is not None and status(world, sub_run()) == "waiting",
                   timeout=60)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    sub = sub_run()
    worker = lw.Worker(world, workflows=[dl_child])
    worker.run_until_idle()  # before the deadline: the sub-run is not due, nothing changes
    assert status(world, "run_dl_killed") == "running" and status(world, sub) == "waiting"
    world.clock.advance(30)
    worker.run_until_idle()
    worker.close()
    assert cancelled_for_deadline(world, "run_dl_killed")
    assert cancelled_for_deadline(world, sub)


# ---- whoever touches it next ---------------------------------------------------------------

@some_worlds
def test_a_caller_resuming_a_run_past_its_deadline_cancels_it(make_world):
    clock = FakeClock(start=T0)
    world = make_world(clock=clock)
    lw.start_workflow(quick, None, world=world, run_id="run_dl_late", deadline=60)
    clock.advance(60)
    with pytest.raises(lw.RunCancelledError) as err:
        lw.run_workflow(quick, None, world=world, run_id="run_dl_late")
    assert err.value.reason == "deadline"
    assert types(world, "run_dl_late") == ["run.created", "run.cancel_requested", "run.cancelled"]
    assert cancelled_for_deadline(world, "run_dl_late")


@some_worlds
def test_a_worker_sweep_cancels_waiting_and_unstarted_runs_past_their_deadline(make_world):
    clock = FakeClock(start=T0)
    world = make_world(clock=clock)
    r = lw.run_workflow(waiter, None, world=world, run_id="run_dl_swept", suspend=True,
                        deadline=HOUR)
    assert r.status == "waiting"
    lw.start_workflow(quick, None, world=world, run_id="run_dl_unstarted", deadline=HOUR)
    clock.advance(HOUR)
    # A worker that knows neither workflow: cancelling runs no workflow code.
    worker = lw.Worker(world, workflows=[napper])
    worker.run_until_idle()
    worker.close()
    assert cancelled_for_deadline(world, "run_dl_swept")
    assert cancelled_for_deadline(world, "run_dl_unstarted")


@some_worlds
def test_a_resumed_run_keeps_its_stored_deadline(make_world):
    clock = FakeClock(start=T0)
    world = make_world(clock=clock)
    r = lw.run_workflow(waiter, None, world=world, run_id="run_dl_kept", suspend=True, deadline=100)
    assert r.status == "waiting"
    clock.advance(50)
    # A shorter deadline on resume changes nothing: the stored one (T0 + 100) holds.
    r = lw.run_workflow(waiter, None, world=make_world.reopen(clock=clock), run_id="run_dl_kept",
                        suspend=True, deadline=1)
    assert r.status == "waiting"
    clock.advance(50)
    # A longer one does not save it either.
    with pytest.raises(lw.RunCancelledError):
        lw.run_workflow(waiter, None, world=make_world.reopen(clock=clock), run_id="run_dl_kept",
                        suspend=True, deadline=10 * HOUR)
    assert cancelled_for_deadline(world, "run_dl_kept")
    created = [e for e in world.list_events("run_dl_kept") if e.type == "run.created"]
    assert len(created) == 1 and created[0].payload["deadline"] == iso(T0 + 100)


def test_a_run_that_ends_before_its_deadline_is_not_touched(memory_world):
    clock = FakeClock(start=T0)
    world = lw.virtual_world(memory_world.files, "/ends", clock=clock)
    assert lw.run_workflow(quick, None, world=world, run_id="run_dl_done", deadline=10).output == 1
    clock.advance(HOUR)
    assert lw.run_workflow(quick, None, world=world, run_id="run_dl_done").output == 1
    worker = lw.Worker(world, workflows=[quick])
    worker.run_until_idle()
    worker.close()
    assert types(world, "run_dl_done")[-1] == "run.completed"


def test_a_fork_gets_the_same_time_again_from_its_own_creation(memory_world):
    clock = FakeClock(start=T0)
    world = lw.virtual_world(memory_world.files, "/forks", clock=clock)
    lw.run_workflow(quick, None, world=world, run_id="run_dl_source", deadline=600)
    clock.advance(HOUR)
    fork = lw.fork_run(world, "run_dl_source", from_step="one", new_run_id="run_dl_fork")
    assert world.list_events(fork)[0].payload["deadline"] == iso(T0 + HOUR + 600)
    assert lw.run_workflow(quick, None, world=world, run_id=fork).output == 1


def test_a_cancel_requested_by_a_user_keeps_its_reason_past_the_deadline(memory_world):
    clock = FakeClock(start=T0)
    world = lw.virtual_world(memory_world.files, "/user-cancel", clock=clock)
    lw.run_workflow(waiter, None, world=world, run_id="run_dl_user", suspend=True, deadline=60)
    lw.cancel_run(world, "run_dl_user", reason="not needed")
    clock.advance(HOUR)
    worker = lw.Worker(world, workflows=[waiter])
    worker.run_until_idle()
    worker.close()
    assert world.list_events("run_dl_user")[-1].payload["reason"] == "not needed"
    assert types(world, "run_dl_user").count("run.cancel_requested") == 1


def test_steps_running_in_a_thread_pool_see_the_deadline_at_their_next_boundary(memory_world):
    """A parallel group whose children run past the deadline: no child starts after it."""
    clock = FakeClock(start=T0)
    world = lw.virtual_world(memory_world.files, "/groups", clock=clock)
    started: list[int] = []
    lock = threading.Lock()

    def child(i: int) -> int:
        with lock:
            started.append(i)
            if i == 0:
                clock.advance(60)
        return i

    @lw.workflow(id="dl-group")
    async def group(ctx: lw.RunContext, input: None) -> list[int]:
        import functools

        return await ctx.parallel("kids", [functools.partial(child, i) for i in range(5)],
                                  max_concurrency=1)

    with pytest.raises(lw.RunCancelledError):
        lw.run_workflow(group, None, world=world, run_id="run_dl_group", deadline=60)
    assert started == [0]
    assert cancelled_for_deadline(world, "run_dl_group")
