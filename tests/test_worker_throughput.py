"""A busy Worker hands due runs to its threads without sweeping the World once per run,
and still runs every step of every run exactly once (local_world, real threads)."""

from __future__ import annotations

import threading
import time

from checkout import SRC

import little_workflow as lw

CALLS: list[str] = []
CALLS_GUARD = threading.Lock()


def record(run_key: str, k: int) -> int:
    with CALLS_GUARD:
        CALLS.append(f"{run_key}/{k}")
    return k


@lw.workflow(id="worker-throughput-three")
async def three(ctx: lw.RunContext, input: dict) -> int:
    for k in range(3):
        await ctx.step(f"s{k}", record, input["key"], k)
    return input["n"]


class CountingWorker(lw.Worker):
    sweeps = 0

    def sweep(self, *, skip_locked: bool = False) -> int:
        self.sweeps += 1
        return super().sweep(skip_locked=skip_locked)


def expected(keys: list[str]) -> list[str]:
    return sorted(f"{key}/{k}" for key in keys for k in range(3))


def test_draining_many_runs_sweeps_a_few_times_not_once_per_run(tmp_path):
    CALLS.clear()
    world = lw.local_world(str(tmp_path / "lw"))
    keys = [f"r{i}" for i in range(80)]
    ids = [lw.start_workflow(three, {"key": key, "n": i}, world=world) for i, key in enumerate(keys)]
    worker = CountingWorker(world, workflows=[three], concurrency=4)
    worker.run_until_idle()
    worker.close()
    assert [lw.materialize_run_state(world, r).output for r in ids] == list(range(80))
    assert sorted(CALLS) == expected(keys)  # every step exactly once
    # One sweep hands all 80 runs over; a few more happen as the last threads idle.
    # (Sweeping after every finished run made this about one sweep per run.)
    assert worker.sweeps <= 4 * 2 + 2, worker.sweeps


def test_runs_started_while_a_worker_runs_all_complete_once(tmp_path):
    CALLS.clear()
    world = lw.local_world(str(tmp_path / "lw"))
    worker = CountingWorker(world, workflows=[three], concurrency=8)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        keys = [f"s{i}" for i in range(60)]
        ids = [lw.start_workflow(three, {"key": key, "n": i}, world=world)
               for i, key in enumerate(keys)]
        end = time.monotonic() + 60
        while any(lw.materialize_run_state(world, r).status != "completed" for r in ids):
            assert time.monotonic() < end, "the worker did not finish the runs"
            time.sleep(0.05)
    finally:
        worker.stop()
        thread.join(timeout=60)
    assert not thread.is_alive()
    assert sorted(CALLS) == expected(keys)


STARTS: dict[str, float] = {}


def stamp(key: str) -> None:
    STARTS[key] = time.time()


@lw.workflow(id="worker-wake-napper")
async def napper(ctx: lw.RunContext, input: dict) -> None:
    await ctx.sleep("nap", input["seconds"])
    await ctx.step("after", stamp, input["key"])


@lw.workflow(id="worker-wake-listener")
async def listener(ctx: lw.RunContext, input: dict) -> None:
    await ctx.wait_for_event("decision", "approval", timeout=600)
    await ctx.step("after", stamp, input["key"])


# The wake tests sweep every 30 s, so that "woken, not swept" is a margin of seconds a
# loaded machine keeps, not a fraction of the default 1 s sweep.
RARE_SWEEP_SECONDS = 30.0
WOKEN_WITHIN = 10.0


def _running_worker(world, workflows) -> tuple[lw.Worker, threading.Thread]:
    worker = lw.Worker(world, workflows=workflows, concurrency=2)
    worker.sweep_seconds = RARE_SWEEP_SECONDS
    thread = threading.Thread(target=worker.run)
    thread.start()
    return worker, thread


def _wait_until(predicate, what: str, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_a_worker_continues_a_sleeping_run_at_its_wake_time_not_at_its_next_sweep(tmp_path):
    from little_workflow.world.clock import from_iso

    world = lw.local_world(str(tmp_path / "lw"))
    worker, thread = _running_worker(world, [napper])
    try:
        run_id = lw.start_workflow(napper, {"key": "nap", "seconds": 1.3}, world=world)
        _wait_until(lambda: "nap" in STARTS, "the run to wake")
    finally:
        worker.stop()
        thread.join(timeout=60)
    scheduled = [e for e in world.list_events(run_id) if e.type == "timer.scheduled"]
    wake_at = from_iso(scheduled[0].payload["wakeAt"])
    # Sweeping every 30 s, the worker would have looked again ~29 s after the wake time.
    assert 0 <= STARTS["nap"] - wake_at < WOKEN_WITHIN, STARTS["nap"] - wake_at


def test_a_worker_picks_up_an_event_sent_from_another_process_well_before_its_next_sweep(tmp_path):
    import os
    import subprocess
    import sys

    data_dir = str(tmp_path / "lw")
    world = lw.local_world(data_dir)
    worker, thread = _running_worker(world, [listener])
    latencies = []
    try:
        for i in range(5):
            key = f"ev{i}"
            run_id = lw.start_workflow(listener, {"key": key}, world=world)
            _wait_until(lambda r=run_id: lw.materialize_run_state(world, r).status == "waiting",
                        "the worker to suspend the run")
            sent = subprocess.run(
                [sys.executable, "-c",
                 "import sys, time, little_workflow as lw\n"
                 "w = lw.local_world(sys.argv[1]); t = time.time()\n"
                 "lw.send_event(w, sys.argv[2], 'approval', {'ok': True}); print(repr(t))",
                 data_dir, run_id],
                env={**os.environ, "PYTHONPATH": SRC}, capture_output=True, text=True,
                timeout=60, check=True)
            _wait_until(lambda k=key: k in STARTS, "the run to continue")
            latencies.append(STARTS[key] - float(sent.stdout))
    finally:
        worker.stop()
        thread.join(timeout=60)
    # Read only at each 30 s sweep, five sends at random phases would not all land within
    # 10 s (odds 1 in 243).
    assert max(latencies) < WOKEN_WITHIN, latencies
