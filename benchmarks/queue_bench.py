"""little-workflow side of the queue benchmarks (DESIGN §17):

- P8 with queues: n runs of 3 durable no-op steps enqueued with `lw.enqueue` on a queue
  of `concurrency=8`, drained by one `Worker(concurrency=8)` (`run_until_idle`) on
  local_world; runs/s from the first enqueue to the last completion (the peer: DBOS's
  queue, dbos_side.py `queue`).
- Rate-limit accuracy: n runs on a queue with `RateLimit(limit, period)` drained by one
  worker; the most starts in any window of `period` (must be ≤ limit) and the achieved
  rate, (starts after the first window) / (last start - first start), against
  limit / period. Start times are the admission times the runs' `run.started` record.
- Storage requests on S3 (moto): per enqueue, and per queued run's start.

    python benchmarks/queue_bench.py [N]     print the three figures
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import little_workflow as lw  # noqa: E402
from benchmarks.wake import three_steps  # noqa: E402
from little_workflow.world.clock import from_iso  # noqa: E402


def queue_throughput(n: int = 1000, concurrency: int = 8) -> dict[str, float]:
    world = lw.local_world(tempfile.mkdtemp(prefix="lwb-p8q-"))
    lw.declare_queue(world, "q", concurrency=concurrency)
    t0 = time.perf_counter()
    handles = [lw.enqueue(world, three_steps, i, queue="q") for i in range(n)]
    t1 = time.perf_counter()
    worker = lw.Worker(world, workflows=[three_steps], concurrency=concurrency)
    worker.run_until_idle()
    t2 = time.perf_counter()
    worker.close()
    done = sum(h.status() == "completed" for h in handles)
    world.close()
    if done != n:
        raise RuntimeError(f"P8 with queues: only {done} of {n} runs completed")
    return {"runs_per_s": n / (t2 - t0), "enqueue_per_s": n / (t1 - t0), "drain_per_s": n / (t2 - t1)}


def first_starts(world: Any, run_ids: list[str]) -> list[float]:
    times = []
    for run_id in run_ids:
        started = [e.payload for e in world.list_events(run_id) if e.type == "run.started"]
        times.append(from_iso(started[0]["admission"]["at"]))
    return sorted(times)


def rate_accuracy(limit: int = 20, period: float = 1.0, windows: int = 5) -> dict[str, float]:
    n = limit * windows
    world = lw.local_world(tempfile.mkdtemp(prefix="lwb-rate-"))
    lw.declare_queue(world, "r", rate_limit=lw.RateLimit(limit=limit, period=period))
    handles = [lw.enqueue(world, three_steps, i, queue="r") for i in range(n)]
    worker = lw.Worker(world, workflows=[three_steps], concurrency=8)
    worker.run_until_idle()
    worker.close()
    times = first_starts(world, [h.run_id for h in handles])
    world.close()
    most = max(len([u for u in times[i:] if u < t + period]) for i, t in enumerate(times))
    achieved = (n - limit) / (times[-1] - times[0])
    return {"most_in_window": most, "limit": limit, "achieved_per_s": achieved,
            "limit_per_s": limit / period, "achieved_share": achieved / (limit / period)}


def s3_requests(n: int = 20) -> dict[str, float]:
    """Requests per enqueue and per start of a queued run (concurrency 2, a rate limit),
    counted at the S3 client as the object-store cost benchmark counts them."""
    from s3_server import MotoS3, RequestCounter

    server = MotoS3()
    try:
        fs = server.filesystem()
        counter = RequestCounter(fs)
        world = lw.virtual_world(fs, f"{server.new_bucket()}/wf")
        lw.declare_queue(world, "q", concurrency=2, rate_limit=lw.RateLimit(limit=1000, period=60))
        counter.reset()
        handles = [lw.enqueue(world, three_steps, i, queue="q") for i in range(n)]
        per_enqueue = counter.total / n
        counter.reset()
        worker = lw.Worker(world, workflows=[three_steps], concurrency=2)
        worker.run_until_idle()
        worker.close()
        drained = counter.total
        counter.reset()
        plain = [lw.start_workflow(three_steps, i, world=world) for i in range(n)]
        started = counter.total
        worker = lw.Worker(world, workflows=[three_steps], concurrency=2)
        worker.run_until_idle()
        worker.close()
        plain_drained = counter.total - started
        assert all(h.status() == "completed" for h in handles) and len(plain) == n
    finally:
        server.stop()
    return {"per_enqueue": per_enqueue, "per_start_workflow": started / n,
            "per_queued_run_drained": drained / n,
            "per_plain_run_drained": plain_drained / n,
            "per_start_extra": (drained - plain_drained) / n}


if __name__ == "__main__":
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    print("P8 with queues", queue_throughput(size))
    print("rate accuracy", rate_accuracy())
    print("S3 requests", s3_requests())
