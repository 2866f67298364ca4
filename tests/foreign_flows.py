"""Workflows of tests/test_foreign_events.py, imported by the test and by its child
processes (the same definition on every host).

`two` appends one line `<host>` to the file `LW_FOREIGN_LEDGER` for every execution, so
the test can tell which host ran it and how often. With `LW_PAUSE_BEFORE_PUT` set, it arms
`PAUSE_AT_NEXT_CHECK`: the child that set it stops itself (SIGSTOP) right after the lease
check of its next append — between the check and the PUT of step two's success."""

from __future__ import annotations

import os

import little_workflow as lw

PAUSE_AT_NEXT_CHECK: list[bool] = []


def two() -> str:
    host = os.environ.get("LW_FOREIGN_HOST", "taker")
    with open(os.environ["LW_FOREIGN_LEDGER"], "a") as f:
        f.write(host + "\n")
    if os.environ.get("LW_PAUSE_BEFORE_PUT"):
        PAUSE_AT_NEXT_CHECK.append(True)
    return f"two from {host}"


@lw.workflow(id="failover")
async def failover(ctx: lw.RunContext, _: object) -> list:
    one = await ctx.step("one", lambda: 1)
    return [one, await ctx.step("two", two)]
