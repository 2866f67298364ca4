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


def lock_us(world: Any, tag: str) -> float:
    t = time.perf_counter()
    for i in range(LOCKS):
        with world.run_lock(f"run_{tag}_{i}"):
            pass
    return (time.perf_counter() - t) / LOCKS * 1e6


def run_start_us(world: Any, tag: str) -> float:
    t = time.perf_counter()
    for i in range(RUNS):
        lw.run_workflow(one_step, None, world=world, run_id=f"run_{tag}_{i}")
    return (time.perf_counter() - t) / RUNS * 1e6


def side(measure: Any, locked: bool, rep: int) -> float:
    world = lw.virtual_world("file://" + tempfile.mkdtemp(prefix="lwb-lock-"))
    try:
        if locked:
            return float(measure(world, f"k{rep}"))
        with without_kernel_locks():
            return float(measure(world, f"n{rep}"))
    finally:
        world.close()


def main(reps: int = 5) -> dict[str, float]:
    # Warm-up: imports, the first World, the first run.
    side(run_start_us, True, -1)
    results: dict[str, list[float]] = {k: [] for k in ("lock", "lock0", "run", "run0")}
    for rep in range(reps):
        results["lock"].append(side(lock_us, True, rep))
        results["lock0"].append(side(lock_us, False, rep))
        results["run0"].append(side(run_start_us, False, rep))
        results["run"].append(side(run_start_us, True, rep))
    m = {k: median(v) for k, v in results.items()}
    print(f"python {platform.python_version()} on {platform.platform()}, {reps} repetitions, medians")
    print(f"run lock taken and given back ({LOCKS} run ids): "
          f"{m['lock']:.1f} µs with the kernel lock, {m['lock0']:.1f} µs without "
          f"(+{m['lock'] - m['lock0']:.1f} µs)")
    print(f"run start, one-step run_workflow ({RUNS} runs): "
          f"{m['run']:.0f} µs with the kernel lock, {m['run0']:.0f} µs without "
          f"(+{m['run'] - m['run0']:.1f} µs, {100 * (m['run'] / m['run0'] - 1):+.1f} %)")
    return m


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
