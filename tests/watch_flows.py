"""Workflows for the handle and stream tests: imported by the test process and by the
worker / writer subprocesses (`little worker watch_flows`, tests/stream_writer_child.py)."""

from __future__ import annotations

import os
import time
from decimal import Decimal
from typing import Any

from pydantic import BaseModel

import little_workflow as lw


class Quote(BaseModel):
    item: str
    price: Decimal


def wait_for_file(path: str) -> str:
    """Blocks until `path` exists: the test decides when the step may finish."""
    while not os.path.exists(path):
        time.sleep(0.02)
    return path


@lw.workflow(id="priced")
async def priced(ctx: lw.RunContext, input: dict[str, Any]) -> Quote:
    await ctx.step("gate", wait_for_file, input["gate"])
    price = await ctx.step("price", lambda: "4.20")
    return Quote(item=input["item"], price=Decimal(price))


@lw.workflow(id="greet")
async def greet(ctx: lw.RunContext, input: dict[str, str]) -> dict[str, str]:
    return {"text": await ctx.step("hello", lambda: f"hello {input['name']}")}


def touch(path: str) -> None:
    with open(path, "a", encoding="utf-8"):
        pass


def note(ledger: str, line: str) -> str:
    """Appends one line to a ledger file (fsynced): which steps really ran, across kills."""
    with open(ledger, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())
    return line


@lw.workflow(id="tokens")
async def tokens(ctx: lw.RunContext, input: dict[str, Any]) -> dict[str, Any]:
    """Writes `n` values to the stream "tokens" from workflow code, one step between each;
    the step of index `input["hold"]` blocks until the gate file exists (where a test kills
    the process)."""
    for i in range(input["n"]):
        await ctx.write_stream("tokens", {"i": i, "text": f"token-{i}"})
        if i == input.get("hold"):
            await ctx.step(f"work/{i}", wait_for_file, input["gate"])
        else:
            await ctx.step(f"work/{i}", note, input["ledger"], f"work/{i}")
    await ctx.close_stream("tokens")
    return {"written": input["n"]}
