"""little-workflow side of P7 (wake latency) and P8 (worker throughput).

P7 is measured as on DBOS's side (dbos_side.py `wake`): wall-clock time (`time.time()`,
one clock for every process) from the moment an event is sent, or a timer is due, to the
start of the run's next step (the step stamps its own start).

    python benchmarks/wake.py worker DIR     a Worker process for P7 (c), until SIGTERM
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import little_workflow as lw

SLEEP_SECONDS = 0.2
STAMPS: dict[str, float] = {}


def stamp(key: str, directory: str | None) -> None:
    """The next step: record when it started (in a file when another process asks)."""
    now = time.time()
    if directory:
        with open(os.path.join(directory, f"{key}.stamp"), "w") as f:
            f.write(repr(now))
    else:
        STAMPS[key] = now


@lw.workflow(id="bench-sleeper")
async def sleeper(ctx: lw.RunContext, input: dict) -> None:
    STAMPS[input["key"] + ":called"] = time.time()  # just before the sleep call
    await ctx.sleep("nap", input["seconds"])
    await ctx.step("next", stamp, input["key"], None)


@lw.workflow(id="bench-receiver")
async def receiver(ctx: lw.RunContext, input: dict) -> None:
    await ctx.wait_for_event("decision", "approval", timeout=60)
    await ctx.step("next", stamp, input["key"], input.get("stampDir"))


def _until(predicate: Any, what: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.002)


def _waiting_for_event(world: Any, run_id: str) -> bool:
    if not world.list_events(run_id):
        return False
    state = lw.materialize_run_state(world, run_id)
    return state.status == "waiting" and (state.waiting or {}).get("kind") == "event"


def timer_overshoot(reps: int) -> dict[str, list[float]]:
    """(a) in-process: next step start − the committed wakeAt, and − (the time just
    before the sleep call + the sleep), the latter as DBOS's side is measured."""
    from little_workflow.world.clock import from_iso

    world = lw.local_world(tempfile.mkdtemp(prefix="lwb-p7t-"))
    vs_committed, vs_call = [], []
    for i in range(reps):
        key = f"t{i}"
        run_id = f"run_p7t_{i}"
        lw.run_workflow(sleeper, {"key": key, "seconds": SLEEP_SECONDS}, world=world, run_id=run_id)
        scheduled = [e for e in world.list_events(run_id) if e.type == "timer.scheduled"][0]
        vs_committed.append(STAMPS[key] - from_iso(scheduled.payload["wakeAt"]))
        vs_call.append(STAMPS[key] - (STAMPS[key + ":called"] + SLEEP_SECONDS))
    world.close()
    return {"vs_committed": vs_committed, "vs_call": vs_call}


def event_same_process(reps: int, rng: random.Random) -> list[float]:
    """(b) `send_event` from this process into a run blocked in `wait_for_event` here."""
    world = lw.local_world(tempfile.mkdtemp(prefix="lwb-p7e-"))
    out = []
    for i in range(reps):
        key, run_id = f"e{i}", f"run_p7e_{i}"
        t = threading.Thread(target=lw.run_workflow, args=(receiver, {"key": key}),
                             kwargs={"world": world, "run_id": run_id})
        t.start()
        _until(lambda r=run_id: _waiting_for_event(world, r), "the waiter")
        time.sleep(0.3 + rng.random())  # as DBOS's side: blocked, then a random phase
        sent = time.time()
        lw.send_event(world, run_id, "approval", {"ok": True})
        t.join()
        out.append(STAMPS[key] - sent)
    world.close()
    return out


def event_other_process(reps: int, rng: random.Random) -> list[float]:
    """(c) `send_event` from this process; a Worker in another process (`wake.py worker`,
    sweeping every second) continues the run; its next step stamps a file."""
    data_dir = tempfile.mkdtemp(prefix="lwb-p7w-")
    stamps = tempfile.mkdtemp(prefix="lwb-p7w-stamps-")
    # The worker runs the little_workflow this process imported (whichever checkout's src/).
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(lw.__file__)))}
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "worker", data_dir],
                            env=env)
    world = lw.local_world(data_dir)
    out = []
    try:
        for i in range(reps):
            key = f"w{i}"
            run_id = lw.start_workflow(receiver, {"key": key, "stampDir": stamps}, world=world,
                                       run_id=f"run_p7w_{i}")
            _until(lambda r=run_id: _waiting_for_event(world, r), "the worker to suspend the run")
            time.sleep(0.3 + rng.random())
            sent = time.time()
            lw.send_event(world, run_id, "approval", {"ok": True})
            path = os.path.join(stamps, f"{key}.stamp")
            _until(lambda p=path: os.path.exists(p) and os.path.getsize(p) > 0, "the next step")
            with open(path) as f:
                out.append(float(f.read()) - sent)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        world.close()
    return out


def worker_throughput(n: int = 1000, concurrency: int = 8) -> dict[str, float]:
    """P8: n runs of 3 durable no-op steps started with `lw.start_workflow`, then drained
    by one `Worker(concurrency=8)` (`run_until_idle`) on local_world; runs/s from the first
    start to the last completion (run_until_idle returns when every run has completed)."""
    world = lw.local_world(tempfile.mkdtemp(prefix="lwb-p8-"))
    t0 = time.perf_counter()
    ids = [lw.start_workflow(three_steps, i, world=world) for i in range(n)]
    t1 = time.perf_counter()
    worker = lw.Worker(world, workflows=[three_steps], concurrency=concurrency)
    worker.run_until_idle()
    t2 = time.perf_counter()
    worker.close()
    done = sum(lw.materialize_run_state(world, r).status == "completed" for r in ids)
    world.close()
    if done != n:
        raise RuntimeError(f"P8: only {done} of {n} runs completed")
    return {"runs_per_s": n / (t2 - t0), "start_per_s": n / (t1 - t0), "drain_per_s": n / (t2 - t1)}


def noop(i: int) -> int:
    return i


@lw.workflow(id="bench-three-steps")
async def three_steps(ctx: lw.RunContext, input: Any) -> Any:
    for k in range(3):
        await ctx.step(f"s{k}", noop, k)
    return input


if __name__ == "__main__" and sys.argv[1] == "worker":
    w = lw.Worker(lw.local_world(sys.argv[2]), workflows=[receiver], concurrency=8)
    w.run()  # until SIGTERM
