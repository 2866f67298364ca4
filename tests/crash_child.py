"""A child process for crash tests: runs a reference workflow, records every real step
call in a ledger (`<stepPath>`) and every step the workflow body saw succeed
(`ack <stepPath>`, the marker the test waits for before its SIGKILL)."""

from __future__ import annotations

import functools
import os
import sys
import time

import little_workflow as lw

SERIAL, PARALLEL = 8, 6


def ledger_write(path: str) -> None:
    with open(os.environ["LW_LEDGER"], "a") as f:
        f.write(f"{path}\n")


def ack(*paths: str) -> None:
    for path in paths:
        ledger_write(f"ack {path}")


def work(path: str, value: int, delay: float) -> dict:
    ledger_write(path)
    time.sleep(delay)
    return {"path": path, "value": value, "pad": "p" * (value * 50)}


@lw.workflow(id="crash-reference")
async def reference(ctx: lw.RunContext, input: dict) -> dict:
    delay = input["delay"]
    total = 0
    for i in range(SERIAL):
        total += (await ctx.step(f"serial-{i}", work, f"serial-{i}", i, delay))["value"]
        ack(f"serial-{i}")
    group = await ctx.parallel(
        "fan", [functools.partial(work, f"fan/{i}", i, delay) for i in range(PARALLEL)],
        max_concurrency=3)
    ack(*(f"fan/{i}" for i in range(PARALLEL)))
    total += sum(r["value"] for r in group)
    # > inline limit: an artifact. Long enough that a kill sent after any earlier marker
    # lands before the run ends.
    big = await ctx.step("big", work, "big", 2000, max(delay, 0.25))
    ack("big")
    return {"total": total, "bigLen": len(big["pad"])}


#: How many ack markers one whole run writes.
MARKERS = SERIAL + PARALLEL + 1
EXPECTED = {"total": sum(range(SERIAL)) + sum(range(PARALLEL)), "bigLen": 100000}


def open_world(kind: str, data_dir: str) -> lw.World:
    if kind == "local_world":
        return lw.local_world(data_dir)
    return lw.virtual_world(f"file://{data_dir}")


if __name__ == "__main__":
    kind, data_dir, run_id, delay = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    result = lw.run_workflow(reference, {"delay": delay}, world=open_world(kind, data_dir),
                             run_id=run_id)
    print("RESULT", result.output == EXPECTED, flush=True)
