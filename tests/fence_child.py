"""Child of tests/test_log_fence.py: `python fence_child.py A|B URL SYNC`.

Both run `run_nolock` on a local-file World with the kernel lock disabled
(`little_workflow.testing.without_kernel_locks`), so nothing but the log keeps them
apart. A enters step `slow` (writing SYNC/A-in-slow) and stays there until B's
`run.started` is in the log; B executes the run to its end. Every step execution appends
`<step>:<A|B>` to SYNC/ledger. The last line printed is `{"outcome": ...}`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import little_workflow as lw
from little_workflow.testing import without_kernel_locks

ME, URL, SYNC = sys.argv[1], sys.argv[2], sys.argv[3]


def executed(path: str) -> None:
    fd = os.open(os.path.join(SYNC, "ledger"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{path}:{ME}\n".encode())
    finally:
        os.close(fd)


def step(path: str) -> str:
    executed(path)
    return path


def slow() -> str:
    executed("slow")
    if ME == "A":
        open(os.path.join(SYNC, "A-in-slow"), "w").close()
        world = lw.current_step().world
        deadline = time.monotonic() + 60
        while sum(e.type == "run.started" for e in world.list_events("run_nolock")) < 2:
            if time.monotonic() > deadline:
                raise SystemExit("B never started")
            time.sleep(0.01)
    return "slow"


@lw.workflow(id="nolock")
async def nolock(ctx: lw.RunContext, input: Any) -> list[str]:
    return [await ctx.step("one", step, "one"), await ctx.step("slow", slow),
            await ctx.step("three", step, "three")]


if __name__ == "__main__":
    with without_kernel_locks():
        world = lw.virtual_world(URL)
        try:
            result = lw.run_workflow(nolock, None, world=world, run_id="run_nolock")
            print(json.dumps({"outcome": result.status, "output": result.output}), flush=True)
        except lw.LittleWorkflowError as e:
            print(json.dumps({"outcome": type(e).__name__, "message": str(e)}), flush=True)
