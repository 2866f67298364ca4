"""Schedules (DESIGN §17): a cron expression in a timezone, stored in the World; workers
given the workflow start each tick as exactly one run `run_sched_<name>_<UTC
yyyymmddHHMM>`, catching up on missed ticks as `catch_up` says. Time is a FakeClock (one
process) or a clock file every worker process reads."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from checkout import SRC

import little_workflow as lw
from little_workflow.testing import FakeClock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from schedule_worker import tick  # noqa: E402

SOAK = bool(os.environ.get("LW_SOAK"))
#: 2026-01-05 10:00:30 UTC (a Monday), thirty seconds past a minute.
T0 = datetime(2026, 1, 5, 10, 0, 30, tzinfo=timezone.utc).timestamp()
MINUTE = 60.0
SOME_WORLDS = ["memory", "local_world", "local-file", "s3", "azure"]
some_worlds = pytest.mark.parametrize("make_world", SOME_WORLDS, indirect=True)


def utc(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y%m%d%H%M")


def sched_runs(world, name: str) -> list[str]:
    return sorted(r for r in world.list_runs() if r.startswith(f"run_sched_{name}_"))


@pytest.fixture
def memory_world():
    """A memory World on a FakeClock (at T0)."""
    from conftest import private_memory

    return lw.virtual_world(private_memory(), "/wf", clock=FakeClock(start=T0, stall_seconds=None))


def drain(world) -> None:
    worker = lw.Worker(world, workflows=[tick])
    try:
        worker.run_until_idle()
    finally:
        worker.close()


# ---- stored in the World -----------------------------------------------------------------

def test_add_list_replace_remove(memory_world):
    world = memory_world
    world.clock.set(T0)
    added = lw.add_schedule(world, "every5", tick, cron="*/5 * * * *", input={"n": 1})
    assert isinstance(added, lw.Schedule)
    [s] = lw.list_schedules(world)
    assert (s.name, s.workflow_id, s.cron, s.timezone, s.input, s.queue, s.catch_up) == (
        "every5", "sched-tick", "*/5 * * * *", "UTC", {"n": 1}, None, "latest")
    # The first tick is the first cron time strictly after add_schedule.
    assert s.next_tick == datetime(2026, 1, 5, 10, 5, tzinfo=timezone.utc)
    lw.add_schedule(world, "every5", tick, cron="0 3 * * *", timezone="Europe/Paris",
                    input={"n": 2}, catch_up="all")
    [s] = lw.list_schedules(world)
    assert (s.cron, s.timezone, s.input, s.catch_up) == ("0 3 * * *", "Europe/Paris", {"n": 2}, "all")
    assert s.next_tick == datetime(2026, 1, 6, 3, 0, tzinfo=ZoneInfo("Europe/Paris"))
    assert lw.remove_schedule(world, "every5") is True
    assert lw.list_schedules(world) == []
    assert lw.remove_schedule(world, "every5") is False


@pytest.mark.parametrize("kwargs, words", [
    ({"name": "bad name!"}, "[A-Za-z0-9_-]"),
    ({"cron": "61 * * * *"}, "cron '61 * * * *'"),
    ({"cron": "every day"}, "cron 'every day'"),
    ({"timezone": "Mars/Olympus"}, "unknown timezone 'Mars/Olympus'"),
    ({"catch_up": "some"}, "catch_up is one of none, latest, all"),
])
def test_bad_schedules_are_refused_before_anything_is_written(memory_world, kwargs, words):
    args = {"name": "nightly", "cron": "0 3 * * *", "timezone": "UTC", "catch_up": "latest", **kwargs}
    name = args.pop("name")
    with pytest.raises(lw.ScheduleError) as err:
        lw.add_schedule(memory_world, name, tick, input={"n": 1}, **args)
    assert words in str(err.value)
    assert lw.list_schedules(memory_world) == []


def test_input_the_workflow_refuses_is_refused(memory_world):
    @lw.workflow(id="sched-typed", input_schema={"type": "object", "required": ["n"]})
    async def typed(ctx: lw.RunContext, input: dict) -> None:
        return None

    with pytest.raises(lw.SchemaValidationError):
        lw.add_schedule(memory_world, "typed", typed, cron="* * * * *", input={"m": 1})
    assert lw.list_schedules(memory_world) == []


# ---- ticks --------------------------------------------------------------------------------

@some_worlds
def test_a_worker_starts_one_run_per_tick(make_world):
    world = make_world(clock=FakeClock(start=T0, stall_seconds=None))
    lw.add_schedule(world, "minutely", tick, cron="* * * * *", input={"n": 7})
    drain(world)
    assert sched_runs(world, "minutely") == []  # the first tick is still ahead
    for i in range(1, 4):
        world.clock.set(T0 - 30 + i * MINUTE)  # exactly on the tick: due (now >= tick)
        drain(world)
        drain(world)  # a second worker pass finds the tick handled
    expected = [f"run_sched_minutely_{utc(T0 - 30 + i * MINUTE)}" for i in range(1, 4)]
    assert sched_runs(world, "minutely") == expected
    for run_id in expected:
        state = lw.materialize_run_state(world, run_id)
        assert state.status == "completed" and state.output == "tick 7"
        assert [e.type for e in world.list_events(run_id)].count("run.created") == 1
    [s] = lw.list_schedules(world)
    assert s.last_run_id == expected[-1]
    assert s.next_tick == datetime.fromtimestamp(T0 - 30 + 4 * MINUTE, timezone.utc)


def test_a_worker_only_ticks_schedules_of_workflows_it_has(memory_world):
    @lw.workflow(id="sched-other")
    async def other(ctx: lw.RunContext, input: None) -> None:
        return None

    world = memory_world
    world.clock.set(T0)
    lw.add_schedule(world, "others", other, cron="* * * * *")
    world.clock.advance(MINUTE)
    drain(world)
    assert sched_runs(world, "others") == []
    worker = lw.Worker(world, workflows=[other])
    worker.run_until_idle()
    worker.close()
    assert len(sched_runs(world, "others")) == 1


@pytest.mark.parametrize("catch_up, late, expected_ticks", [
    ("all", 15 * MINUTE + 10, [1, 2, 3]),
    ("latest", 15 * MINUTE + 10, [3]),
    ("none", 15 * MINUTE + 10, [3]),  # the last tick is 40 s late: started, the rest skipped
    ("none", 15 * MINUTE + 30, [3]),  # exactly 60 s late: still started
    ("none", 15 * MINUTE + 31, []),  # 61 s late: skipped
])
def test_catch_up_modes(memory_world, catch_up, late, expected_ticks):
    world = memory_world  # at T0, 10:00:30: tick i is at 10:00 + 5 i minutes

    def at(i: int) -> str:
        return f"run_sched_cu_{utc(T0 - 30 + i * 5 * MINUTE)}"

    lw.add_schedule(world, "cu", tick, cron="*/5 * * * *", input={"n": 0}, catch_up=catch_up)
    world.clock.advance(late)  # the worker was down all this time
    drain(world)
    assert sched_runs(world, "cu") == [at(i) for i in expected_ticks]
    # Missed ticks are decided once: the next pass starts nothing more.
    drain(world)
    assert sched_runs(world, "cu") == [at(i) for i in expected_ticks]
    world.clock.set(T0 - 30 + 4 * 5 * MINUTE)  # on time for the next one
    drain(world)
    assert sched_runs(world, "cu") == [at(i) for i in expected_ticks] + [at(4)]


def test_adding_a_name_again_starts_its_ticks_over(memory_world):
    world = memory_world
    world.clock.set(T0)
    lw.add_schedule(world, "again", tick, cron="* * * * *", input={"n": 1})
    world.clock.advance(MINUTE)
    drain(world)
    assert len(sched_runs(world, "again")) == 1
    world.clock.advance(10 * MINUTE)
    lw.add_schedule(world, "again", tick, cron="*/2 * * * *", input={"n": 2}, catch_up="all")
    drain(world)  # nothing missed: the new schedule begins now
    assert len(sched_runs(world, "again")) == 1
    world.clock.advance(2 * MINUTE)
    drain(world)
    runs = sched_runs(world, "again")
    assert len(runs) == 2 and lw.materialize_run_state(world, runs[-1]).output == "tick 2"


def test_a_removed_schedule_starts_nothing(memory_world):
    world = memory_world
    world.clock.set(T0)
    lw.add_schedule(world, "gone", tick, cron="* * * * *", input={"n": 1})
    lw.remove_schedule(world, "gone")
    world.clock.advance(5 * MINUTE)
    drain(world)
    assert sched_runs(world, "gone") == []


def test_a_worker_that_read_a_schedule_does_not_tick_it_after_its_removal(memory_world):
    """A worker decides from the schedules it read (re-read every REFRESH_SECONDS), but
    reads a due tick's schedule again before starting it."""
    world = memory_world
    lw.add_schedule(world, "stale", tick, cron="* * * * *", input={"n": 1})
    lw.add_schedule(world, "swapped", tick, cron="* * * * *", input={"n": 1})
    worker = lw.Worker(world, workflows=[tick])
    try:
        worker.sweep()  # reads both
        lw.remove_schedule(world, "stale")
        lw.add_schedule(world, "swapped", tick, cron="0 3 * * *", input={"n": 2})
        world.clock.advance(MINUTE)
        worker.sweep()
        worker.sweep()
    finally:
        worker.close()
    assert sched_runs(world, "stale") == [] and sched_runs(world, "swapped") == []


