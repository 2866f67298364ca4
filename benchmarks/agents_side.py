"""Durable agents, side by side (P9, P10).

P9 — Pydantic AI: what a durability capability adds to one agent run. The agent makes
TURNS model requests that each call one function tool, then answers (FunctionModel, no
network). Each side lives in a fresh process of its own, built once (World or DBOS
launched), warmed by one untimed agent run, then asked for one timed agent run per line
on stdin, so a driver can interleave the sides run by run (BENCHMARKS.md P9):

    python benchmarks/agents_side.py p9-serve SIDE TURNS

SIDE is `plain` (the agent without durability: the baseline), `floor` (Pydantic AI's
durable machinery with an engine that stores nothing: `LittleWorkflowDurability`'s
operations and JSON codec, each unit's body called directly, no workflow — what any
engine pays before its own work), `memory` / `local_world`
(`LittleWorkflowDurability` in a workflow, `await lw.arun_workflow(...)`), the same with
`-inline` (every tool marked `metadata={"little_workflow": False}`: run inline, as DBOS runs
plain function tools), or `dbos-wal` / `dbos-rollback` (`DBOSDurability` in a
`@DBOS.workflow`, SQLite WAL + synchronous=FULL, or as shipped). Every side is timed
the same way, from the outside: the awaited call that starts the run until it returns
(the workflow's creation and end included). Each answer is one JSON line:
`{"seconds", "cpu", "steps", "names"}` — wall and process CPU time of the run, and the
durable steps the engine recorded for it (ours: step and recorded-value records; DBOS:
its operation outputs), counted after the clock stopped.

P10 — LangGraph: per super-step cost of a checkpointer, one node looping K times (one
checkpoint and one task's writes per super-step), `durability="sync"` (each checkpoint
stored before the next step: what surviving a crash needs).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter
from typing import Any, TypedDict

P9_SIDES = ("plain", "floor", "memory", "local_world", "memory-inline", "local_world-inline",
            "dbos-wal", "dbos-rollback")


def _agent(capabilities: list[Any], turns: int, *, inline_tools: bool = False) -> Any:
    from pydantic_ai import Agent, Tool
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    def model_fn(messages: list, info: Any) -> Any:
        done = sum(1 for m in messages for p in m.parts if isinstance(p, ToolReturnPart))
        if done >= turns:
            return ModelResponse(parts=[TextPart(f"done after {done} tool calls")])
        return ModelResponse(parts=[ToolCallPart("add", {"a": done, "b": 1}, tool_call_id=f"t{done}")])

    def add(a: int, b: int) -> int:
        return a + b

    metadata = {"little_workflow": False} if inline_tools else None
    return Agent(FunctionModel(model_fn), name="bench", capabilities=capabilities,
                 tools=[Tool(add, metadata=metadata)])


class _LittleWorkflowSide:
    def __init__(self, kind: str, turns: int, inline_tools: bool) -> None:
        import little_workflow as lw
        from benchmarks.common import make_world
        from little_workflow.ext.pydantic_ai import LittleWorkflowDurability

        self.lw = lw
        self.world = make_world(kind)
        agent = _agent([LittleWorkflowDurability()], turns, inline_tools=inline_tools)

        @lw.workflow(id="bench-agent")
        async def wf(ctx: lw.RunContext, input: Any) -> str:
            return (await agent.run("go")).output

        self.wf = wf
        self.runs = 0

    async def run(self) -> str:
        self.runs += 1
        self.run_id = f"run_p9_{self.runs}"
        result = await self.lw.arun_workflow(self.wf, {}, world=self.world, run_id=self.run_id)
        return str(result.output)

    def steps(self) -> Counter:
        """Durable records of the last run: each step's success (`.../model` or
        `.../<tool>/<call id>`) and each recorded value, by kind."""
        kinds: Counter = Counter()
        for e in self.world.list_events(self.run_id):
            if e.type == "step.succeeded":
                unit = e.payload["stepPath"].rsplit("/", 2)
                kinds["model" if unit[-1].startswith("model") else "tool"] += 1
            elif e.type == "value.recorded":
                kinds["value.recorded"] += 1
        return kinds


class _DbosSide:
    def __init__(self, mode: str, turns: int) -> None:
        from dbos import DBOS
        from pydantic_ai.durable_exec.dbos import DBOSDurability

        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from dbos_side import setup

        setup(mode, tempfile.mkdtemp(prefix="lwb-dbos-agent-"))
        agent = _agent([DBOSDurability()], turns)

        @DBOS.workflow()
        async def wf() -> str:
            return (await agent.run("go")).output

        self.DBOS = DBOS
        self.wf = wf
        self.runs = 0
        DBOS.launch()

    async def run(self) -> str:
        from dbos import SetWorkflowID

        self.runs += 1
        self.workflow_id = f"p9-{self.runs}"
        with SetWorkflowID(self.workflow_id):
            return str(await self.wf())

    def steps(self) -> Counter:
        """DBOS's recorded operation outputs of the last run, by kind."""
        kinds: Counter = Counter()
        for step in self.DBOS.list_workflow_steps(self.workflow_id):
            name = str(step["function_name"])
            kinds["model" if "request" in name or "model" in name else name.rsplit(".", 1)[-1]] += 1
        return kinds


