"""Workflows of the queue process tests (tests/test_queues_processes.py), imported by
the test and by its worker processes (tests/queue_child.py). Each run's step notes its
start and end in a ledger file ($LW_QUEUE_LEDGER, a local file every process appends
to): the executions that overlapped, whichever World the runs are in."""

from __future__ import annotations

import os
import time

import little_workflow as lw


def note(run_id: str, what: str) -> None:
    line = f"{run_id} {what} {time.time():.6f} {os.getpid()}\n".encode()
    fd = os.open(os.environ["LW_QUEUE_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one short O_APPEND write: lines never interleave
    finally:
        os.close(fd)


def work(run_id: str, seconds: float) -> float:
    note(run_id, "start")
    time.sleep(seconds)
    note(run_id, "end")
    return seconds


@lw.workflow(id="qp-work")
async def work_flow(ctx: lw.RunContext, input: dict) -> dict:
    await ctx.step("work", work, ctx.run_id, float(input.get("seconds", 0.2)))
    return {"n": input.get("n"), "key": input.get("key")}


WORKFLOWS = [work_flow]
