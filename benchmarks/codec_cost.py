"""What keeping types costs per step (DESIGN §16): P1/P2-style runs of N serial steps,
timed from the `run_workflow` call to its return, for three step functions:

    unannotated   def step(i): return i                  plain JSON, as before §16
    int           def step(i: int) -> int                the benchmarks' own no-op (P1/P2)
    model         def step(i: int) -> Item               a pydantic model of 5 fields

    python -m benchmarks.codec_cost [N] [REPS]   one JSON line: µs per step, medians

Each figure is given twice: wall time, and CPU time of the process (`process_time`: what
the step costs this process, much less disturbed by other load on a shared machine).
Run it under two checkouts (PYTHONPATH=CHECKOUT/src) alternately to compare before and after; each
run warms up with one untimed run per flavour, then times REPS runs of each, interleaved.

    python -m benchmarks.codec_cost --serve             one run per line asked on stdin

`--serve` reads `KIND FLAVOUR N` lines and answers `WALL_US CPU_US` per step, so a driver
holding one such process per checkout can alternate them run by run: on a loaded machine
the load then falls on both sides alike.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel

import little_workflow as lw
from benchmarks.common import make_world, median


class Item(BaseModel):
    name: str
    qty: int
    price: float
    at: datetime
    tags: list[str]


AT = datetime(2026, 1, 1, tzinfo=timezone.utc)


def unannotated(i):  # type: ignore[no-untyped-def]
    return i


def annotated_int(i: int) -> int:
    return i


def model(i: int) -> Item:
    return Item(name="tea", qty=i, price=1.5, at=AT, tags=["green", "loose"])


FLAVOURS = {"unannotated": unannotated, "int": annotated_int, "model": model}


def per_step_us(kind: str, fn: Any, n: int) -> tuple[float, float]:
    @lw.workflow(id="codec-cost")
    async def steps(ctx: lw.RunContext, input: Any) -> int:
        for i in range(n):
            await ctx.step(f"s{i}", fn, i)
        return n

    world = make_world(kind)
    t, cpu = time.perf_counter(), time.process_time()
    lw.run_workflow(steps, {"n": n}, world=world)
    elapsed, cpu = time.perf_counter() - t, time.process_time() - cpu
    world.close()
    return elapsed / n * 1e6, cpu / n * 1e6


def serve() -> None:
    for fn in FLAVOURS.values():
        for kind in ("memory", "local_world"):
            per_step_us(kind, fn, 50)  # warm-up
    print("ready", flush=True)
    for line in sys.stdin:
        kind, flavour, n = line.split()
        wall, cpu = per_step_us(kind, FLAVOURS[flavour], int(n))
        print(f"{wall:.2f} {cpu:.2f}", flush=True)


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve()
        return
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    out: dict[str, dict[str, dict[str, float]]] = {}
    for kind in ("memory", "local_world"):
        for fn in FLAVOURS.values():
            per_step_us(kind, fn, 50)  # warm-up: imports, schemas, SQLite
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in FLAVOURS}
        for _ in range(reps):
            for name, fn in FLAVOURS.items():
                samples[name].append(per_step_us(kind, fn, n))
        out[kind] = {name: {"wall": round(median([w for w, _ in values]), 1),
                            "cpu": round(median([c for _, c in values]), 1)}
                     for name, values in samples.items()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
