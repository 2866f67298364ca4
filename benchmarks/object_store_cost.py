"""What one step costs on an object-store World — S3 against a moto server and Azure
Blob against Azurite, both on 127.0.0.1 (local emulators: a real store adds a network
round trip to each request): requests and latency per step and per run, the requests of
one worker sweep, and what a held run lock costs (its lease renewals).

    python benchmarks/object_store_cost.py [STEPS] [--store=s3|azure|both] [--json=OUT]

`--json=OUT` also writes the figures to OUT as JSON (`{"s3": {...}, "azure": {...}}`),
as `benchmarks/run.py` reads them for P13.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from s3_server import MotoS3, RequestCounter  # noqa: E402

import little_workflow as lw  # noqa: E402
from benchmarks.common import noop  # noqa: E402

STEPS = 50
#: A run lock is held this many leases of this many seconds to count its renewals (a
#: short lease: renewals come every third of it, whatever its length).
HELD_LEASES, HELD_LEASE_SECONDS = 4, 1.5


@lw.workflow(id="bench-steps")
async def steps(ctx: lw.RunContext, input: dict) -> int:
    total = 0
    for i in range(input["steps"]):
        total += await ctx.step(f"s{i}", noop, i)
    return total


def measure(fs: Any, root: str, counter: Any, n: int, adapter: Any) -> dict:
    """`counter`: the requests `fs` sends (`.total`, `.by_method`, `.reset()`)."""
    world = lw.virtual_world(fs, root)
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
    counter.reset()
    worker.sweep()  # the first also looked at the schedules: then once every 10 s
    next_sweep_req = counter.total
    worker.close()
    adapter.LEASE_SECONDS = HELD_LEASE_SECONDS  # read when a World is built
    held = lw.virtual_world(fs, root)
    counter.reset()
    with held.run_lock("run_held"):
        time.sleep(HELD_LEASES * HELD_LEASE_SECONDS)
    renewals = counter.total - 2  # besides taking and releasing it
    return {
        "run_overhead_requests": empty_req, "run_overhead_ms": empty_s * 1e3,
        "requests_per_step": (full_req - empty_req) / n,
        "ms_per_step": (full_s - empty_s) / n * 1e3,
        "by_method": by_method, "sweep_requests_idle": sweep_req,
        "sweep_requests_next": next_sweep_req,
        "renewals_per_lease": renewals / HELD_LEASES,
    }


def measure_s3(n: int) -> dict:
    import fs_adapters.object_store as adapter

    server = MotoS3()
    try:
        fs = server.filesystem()
        return measure(fs, f"{server.new_bucket()}/wf", RequestCounter(fs), n, adapter)
    finally:
        server.stop()


def measure_azure(n: int) -> dict:
    from azurite_server import Azurite
    from azurite_server import RequestCounter as AzureRequestCounter

    import fs_adapters.azure_blob as adapter

    server = Azurite()
    try:
        fs = server.filesystem()
        counter = AzureRequestCounter(fs, server.connection_string)
        return measure(fs, f"{server.new_container()}/wf", counter, n, adapter)
    finally:
        server.stop()


def main() -> dict:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    store = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--store=")), "both")
    json_out = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--json=")), None)
    n = int(args[0]) if args else STEPS
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    results = {}
    for name, title, run in (("s3", "S3 World against moto", measure_s3),
                             ("azure", "Azure Blob World against Azurite", measure_azure)):
        if store not in (name, "both"):
            continue
        r = results[name] = run(n)
        print(f"{title} on 127.0.0.1, a run of {n} steps:")
        print(f"  per step: {r['requests_per_step']:.1f} requests, {r['ms_per_step']:.1f} ms")
        print(f"  per run (start, lock, index, end): {r['run_overhead_requests']} requests, "
              f"{r['run_overhead_ms']:.0f} ms")
        print(f"  requests of the {n}-step run by method: {r['by_method']}")
        print(f"  a worker's sweeps with nothing to do: the first {r['sweep_requests_idle']} "
              f"requests (with its look at the schedules), the next {r['sweep_requests_next']}")
        print(f"  a held run lock: {r['renewals_per_lease']:.1f} renewal requests per lease")
    if json_out:
        with open(json_out, "w") as f:
            json.dump(results, f)
    return results


if __name__ == "__main__":
    main()
