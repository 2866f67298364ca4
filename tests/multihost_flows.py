"""The workflow of the multi-host torture test, run by `little worker multihost_flows`.

Each step writes one ledger line `<runId>:<step>:<token>` to a local file outside the
store (one `write` on an O_APPEND descriptor, so it survives a SIGKILL), then returns the
same token with its value. The token of a committed step names the execution whose
success was recorded, so the test can tell an uncommitted execution run again (allowed)
from a committed one run again (a bug)."""

from __future__ import annotations

import os
import time
import uuid

import little_workflow as lw

STEPS = 5


def ledger_step(run_id: str, step: str, value: int) -> dict:
    token = uuid.uuid4().hex[:12]
    fd = os.open(os.environ["LW_TORTURE_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{run_id}:{step}:{token}\n".encode())
    finally:
        os.close(fd)
    time.sleep(float(os.environ.get("LW_TORTURE_STEP_SECONDS", "0.05")))
    return {"value": value, "token": token}


@lw.workflow(id="torture")
async def torture(ctx: lw.RunContext, input: dict) -> dict:
    values = []
    for i in range(STEPS):
        step = f"s{i}"
        result = await ctx.step(step, ledger_step, ctx.run_id, step, input["n"] * 10 + i)
        values.append(result["value"])
    return {"n": input["n"], "values": values}