# ---- DST (Europe/Paris: 2026-03-29 02:00 -> 03:00, 2026-10-25 03:00 -> 02:00) --------------

def test_spring_forward_a_missing_time_fires_once_at_the_next_time(memory_world):
    world = memory_world
    paris = ZoneInfo("Europe/Paris")
    world.clock.set(datetime(2026, 3, 28, 12, 0, tzinfo=paris).timestamp())
    lw.add_schedule(world, "spring", tick, cron="30 2 * * *", timezone="Europe/Paris",
                    input={"n": 1}, catch_up="all")
    world.clock.set(datetime(2026, 3, 30, 12, 0, tzinfo=paris).timestamp())
    drain(world)
    # 02:30 does not exist on the 29th: cronsim fires at 03:00 CEST (01:00 UTC).
    assert sched_runs(world, "spring") == ["run_sched_spring_202603290100",
                                           "run_sched_spring_202603300030"]


def test_fall_back_a_daily_time_fires_once_and_every_30_min_fires_in_both_hours(memory_world):
    world = memory_world
    paris = ZoneInfo("Europe/Paris")
    world.clock.set(datetime(2026, 10, 24, 12, 0, tzinfo=paris).timestamp())
    lw.add_schedule(world, "daily", tick, cron="30 2 * * *", timezone="Europe/Paris",
                    input={"n": 1}, catch_up="all")
    lw.add_schedule(world, "half", tick, cron="*/30 2 * * *", timezone="Europe/Paris",
                    input={"n": 1}, catch_up="all")
    world.clock.set(datetime(2026, 10, 25, 12, 0, tzinfo=paris).timestamp())
    drain(world)
    # 02:30 CEST (00:30 UTC) only, not 02:30 CET again.
    assert sched_runs(world, "daily") == ["run_sched_daily_202610250030"]
    # 02:00 and 02:30 in both the CEST and the CET hour: four distinct UTC minutes.
    assert sched_runs(world, "half") == [
        "run_sched_half_202610250000", "run_sched_half_202610250030",
        "run_sched_half_202610250100", "run_sched_half_202610250130"]


