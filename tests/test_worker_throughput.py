"""A busy Worker hands due runs to its threads without sweeping the World once per run,
and still runs every step of every run exactly once (local_world, real threads)."""

from __future__ import annotations

import threading
import time

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
