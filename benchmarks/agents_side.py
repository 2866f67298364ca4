"""Durable agents, side by side (P9, P10).

P9 — Pydantic AI: the cost a durability capability adds per durable unit (a model request
or a tool call). One agent run of TURNS turns (each a FunctionModel request that calls one
tool, then a final answer: 2·TURNS + 1 units), timed inside a durable workflow and, as the
baseline, as a plain run of the same agent without the capability; the difference divided
by the units. little-workflow: `LittleWorkflowDurability` in a workflow on a World;
DBOS: `DBOSDurability` in a `@DBOS.workflow` (SQLite), in its own process:

    python benchmarks/agents_side.py dbos MODE TURNS OUT.json

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
from typing import Any, TypedDict


def _agent(capabilities: list[Any]) -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    def model_fn(messages: list, info: Any) -> Any:
        done = sum(1 for m in messages for p in m.parts if isinstance(p, ToolReturnPart))
        if done >= TURNS:
            return ModelResponse(parts=[TextPart(f"done after {done} tool calls")])
        return ModelResponse(parts=[ToolCallPart("add", {"a": done, "b": 1}, tool_call_id=f"t{done}")])

    agent = Agent(FunctionModel(model_fn), name="bench", capabilities=capabilities)

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        return a + b

    return agent


TURNS = int(os.environ.get("LW_BENCH_AGENT_TURNS", "40"))


def units(turns: int) -> int:
    return 2 * turns + 1


def plain_agent_seconds(turns: int) -> float:
    global TURNS
    TURNS = turns
    agent = _agent([])

    async def go() -> float:
        t = time.perf_counter()
        await agent.run("go")
        return time.perf_counter() - t

    return asyncio.run(go())


def lw_agent_seconds(world: Any, turns: int) -> float:
    import little_workflow as lw
    from little_workflow.ext.pydantic_ai import LittleWorkflowDurability

    global TURNS
    TURNS = turns
    agent = _agent([LittleWorkflowDurability()])
    took: list[float] = []

    @lw.workflow(id="bench-agent")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        t = time.perf_counter()
        result = await agent.run("go")
        took.append(time.perf_counter() - t)
        return result.output

    lw.run_workflow(wf, {}, world=world)
    return took[0]


def dbos_agent_seconds(mode: str, turns: int) -> float:
    from dbos import DBOS
    from pydantic_ai.durable_exec.dbos import DBOSDurability

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from dbos_side import setup

    global TURNS
    TURNS = turns
    setup(mode, tempfile.mkdtemp(prefix="lwb-dbos-agent-"))
    agent = _agent([DBOSDurability()])
    took: list[float] = []

    @DBOS.workflow()
    async def wf() -> str:
        t = time.perf_counter()
        result = await agent.run("go")
        took.append(time.perf_counter() - t)
        return result.output

    DBOS.launch()
    asyncio.run(wf())
    DBOS.destroy()
    return took[0]


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
    config = {"configurable": {"thread_id": "bench"}, "recursion_limit": k + 10}
    t = time.perf_counter()
    out = app.invoke({"n": 0}, config, durability="sync")
    dt = time.perf_counter() - t
    assert out["n"] == k
    return dt / k * 1e6


if __name__ == "__main__":
    if sys.argv[1] == "dbos":
        seconds = dbos_agent_seconds(sys.argv[2], int(sys.argv[3]))
        with open(sys.argv[4], "w") as f:
            json.dump({"seconds": seconds}, f)
