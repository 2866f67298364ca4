"""A child process for crash tests: runs a reference workflow, records every real step
call in a ledger, and is killed with SIGKILL by the test at a random moment."""

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
    group = await ctx.parallel(
        "fan", [functools.partial(work, f"fan/{i}", i, delay) for i in range(PARALLEL)],
        max_concurrency=3)
    total += sum(r["value"] for r in group)
    big = await ctx.step("big", work, "big", 2000, delay)  # > inline limit: an artifact
    return {"total": total, "bigLen": len(big["pad"])}


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
