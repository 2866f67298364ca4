"""LangGraph side: a chain of K nodes, checkpointed per node (SqliteSaver or InMemorySaver)."""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
from typing import TypedDict


class State(TypedDict):
    n: int


def per_node_us(saver_kind: str, k: int) -> float:
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(State)
    prev = START
    for i in range(k):
        graph.add_node(f"n{i}", lambda s: {"n": s["n"] + 1})
        graph.add_edge(prev, f"n{i}")
        prev = f"n{i}"
    graph.add_edge(prev, END)
    if saver_kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        path = os.path.join(tempfile.mkdtemp(prefix="lwb-lg-"), "lg.sqlite")
        # sqlite3 defaults: rollback journal, synchronous=FULL; one commit per checkpoint.
        saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    else:
        from langgraph.checkpoint.memory import InMemorySaver

        saver = InMemorySaver()
    app = graph.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "bench"}, "recursion_limit": k + 10}
    t = time.perf_counter()
    out = app.invoke({"n": 0}, config)
    dt = time.perf_counter() - t
    assert out["n"] == k
    return dt / k * 1e6


def loop_per_step_us(k: int) -> float:
    """The same k steps as one node looping k times (InMemorySaver, one checkpoint per
    super-step): LangGraph's cheaper shape for a long run, as a second reference."""
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(State)
    graph.add_node("step", lambda s: {"n": s["n"] + 1})
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", lambda s: "step" if s["n"] < k else END)
    app = graph.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "bench-loop"}, "recursion_limit": k + 10}
    t = time.perf_counter()
    out = app.invoke({"n": 0}, config)
    dt = time.perf_counter() - t
    assert out["n"] == k
    return dt / k * 1e6
