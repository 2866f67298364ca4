"""What one step costs on an S3 World: requests and latency, measured against a moto
server on 127.0.0.1 (a local emulator: real S3 adds a network round trip to each
request), plus the requests of one worker sweep.

    python benchmarks/object_store_cost.py [STEPS]
"""

from __future__ import annotations

import logging
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from s3_server import MotoS3, RequestCounter  # noqa: E402

import little_workflow as lw  # noqa: E402

STEPS = 50


@lw.workflow(id="bench-steps")
async def steps(ctx: lw.RunContext, input: dict) -> int:
    total = 0
    for i in range(input["steps"]):
        total += await ctx.step(f"s{i}", lambda i=i: i)
    return total


def measure(server: MotoS3, n: int) -> dict:
    fs = server.filesystem()
    counter = RequestCounter(fs)
    world = lw.virtual_world(fs, f"{server.new_bucket()}/wf")
    lw.run_workflow(steps, {"steps": 1}, world=world)  # warm: versions, connections
    counter.reset()
    t = time.perf_counter()
    lw.run_workflow(steps, {"steps": 0}, world=world)
    empty_s, empty_req = time.perf_counter() - t, counter.total
    counter.reset()
    t = time.perf_counter()
    lw.run_workflow(steps, {"steps": n}, world=world)
    full_s, full_req = time.perf_counter() - t, counter.total
    by_method = dict(counter.by_method)
    worker = lw.Worker(world, workflows=[steps])
    counter.reset()
    worker.sweep()
    sweep_req = counter.total
    worker.close()
    return {
        "run_overhead_requests": empty_req, "run_overhead_ms": empty_s * 1e3,
        "requests_per_step": (full_req - empty_req) / n,
        "ms_per_step": (full_s - empty_s) / n * 1e3,
        "by_method": by_method, "sweep_requests_idle": sweep_req,
    }


def main() -> dict:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else STEPS
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = MotoS3()
    try:
        r = measure(server, n)
    finally:
        server.stop()
    print(f"S3 World against moto on 127.0.0.1, a run of {n} steps:")
    print(f"  per step: {r['requests_per_step']:.1f} requests, {r['ms_per_step']:.1f} ms")
    print(f"  per run (start, lock, index, end): {r['run_overhead_requests']} requests, "
          f"{r['run_overhead_ms']:.0f} ms")
    print(f"  requests of the {n}-step run by method: {r['by_method']}")
    print(f"  one worker sweep with nothing to do: {r['sweep_requests_idle']} requests")
    return r


if __name__ == "__main__":
    main()
