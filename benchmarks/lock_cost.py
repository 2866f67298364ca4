"""What a run lock across processes costs on local files (DESIGN §15).

    python benchmarks/lock_cost.py [REPS]

A virtual world on `file://` takes each run's lock with a kernel lock (`flock` on
`<dataDir>/locks/<hash>.lock`: open, lock, write the owner; unlink and close on release).
Measured side by side, the two sides interleaved, medians of REPS (default 5) repetitions:

- the lock alone: `world.run_lock(run_id)` taken and given back, one fresh run id each;
- a run start: `run_workflow` of a one-step workflow on a fresh run id, whole (run
  created, lock, `run.started`, the step, `run.completed`, lock released);

each with the kernel lock and without it (`little_workflow.testing.without_kernel_locks`:
the in-process lock only, as before §15).
"""

from __future__ import annotations

import platform
import sys
import tempfile
import time
from typing import Any

if __package__ in (None, ""):
    import os

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import little_workflow as lw
from benchmarks.common import median
from little_workflow.testing import without_kernel_locks

LOCKS = 2000
RUNS = 200


@lw.workflow(id="lock-cost")
async def one_step(ctx: lw.RunContext, input: Any) -> int:
    return await ctx.step("one", lambda: 1)


def lock_us(world: Any, tag: str) -> tuple[float, float]:
    t, cpu = time.perf_counter(), time.process_time()
    for i in range(LOCKS):
        with world.run_lock(f"run_{tag}_{i}"):
            pass
    return ((time.perf_counter() - t) / LOCKS * 1e6, (time.process_time() - cpu) / LOCKS * 1e6)


def run_start_us(world: Any, tag: str) -> tuple[float, float]:
    t, cpu = time.perf_counter(), time.process_time()
    for i in range(RUNS):
        lw.run_workflow(one_step, None, world=world, run_id=f"run_{tag}_{i}")
    return ((time.perf_counter() - t) / RUNS * 1e6, (time.process_time() - cpu) / RUNS * 1e6)


def side(measure: Any, locked: bool, rep: int) -> tuple[float, float]:
    world = lw.virtual_world("file://" + tempfile.mkdtemp(prefix="lwb-lock-"))
    try:
        if locked:
            return measure(world, f"k{rep}")  # type: ignore[no-any-return]
        with without_kernel_locks():
            return measure(world, f"n{rep}")  # type: ignore[no-any-return]
    finally:
        world.close()


def main(reps: int = 5) -> dict[str, float]:
    """Wall time, and this process's CPU time (user + system: what the lock's system calls
    cost, whatever else the machine runs), per lock and per run."""
    side(run_start_us, True, -1)  # warm-up: imports, the first World, the first run
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in ("lock", "lock0", "run", "run0")}
    for rep in range(reps):
        results["lock"].append(side(lock_us, True, rep))
        results["lock0"].append(side(lock_us, False, rep))
        results["run0"].append(side(run_start_us, False, rep))
        results["run"].append(side(run_start_us, True, rep))
    m = {f"{k}_{what}": median([r[i] for r in v]) for k, v in results.items()
         for i, what in enumerate(("wall", "cpu"))}
    print(f"python {platform.python_version()} on {platform.platform()}, {reps} repetitions, "
          "medians (µs wall / µs CPU of this process)")
    for label, key, n in (("run lock taken and given back", "lock", LOCKS),
                          ("run start, one-step run_workflow", "run", RUNS)):
        with_, without = (m[f"{key}_wall"], m[f"{key}_cpu"]), (m[f"{key}0_wall"], m[f"{key}0_cpu"])
        print(f"{label} ({n} run ids): with the kernel lock {with_[0]:.1f} / {with_[1]:.1f}, "
              f"without {without[0]:.1f} / {without[1]:.1f}; "
              f"added {with_[0] - without[0]:+.1f} µs wall, {with_[1] - without[1]:+.1f} µs CPU")
    return m


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