class _FloorSide:
    """The capability as if inside a durable container, each unit run directly: Pydantic
    AI's own cost of durable execution (operation binding, the JSON codec's dump and load,
    the wrapped toolsets), without any engine's."""

    def __init__(self, turns: int) -> None:
        from little_workflow.ext.pydantic_ai import LittleWorkflowDurability

        class NoEngine(LittleWorkflowDurability):
            @property
            def in_durable_context(self) -> bool:
                return True

            def get_durable_operation_backend(self) -> Any:
                backend = super().get_durable_operation_backend()

                async def execute(*, operation_id: Any, name: str, body: Any,
                                  cache_key: Any, config: Any) -> Any:
                    return await body()

                backend.execute = execute  # type: ignore[method-assign]
                return backend

        self.agent = _agent([NoEngine()], turns)

    async def run(self) -> str:
        return str((await self.agent.run("go")).output)

    def steps(self) -> Counter:
        return Counter()


class _PlainSide:
    def __init__(self, turns: int) -> None:
        self.agent = _agent([], turns)

    async def run(self) -> str:
        return str((await self.agent.run("go")).output)

    def steps(self) -> Counter:
        return Counter()


def p9_serve(side: str, turns: int) -> None:
    """One side of P9 in this process: one timed agent run per stdin line (see above)."""
    if side == "plain":
        runner: Any = _PlainSide(turns)
    elif side == "floor":
        runner = _FloorSide(turns)
    elif side.startswith("dbos-"):
        runner = _DbosSide(side.removeprefix("dbos-"), turns)
    else:
        kind, _, inline = side.partition("-")
        runner = _LittleWorkflowSide(kind, turns, inline_tools=inline == "inline")
    expected = f"done after {turns} tool calls"
    with asyncio.Runner() as loop:
        for line in sys.stdin:
            if line.strip() == "quit":
                break
            t, cpu = time.perf_counter(), time.process_time()
            output = loop.run(runner.run())
            seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
            if output != expected:
                raise SystemExit(f"P9 {side}: the agent answered {output!r}, not {expected!r}")
            steps = runner.steps()
            print(json.dumps({"seconds": seconds, "cpu": cpu, "steps": sum(steps.values()),
                              "names": dict(steps)}), flush=True)


class Count(TypedDict):
    n: int


def checkpointer_per_superstep_us(kind: str, k: int) -> float:
    """One node looping k times under a checkpointer: µs per super-step."""
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(Count)
    graph.add_node("step", lambda s: {"n": s["n"] + 1})
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", lambda s: "step" if s["n"] < k else END)
    if kind == "InMemorySaver":
        from langgraph.checkpoint.memory import InMemorySaver

        saver: Any = InMemorySaver()
    elif kind == "SqliteSaver":
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        path = os.path.join(tempfile.mkdtemp(prefix="lwb-lg-"), "lg.sqlite")
        saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    else:
        from benchmarks.common import make_world
        from little_workflow.ext.langgraph import WorldCheckpointSaver

        saver = WorldCheckpointSaver(make_world(kind))
    app = graph.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "bench"}, "recursion_limit": k + 10}
    t = time.perf_counter()
    out = app.invoke({"n": 0}, config, durability="sync")
    dt = time.perf_counter() - t
    assert out["n"] == k
    return dt / k * 1e6


if __name__ == "__main__":
    if sys.argv[1] == "p9-serve":
        p9_serve(sys.argv[2], int(sys.argv[3]))