# ---- three worker processes, one clock --------------------------------------------------------

def test_three_worker_processes_make_exactly_one_run_per_tick(tmp_path):
    """Three worker PROCESSES sweep one World; the test moves the shared clock (a file
    every process reads) one minute at a time. Each tick must become exactly one run,
    created once and executed once, whichever workers race for it."""
    ticks = 100 if SOAK else 15
    data, clock_file, stop_file = (str(tmp_path / n) for n in ("lw", "clock", "stop"))

    def set_clock(t: float) -> None:
        with open(clock_file + ".tmp", "w") as f:
            f.write(repr(t))
        os.replace(clock_file + ".tmp", clock_file)

    start = T0 - 30
    set_clock(start)
    from schedule_worker import FileClock

    world = lw.local_world(data, clock=FileClock(clock_file))
    lw.add_schedule(world, "race", tick, cron="* * * * *", input={"n": 3}, catch_up="all")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (os.environ.get("PYTHONPATH"), SRC) if p)}
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "schedule_worker.py"),
                               data, clock_file, stop_file], env=env) for _ in range(3)]
    try:
        for i in range(1, ticks + 1):
            set_clock(start + i * MINUTE)
            run_id = f"run_sched_race_{utc(start + i * MINUTE)}"
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
    runs = sched_runs(world, "race")
    assert runs == [f"run_sched_race_{utc(start + i * MINUTE)}" for i in range(1, ticks + 1)]
    for run_id in runs:
        types = [e.type for e in world.list_events(run_id)]
        assert types.count("run.created") == 1 and types.count("run.started") == 1, (run_id, types)
        assert types.count("step.succeeded") == 1 and types[-1] == "run.completed"


