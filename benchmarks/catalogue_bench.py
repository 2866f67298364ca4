"""P11 (finding runs among N finished ones) and P12 (a short command's start-up).

`build_world(kind, n)` writes N finished runs through the World's own append path — in
batches (`submit_event` then `result()`, so local_world shares commits), non-durable,
synced at the end — one run per simulated second; 1 % of them fail, and the oldest 50
are 60 days older than the rest, so a gc dry run with `--older-than 30d` finds 50.

    python benchmarks/catalogue_bench.py local_world 10000
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import little_workflow as lw  # noqa: E402

DAY = 86400.0
START = 1_790_000_000.0
OLD = 50  # runs a gc dry run finds
BATCH = 200
# Whole-process timings with bytecode caches, as an installed package has them (a
# PYTHONDONTWRITEBYTECODE environment would time the compiler too).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV.update(PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(lw.__file__))),
           PYTHONPYCACHEPREFIX=os.path.join(tempfile.gettempdir(), "lw-bench-pycache"))


class BuilderClock:
    """A clock the builder moves to each run's time."""

    def __init__(self, t: float):
        self.t = t

    def now(self) -> float:
        return self.t

    async def sleep_until(self, when: float) -> None:
        raise AssertionError("the builder never sleeps")


def open_world(kind: str, path: str, clock: Any = None) -> Any:
    if kind == "local_world":
        return lw.local_world(path, clock=clock)
    return lw.virtual_world("file://" + path, clock=clock)


def build_world(kind: str, n: int, path: str | None = None) -> tuple[str, float]:
    """A World holding n finished runs; (its path, the clock's 'now' after them)."""
    path = path or tempfile.mkdtemp(prefix=f"lwb-p11-{kind}-")
    clock = BuilderClock(START)
    world = open_world(kind, path, clock)
    for first in range(0, n, BATCH):
        pending = []
        for i in range(first, min(first + BATCH, n)):
            clock.t = START + i + (0 if i < OLD else 60 * DAY)
            run_id = f"run_{i:08d}"
            pending.append(world.submit_event(run_id, "run.created",
                                              {"workflowId": "bench" if i % 2 else "other",
                                               "input": {"i": i}}, durable=False))
            pending.append(world.submit_event(run_id, "run.started", {"start": 1}, durable=False))
            pending.append(world.submit_event(run_id, "step.started",
                                              {"stepPath": "one", "attempt": 1}, durable=False))
            pending.append(world.submit_event(run_id, "step.succeeded",
                                              {"stepPath": "one", "output": i}, durable=False))
            if i % 100 == 7:
                pending.append(world.submit_event(run_id, "run.failed", {
                    "error": {"type": "ValueError", "message": "boom"}}, durable=False))
            else:
                pending.append(world.submit_event(run_id, "run.completed", {"output": i},
                                                  durable=False))
        for p in pending:
            p.result()
        world.sync()  # the batch durable (and, on file Worlds, its summaries written)
    world.close()
    return path, clock.t + 1


def best_ms(fn: Any, reps: int = 5) -> float:
    """Median of `reps` timings, in ms (the first call warms caches as a user's would)."""
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def process_ms(args: list[str], reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-m", "little_workflow.cli", *args], env=ENV,
                       capture_output=True, check=True, cwd=tempfile.gettempdir())
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def measure(kind: str, path: str, now: float) -> dict[str, float]:
    from little_workflow.ops.ui import RunsIndex

    clock = BuilderClock(now)
    world = open_world(kind, path, clock)
    try:
        first = lw.list_runs(world, limit=50)
        assert len(first.runs) == 50 and first.next_cursor
        failed = lw.list_runs(world, status="failed", limit=50)
        assert failed.runs and all(r.status == "failed" for r in failed.runs)
        found = lw.gc(world, older_than=30 * DAY, dry_run=True)
        assert len(found.run_ids) == OLD, len(found.run_ids)
        out = {
            "first page": best_ms(lambda: lw.list_runs(world, limit=50)),
            "failed page": best_ms(lambda: lw.list_runs(world, status="failed", limit=50)),
            "ui /api/runs": best_ms(lambda: RunsIndex(world).document()),
            "gc dry run (50 found)": best_ms(lambda: lw.gc(world, older_than=30 * DAY, dry_run=True), 3),
        }
    finally:
        world.close()
    where = ["--data-dir", path] if kind == "local_world" else ["--world", "file://" + path]
    out["little runs (process)"] = process_ms(["runs", *where])
    return out


def import_ms(reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import little_workflow"], env=ENV, check=True,
                       cwd=tempfile.gettempdir())
        times.append(time.perf_counter() - t)
    bare = []
    for _ in range(reps):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=ENV, check=True, cwd=tempfile.gettempdir())
        bare.append(time.perf_counter() - t)
    return (statistics.median(times) - statistics.median(bare)) * 1e3


def p12() -> dict[str, float]:
    path, _ = build_world("local_world", 20)
    return {"little runs, 20 runs (process)": process_ms(["runs", "--data-dir", path]),
            "import little_workflow (beyond a bare interpreter)": import_ms()}


if __name__ == "__main__":
    kind, n = sys.argv[1], int(sys.argv[2])
    t = time.perf_counter()
    built, now = build_world(kind, n)
    print(f"{kind} N={n}: built in {time.perf_counter() - t:.1f} s at {built}")
    for name, ms in measure(kind, built, now).items():
        print(f"  {name}: {ms:.1f} ms")
