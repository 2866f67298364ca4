"""Workflows for the stale-cache tests, and a child process that acts on a World:

    python tests/stale_flows.py KIND DATA_DIR COMMAND ARGS...

KIND is `local_world` or `local-file`; COMMAND one of `run RUN_ID STEPS` (the waiter,
suspended), `simple RUN_ID N` (runs to the end), `start RUN_ID N` (start_workflow of
the simple flow), `send RUN_ID PAYLOAD [KEY]` and `gc`. Prints one JSON line.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import little_workflow as lw


def double(x: int) -> int:
    return 2 * x


@lw.workflow(id="stale-waiter")
async def waiter(ctx: lw.RunContext, input: dict) -> dict:
    total = 0
    for i in range(input["steps"]):
        total += await ctx.step(f"s{i}", double, i)
    got = await ctx.wait_for_event("wait", "go")
    return {"total": total, "got": got}


@lw.workflow(id="stale-simple")
async def simple(ctx: lw.RunContext, input: dict) -> dict:
    total = 0
    for i in range(input["n"]):
        total += await ctx.step(f"s{i}", double, i)
    return {"n": input["n"], "total": total}


def open_world(kind: str, data_dir: str) -> Any:
    if kind == "local_world":
        return lw.local_world(data_dir)
    from fsspec.implementations.local import LocalFileSystem

    return lw.virtual_world(LocalFileSystem(), data_dir)


def act(world: Any, command: str, args: list[str]) -> Any:
    if command == "run":
        r = lw.run_workflow(waiter, {"steps": int(args[1])}, world=world, run_id=args[0],
                            suspend=True)
        return {"status": r.status, "output": r.output}
    if command == "simple":
        r = lw.run_workflow(simple, {"n": int(args[1])}, world=world, run_id=args[0])
        return {"status": r.status, "output": r.output}
    if command == "start":
        lw.start_workflow(simple, {"n": int(args[1])}, world=world, run_id=args[0])
        return {"started": args[0]}
    if command == "send":
        key = args[2] if len(args) > 2 else None
        e = lw.send_event(world, args[0], "go", json.loads(args[1]), idempotency_key=key)
        return {"sequence": e.sequence}
    if command == "gc":
        return {"deleted": lw.gc(world, older_than=0).run_ids}
    raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    kind, data_dir, command, *rest = sys.argv[1:]
    w = open_world(kind, data_dir)
    try:
        print(json.dumps(act(w, command, rest)))
    finally:
        w.close()
