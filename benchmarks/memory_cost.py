"""M1, M2 (BENCHMARKS.md "Memory"): what a run keeps and what it peaks at, by tracemalloc.

Each measure runs in a fresh process, after one untimed 1-step run on the same World (so
imports and first-use caches are not counted), with tracemalloc started just before the
measured run:

- M1, memory `virtual_world`: Python bytes still allocated after a run of N steps (the
  World kept alive, a full `gc.collect()` first) over the bytes of that run's events as
  canonical JSON (what the World must keep at least).
- M2, `local_world`: peak Python allocation during a run of N steps, and what is still
  allocated after it; run at N and at N/10, so that growth with N shows.

    python benchmarks/memory_cost.py m1|m2 STEPS OUT.json
"""

from __future__ import annotations

import gc
import json
import os
import sys
import tracemalloc
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import little_workflow as lw  # noqa: E402
from benchmarks.common import make_world, noop  # noqa: E402
from little_workflow.world.ids import canonical_bytes  # noqa: E402


@lw.workflow(id="bench-memory")
async def steps(ctx: lw.RunContext, input: dict) -> int:
    for i in range(input["steps"]):
        await ctx.step(f"s{i}", noop, i)
    return input["steps"]


def measure(kind: str, n: int) -> dict[str, Any]:
    world = make_world(kind)
    lw.run_workflow(steps, {"steps": 1}, world=world, run_id="run_mem_warm")
    gc.collect()
    tracemalloc.start()
    lw.run_workflow(steps, {"steps": n}, world=world, run_id="run_mem")
    gc.collect()
    retained, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    events = world.list_events("run_mem")
    json_bytes = sum(len(canonical_bytes(e.to_envelope())) for e in events)
    return {"steps": n, "retained_bytes": retained, "peak_bytes": peak,
            "events": len(events), "events_json_bytes": json_bytes}


def main() -> None:
    which, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    kind = {"m1": "memory", "m2": "local_world"}[which]
    with open(out, "w") as f:
        json.dump(measure(kind, n), f)


if __name__ == "__main__":
    main()
