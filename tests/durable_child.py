"""A process that runs a workflow which sleeps or waits; the test SIGKILLs it there.
Usage: python durable_child.py DATA_DIR RUN_ID sleep|wait"""

from __future__ import annotations

import sys

import little_workflow as lw

LEDGER = "ledger.txt"


def note(data_dir: str, name: str) -> str:
    with open(f"{data_dir}/{LEDGER}", "a") as f:
        f.write(name + "\n")
    return name


@lw.workflow(id="napper")
async def napper(ctx, input):
    await ctx.step("before", note, input["dataDir"], "before")
    await ctx.sleep("nap", input["seconds"])
    return await ctx.step("after", note, input["dataDir"], "after")


@lw.workflow(id="listener")
async def listener(ctx, input):
    await ctx.step("before", note, input["dataDir"], "before")
    decision = await ctx.wait_for_event("decision", "approval")
    await ctx.step("after", note, input["dataDir"], "after")
    return decision


if __name__ == "__main__":
    data_dir, run_id, kind = sys.argv[1:4]
    world = lw.local_world(data_dir)
    wf = napper if kind == "sleep" else listener
    lw.run_workflow(wf, {"dataDir": data_dir, "seconds": 3}, world=world, run_id=run_id)
