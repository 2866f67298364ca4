"""Queues, deadlines, schedules and telemetry together (DESIGN §17, §18): `deadline=` on
`lw.enqueue`, a schedule ticking through its queue, and the queue-wait metric."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from checkout import SRC

import little_workflow as lw
from little_workflow.runtime.queue_layout import slot_name
from little_workflow.testing import FakeClock

T0 = 1_800_000_000.0


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="microseconds").replace(
        "+00:00", "Z")


def drain(world, workflows) -> lw.Worker:
    worker = lw.Worker(world, workflows=list(workflows))
    try:
        worker.run_until_idle()
    finally:
        worker.close()
    return worker


@lw.workflow(id="glue-quick")
async def quick(ctx: lw.RunContext, input: dict) -> dict:
    return await ctx.step("one", lambda: {"n": input.get("n")})


@lw.workflow(id="glue-timed", timeout=timedelta(minutes=5))
async def timed(ctx: lw.RunContext, input: dict) -> int:
    return 1


# ---- deadline= on enqueue ----------------------------------------------------------------

def test_enqueue_commits_its_deadline_or_the_workflows_timeout_in_run_created(memory_world):
    clock = FakeClock(start=T0)
    world = lw.virtual_world(memory_world.files, "/dl", clock=clock)
    lw.declare_queue(world, "q")
    given = lw.enqueue(world, quick, {"n": 1}, queue="q", deadline=timedelta(minutes=30))
    assert world.list_events(given.run_id)[0].payload["deadline"] == iso(T0 + 1800)
    clock.advance(10)
    secs = lw.enqueue(world, timed, {}, queue="q", deadline=90)
    assert world.list_events(secs.run_id)[0].payload["deadline"] == iso(T0 + 10 + 90)
    default = lw.enqueue(world, timed, {}, queue="q")
    assert world.list_events(default.run_id)[0].payload["deadline"] == iso(T0 + 10 + 300)
    none = lw.enqueue(world, quick, {"n": 2}, queue="q")
    assert "deadline" not in world.list_events(none.run_id)[0].payload


def test_a_bad_enqueue_deadline_is_refused_before_anything_is_written(memory_world):
    lw.declare_queue(memory_world, "q")
    with pytest.raises(ValueError, match="deadline"):
        lw.enqueue(memory_world, quick, {"n": 1}, queue="q", run_id="run_bad_dl", deadline=-1)
    with pytest.raises(TypeError, match="deadline"):
        lw.enqueue(memory_world, quick, {"n": 1}, queue="q", run_id="run_bad_dl", deadline="soon")
    assert memory_world.list_events("run_bad_dl") == []
    assert lw.list_queues(memory_world)[0].depth == 0


def test_a_queued_run_that_never_got_a_place_is_cancelled_at_its_deadline(memory_world):
    clock = FakeClock(start=T0)
    world = lw.virtual_world(memory_world.files, "/dl", clock=clock)
    lw.declare_queue(world, "q", concurrency=1)
    held = world.take_slot(slot_name("q", 0), "another worker")  # the only place, never freed
    try:
        handle = lw.enqueue(world, quick, {"n": 1}, queue="q", deadline=60)
        clock.advance(60)
        drain(world, [quick])  # returns: the run past its deadline is no longer work
        events = world.list_events(handle.run_id)
        assert events[-1].type == "run.cancelled" and events[-1].payload["reason"] == "deadline"
        assert "run.started" not in [e.type for e in events]
        with pytest.raises(lw.RunCancelledError):
            handle.result(timeout=10)
        assert lw.list_queues(world)[0].depth == 0
    finally:
        held.release()


# ---- a schedule through its queue --------------------------------------------------------

MINUTE = 60.0
T_TICK = T0 + MINUTE  # T0 is on a minute: the first minutely tick strictly after it


def sched_run_ids(world, name: str) -> list[str]:
    return sorted(r for r in world.list_runs() if r.startswith(f"run_sched_{name}_"))


def test_a_schedule_naming_an_undeclared_queue_is_refused_before_anything_is_written(memory_world):
    with pytest.raises(lw.QueueNotFoundError, match="'nowhere'"):
        lw.add_schedule(memory_world, "s", quick, cron="* * * * *", input={"n": 1}, queue="nowhere")
    assert lw.list_schedules(memory_world) == []


def test_a_tick_is_enqueued_on_the_schedules_queue_and_waits_for_a_place(memory_world):
    import threading

    clock = FakeClock(start=T0, stall_seconds=None)
    world = lw.virtual_world(memory_world.files, "/sq", clock=clock)
    lw.declare_queue(world, "nightly-q", concurrency=1)
    lw.add_schedule(world, "every", quick, cron="* * * * *", input={"n": 5}, queue="nightly-q")
    held = world.take_slot(slot_name("nightly-q", 0), "another worker")
    clock.set(T_TICK)
    worker = lw.Worker(world, workflows=[quick])
    done = threading.Event()
    t = threading.Thread(target=lambda: (worker.run_until_idle(), done.set()))
    t.start()
    try:
        assert not done.wait(0.6)  # the tick's run waits for the queue's only place
        [run_id] = sched_run_ids(world, "every")
        handle = lw.get_run(world, run_id)
        assert handle.status() == "created"
        created = world.list_events(run_id)[0].payload
        assert created["queue"]["name"] == "nightly-q"
        assert dict(created["schedule"]) == {"name": "every", "tick": iso(T_TICK)}
        assert lw.list_queues(world)[0].depth == 1
        held.release()
        assert done.wait(10)
        assert handle.result(timeout=10) == {"n": 5}
    finally:
        worker.stop()
        t.join()
        worker.close()
    started = [e for e in world.list_events(run_id) if e.type == "run.started"]
    assert len(started) == 1 and started[0].payload["admission"]["queue"] == "nightly-q"


def test_two_workers_ticking_the_same_tick_through_a_queue_make_one_run(memory_world):
    clock = FakeClock(start=T0, stall_seconds=None)
    world = lw.virtual_world(memory_world.files, "/sq2", clock=clock)
    lw.declare_queue(world, "q")
    lw.add_schedule(world, "twice", quick, cron="* * * * *", input={"n": 2}, queue="q")
    clock.set(T_TICK)
    from little_workflow.runtime.schedules import ScheduleTicker, ticks_path

    first = ScheduleTicker(world, {quick.id: quick}).tick(clock.now())
    # A second worker that read the tick document before the first one wrote it.
    world.remove_file(ticks_path("twice"))
    second = ScheduleTicker(world, {quick.id: quick}).tick(clock.now())
    assert first == second == [f"run_sched_twice_{datetime.fromtimestamp(T_TICK, timezone.utc):%Y%m%d%H%M}"]
    assert [e.type for e in world.list_events(first[0])].count("run.created") == 1
    assert lw.list_queues(world)[0].depth == 1
    drain(world, [quick])
    assert lw.get_run(world, first[0]).result(timeout=10) == {"n": 2}


def test_little_schedules_add_names_a_queue_declared_first(tmp_path):
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))

    def little(*args: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (os.environ.get("PYTHONPATH"), SRC, here) if p)}
        return subprocess.run([sys.executable, "-m", "little_workflow.cli", "--data-dir", data,
                               "schedules", "add", "schedule_worker:tick", "nightly",
                               "--cron", "0 3 * * *", "--input", '{"n": 1}', *args],
                              cwd=str(tmp_path), capture_output=True, text=True, env=env,
                              timeout=120)

    data = str(tmp_path / "lw")
    r = little("--queue", "nope")
    assert r.returncode == 1 and r.stderr.startswith("error: queue 'nope' is not declared")
    assert "Traceback" not in r.stderr
    world = lw.local_world(data)
    try:
        assert lw.list_schedules(world) == []
        lw.declare_queue(world, "nightly-q", concurrency=1)
        r = little("--queue", "nightly-q")
        assert r.returncode == 0, r.stderr
        assert [s.queue for s in lw.list_schedules(world)] == ["nightly-q"]
    finally:
        world.close()


def test_three_worker_processes_make_one_queued_run_per_tick(tmp_path):
    """Three worker PROCESSES sweep one World with a schedule on a queue of one place; the
    test moves the shared clock one minute at a time. Each tick is one run, created once on
    the queue, executed once."""
    import os
    import subprocess
    import sys
    import time

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    from schedule_worker import FileClock, tick

    ticks = 10
    data, clock_file, stop_file = (str(tmp_path / n) for n in ("lw", "clock", "stop"))

    def set_clock(t: float) -> None:
        with open(clock_file + ".tmp", "w") as f:
            f.write(repr(t))
        os.replace(clock_file + ".tmp", clock_file)

    def run_id_at(t: float) -> str:
        return f"run_sched_race_{datetime.fromtimestamp(t, timezone.utc):%Y%m%d%H%M}"

    set_clock(T0)
    world = lw.local_world(data, clock=FileClock(clock_file))
    lw.declare_queue(world, "race-q", concurrency=1)
    lw.add_schedule(world, "race", tick, cron="* * * * *", input={"n": 3}, catch_up="all",
                    queue="race-q")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (os.environ.get("PYTHONPATH"), SRC) if p)}
    procs = [subprocess.Popen([sys.executable, os.path.join(here, "schedule_worker.py"),
                               data, clock_file, stop_file], env=env) for _ in range(3)]
    try:
        for i in range(1, ticks + 1):
            set_clock(T0 + i * MINUTE)
            run_id = run_id_at(T0 + i * MINUTE)
            end = time.monotonic() + 60
            while not (world.list_events(run_id) and
                       lw.materialize_run_state(world, run_id).status == "completed"):
                assert time.monotonic() < end, f"tick {i} never ran"
                assert all(p.poll() is None for p in procs), "a worker died"
                time.sleep(0.01)
    finally:
        open(stop_file, "w").close()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    assert all(p.returncode == 0 for p in procs)
    runs = sched_run_ids(world, "race")
    assert runs == [run_id_at(T0 + i * MINUTE) for i in range(1, ticks + 1)]
    orders = []
    for run_id in runs:
        events = world.list_events(run_id)
        types = [e.type for e in events]
        assert types.count("run.created") == 1 and types.count("run.started") == 1, (run_id, types)
        assert types.count("step.succeeded") == 1 and types[-1] == "run.completed"
        assert events[0].payload["queue"]["name"] == "race-q"
        orders.append(events[0].payload["queue"]["order"])
    assert len(set(orders)) == ticks  # each run took its own place in the queue's order
    world.close()