# ---- little schedules ------------------------------------------------------------------------

def little(*args: str, cwd: object) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (os.environ.get("PYTHONPATH"), SRC, HERE) if p)}
    return subprocess.run([sys.executable, "-m", "little_workflow.cli", *args], cwd=str(cwd),
                          capture_output=True, text=True, env=env, timeout=120)


def test_little_schedules_add_list_remove(tmp_path):
    data = str(tmp_path / "lw")
    r = little("--data-dir", data, "schedules", "add", "schedule_worker:tick", "nightly",
               "--cron", "0 3 * * *", "--timezone", "Europe/Paris", "--input", '{"n": 1}',
               cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    world = lw.local_world(data, clock=FakeClock(start=T0, stall_seconds=None))
    world.clock.set(lw.list_schedules(world)[0].next_tick.timestamp())
    drain(world)
    world.close()
    r = little("--data-dir", data, "schedules", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    header, row = r.stdout.splitlines()
    assert header.split() == ["name", "workflow", "cron", "timezone", "next", "tick", "last", "run"]
    assert row.split()[:2] == ["nightly", "sched-tick"] and "Europe/Paris" in row
    assert row.split()[-1].startswith("run_sched_nightly_")  # the last run
    r = little("--data-dir", data, "schedules", "add", "schedule_worker:tick", "bad",
               "--cron", "0 3 * *", cwd=tmp_path)
    assert r.returncode == 1 and r.stderr.startswith("error: schedule 'bad': cron '0 3 * *'")
    assert "Traceback" not in r.stderr
    r = little("--data-dir", data, "schedules", "remove", "nightly", cwd=tmp_path)
    assert r.returncode == 0 and "removed schedule nightly" in r.stdout
    r = little("--data-dir", data, "schedules", "remove", "nightly", cwd=tmp_path)
    assert r.returncode == 1 and "no schedule 'nightly'" in r.stderr
    r = little("--data-dir", data, "schedules", "list", "--json", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "[]"


# ---- what schedules cost a worker's sweep on S3 ---------------------------------------------

def sweep_requests(moto_s3, schedules: int) -> tuple[int, int]:
    from s3_server import RequestCounter

    bucket = moto_s3.new_bucket()
    clock = FakeClock(start=T0, stall_seconds=None)
    maker = lw.virtual_world(moto_s3.filesystem(), f"{bucket}/wf", clock=clock)
    lw.start_workflow(not_here, None, world=maker)  # one unfinished run it does not run
    for i in range(schedules):
        lw.add_schedule(maker, f"s{i}", tick, cron="0 3 * * *", input={"n": i})
    fs = moto_s3.filesystem()  # a worker on another host: its own client and caches
    counter = RequestCounter(fs)
    world = lw.virtual_world(fs, f"{bucket}/wf", clock=clock)
    worker = lw.Worker(world, workflows=[schedule_worker_other])
    try:
        counter.reset()
        worker.sweep()
        first = counter.total
        counter.reset()
        worker.sweep()
        return first, counter.total
    finally:
        worker.close()


@lw.workflow(id="sched-not-here")
async def not_here(ctx: lw.RunContext, input: None) -> None:
    return None


@lw.workflow(id="sched-tick")
async def schedule_worker_other(ctx: lw.RunContext, input: dict) -> str:
    """The same workflow id as `tick` (a worker on another host): its schedules are read."""
    return f"tick {input['n']}"


def test_schedules_cost_an_idle_sweep_nothing_after_the_first(moto_s3):
    base_first, base_second = sweep_requests(moto_s3, 0)
    first, second = sweep_requests(moto_s3, 5)
    print(f"\nS3 requests per idle sweep: no schedules {base_first} then {base_second}; "
          f"5 schedules {first} then {second}")
    # The first sweep lists schedules/ and reads each schedule and its ticks document (one
    # GET each, found or not: 10 requests for 5 schedules, measured)...
    assert first <= base_first + 1 + 2 * 5
    # ...later sweeps (until REFRESH_SECONDS pass) decide from what it read.
    assert second == base_second
