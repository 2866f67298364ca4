"""What a durable agent run costs in fsyncs on local_world (issue #29, P9): one synced
SQLite commit per durable unit (each model request, each tool call) plus the run's
creation and its end — no directory or index-file fsyncs beside them — and every unit
acknowledged to the agent only after the WAL fsync that made it durable (DESIGN §10).

The child runs a Pydantic AI agent (FunctionModel, no network) in a workflow twice: one
warm-up run, then the traced one between two raw markers. strace sees every fsync of the
process; the markers and each acknowledgement are raw writes to stdout."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import textwrap

import pytest
from checkout import SRC
from external_tools import require_tool

pytest.importorskip("pydantic_ai")

TURNS = 4

CHILD = textwrap.dedent("""
    import asyncio, os, sys
    import little_workflow as lw
    from little_workflow.ext.pydantic_ai import LittleWorkflowDurability
    from pydantic_ai import Agent, Tool
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    TURNS = int(sys.argv[2])

    def model_fn(messages, info):
        done = sum(1 for m in messages for p in m.parts if isinstance(p, ToolReturnPart))
        if done >= TURNS:
            return ModelResponse(parts=[TextPart(f"done after {done}")])
        return ModelResponse(parts=[ToolCallPart("add", {"a": done, "b": 1}, tool_call_id=f"t{done}")])

    def add(a: int, b: int) -> int:
        os.write(1, f"TOOL {a}\\n".encode())
        return a + b

    agent = Agent(FunctionModel(model_fn), name="fsyncs", capabilities=[LittleWorkflowDurability()],
                  tools=[Tool(add)])

    @lw.workflow(id="agent-fsyncs")
    async def wf(ctx, input):
        return (await agent.run("go")).output

    world = lw.local_world(sys.argv[1])

    async def main():
        await lw.arun_workflow(wf, {}, world=world, run_id="run_warm")
        os.write(1, b"BEGIN\\n")
        result = await lw.arun_workflow(wf, {}, world=world, run_id="run_traced")
        os.write(1, b"END\\n")
        assert result.output == f"done after {TURNS}", result.output

    asyncio.run(main())
    units = [e.payload["stepPath"] for e in world.list_events("run_traced")
             if e.type == "step.succeeded"]
    print("UNITS", len(units), flush=True)
""")

LINE_RE = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(\w+)\((\d+)<([^>]*)>(.*)")


def test_an_agent_run_syncs_once_per_durable_unit_plus_its_creation_and_end(tmp_path):
    strace = require_tool("strace")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    trace = tmp_path / "trace.txt"
    data_dir = str(tmp_path / "data")
    r = subprocess.run(
        [strace, "-f", "-y", "-qq", "-s", "64", "-o", str(trace),
         "-e", "trace=write,pwrite64,fsync,fdatasync",
         sys.executable, str(script), data_dir, str(TURNS)],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=SRC), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    units = int(r.stdout.split("UNITS ")[1].split()[0])
    assert units == 2 * TURNS + 1  # every model request and every tool call is a durable unit

    wal = os.path.join(data_dir, "events", "events.db-wal")
    inside = False
    wal_syncs, other_syncs = 0, []
    wal_dirty = False
    syncs_before_tool: list[int] = []
    for line in trace.read_text().splitlines():
        m = LINE_RE.match(line)
        if not m:
            continue
        name, fd, path, rest = m.groups()
        if name == "write" and fd == "1":
            if '"BEGIN\\n"' in rest:
                inside = True
            elif '"END\\n"' in rest:
                inside = False
            elif '"TOOL ' in rest and inside:
                syncs_before_tool.append(wal_syncs)
            continue
        if not inside:
            continue
        if name in ("write", "pwrite64") and path == wal:
            wal_dirty = True
        elif name in ("fsync", "fdatasync"):
            if path == wal:
                wal_syncs += 1
                wal_dirty = False
            else:
                other_syncs.append(path)
    # Between two tool calls: the earlier one's success and the model response that asked
    # for the next one, each synced before the agent went on.
    assert [b - a for a, b in itertools.pairwise(syncs_before_tool)] == [2] * (TURNS - 1)
    assert not wal_dirty, "the run returned before its last commit was synced"
    # No directory or index-file fsync beside the log's own commits.
    assert other_syncs == []
    # One synced commit per durable unit, one for run.created, one for run.completed.
    assert wal_syncs == units + 2, (wal_syncs, units)
