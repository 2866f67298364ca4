"""LangGraph checkpoint storage, side by side with SqliteSaver (issue 29 item 1).

    python benchmarks/langgraph_storage.py [TURNS] [STEPS] [REPS]

1. Bytes on disk after TURNS (200) turns of a chat thread whose message list grows by a
   question and an answer each turn: the whole data dir of local_world and of a local-files
   virtual World (WorldCheckpointSaver), and SqliteSaver's database (with its -wal and
   -journal), every side closed first.
2. A cold `get_tuple` of the head of a STEPS (1,000) checkpoint thread: a fresh process
   opens the World (or the SQLite connection) and the saver, untimed, then times its first
   `get_tuple`; the median of REPS (7) processes per side, sides interleaved, in wall time
   and in the process's CPU time (steadier on a loaded machine).
"""

from __future__ import annotations

import importlib.util
import operator
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Annotated, Any, TypedDict


class Chat(TypedDict, total=False):
    messages: Annotated[list[str], operator.add]


class Count(TypedDict):
    n: int


def open_saver(kind: str, where: str) -> tuple[Any, Any]:
    """(saver, closer) for a side."""
    if kind == "SqliteSaver":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(os.path.join(where, "lg.sqlite"), check_same_thread=False)
        return SqliteSaver(conn), conn
    import little_workflow as lw
    from little_workflow.ext.langgraph import WorldCheckpointSaver

    world = lw.local_world(where) if kind == "local_world" else lw.virtual_world("file://" + where)
    return WorldCheckpointSaver(world), world


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def chat_bytes(kind: str, turns: int) -> int:
    from langgraph.graph import END, START, StateGraph

    g = StateGraph(Chat)
    g.add_node("answer", lambda s: {"messages": [f"answer {len(s['messages'])}: " + "lorem ipsum " * 25]})
    g.add_edge(START, "answer")
    g.add_edge("answer", END)
    where = tempfile.mkdtemp(prefix="lwb-lgs-")
    saver, closer = open_saver(kind, where)
    graph = g.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "chat"}}
    for turn in range(turns):
        graph.invoke({"messages": [f"question {turn}: " + "dolor sit amet " * 10]}, config, durability="sync")
    closer.close()
    return dir_bytes(where)


def build_long_thread(kind: str, steps: int) -> str:
    from langgraph.graph import END, START, StateGraph

    g = StateGraph(Count)
    g.add_node("step", lambda s: {"n": s["n"] + 1})
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] < steps else END)
    where = tempfile.mkdtemp(prefix="lwb-lgs-")
    saver, closer = open_saver(kind, where)
    config = {"configurable": {"thread_id": "long"}, "recursion_limit": steps + 10}
    g.compile(checkpointer=saver).invoke({"n": 0}, config, durability="sync")
    closer.close()
    return where


def cold_get_tuple_ms(kind: str, where: str) -> tuple[float, float]:
    """In a fresh process: the first get_tuple of the head, in ms (wall, CPU)."""
    # The child opens the little_workflow this process would import (found, not imported:
    # the child's import is part of what is timed).
    spec = importlib.util.find_spec("little_workflow")
    assert spec is not None and spec.origin is not None
    src = os.path.dirname(os.path.dirname(spec.origin))
    out = subprocess.run([sys.executable, __file__, "cold", kind, where], capture_output=True,
                         text=True, check=True, env={**os.environ, "PYTHONPATH": src})
    wall, cpu = out.stdout.split()
    return float(wall), float(cpu)


def _cold(kind: str, where: str) -> None:
    saver, closer = open_saver(kind, where)
    t, c = time.perf_counter(), time.process_time()
    got = saver.get_tuple({"configurable": {"thread_id": "long", "checkpoint_ns": ""}})
    took, cpu = time.perf_counter() - t, time.process_time() - c
    assert got is not None
    closer.close()
    print(f"{took * 1000:.3f} {cpu * 1000:.3f}")


def main() -> None:
    turns = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    sides = ("local_world", "local-file", "SqliteSaver")
    size = {kind: chat_bytes(kind, turns) for kind in sides}
    for kind in sides:
        print(f"{turns} turns, bytes on disk: {kind:12} {size[kind]:>12,}  "
              f"({size[kind] / size['SqliteSaver']:.3f}x SqliteSaver)")
    threads = {kind: build_long_thread(kind, steps) for kind in sides}
    cold: dict[str, list[tuple[float, float]]] = {kind: [] for kind in sides}
    for _ in range(reps):
        for kind in sides:
            cold[kind].append(cold_get_tuple_ms(kind, threads[kind]))
    base_wall = statistics.median(w for w, _ in cold["SqliteSaver"])
    base_cpu = statistics.median(c for _, c in cold["SqliteSaver"])
    for kind in sides:
        ms = statistics.median(w for w, _ in cold[kind])
        cpu = statistics.median(c for _, c in cold[kind])
        print(f"cold get_tuple, {steps}-checkpoint thread: {kind:12} {ms:7.2f} ms  "
              f"({ms / base_wall:.2f}x SqliteSaver), CPU {cpu:7.2f} ms ({cpu / base_cpu:.2f}x)")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "cold":
        _cold(sys.argv[2], sys.argv[3])
    else:
        main()
