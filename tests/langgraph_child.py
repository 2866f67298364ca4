"""A LangGraph graph run by a child process over a local_world (tests/test_ext_langgraph.py).

python langgraph_child.py DATA_DIR LOG_FILE THREAD start|resume|resume-kill|continue
prints the graph's result (or its interrupt) as one JSON line. Every node appends its
name to LOG_FILE, so the parent sees which nodes ran in which process.

python langgraph_child.py DIR LOG THREAD async-kill|async-continue KIND SECONDS [CALL [SLOW]]
runs a chain of eight nodes n0…n7 (each working SECONDS, a stand-in for a model call) with
durability="async" over KIND (local_world or local-file) in DIR, through CALL (invoke, the
default; ainvoke; astream), each World call that writes taking SLOW seconds more (a
stand-in for an object store's round trip): async-kill SIGKILLs itself inside n5,
async-continue resumes with no input and prints the final list (or the error).
Nodes append their names to LOG, and every checkpoint the saver acknowledged (its put
returned) to LOG.acks, so the parent knows what must have survived.

python langgraph_child.py DATA_DIR - THREAD prune LAYOUT K prunes THREAD to its newest
three checkpoints and SIGKILLs itself just before its K-th World call that writes
(tests/test_ext_langgraph_storage.py): a crash at a known moment of the prune.
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
import signal
import sys
import time
from typing import Annotated, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import little_workflow as lw
from little_workflow.ext.langgraph import WorldCheckpointSaver


class State(TypedDict, total=False):
    topic: str
    notes: Annotated[list[str], operator.add]
    answer: str


class Review(TypedDict, total=False):
    # The subgraphs' own schema: they share topic and answer with the parent, not notes.
    topic: str
    answer: str


def logged(name: str):
    def note() -> None:
        with open(LOG, "a") as f:
            f.write(name + "\n")
    return note


def research(state: State) -> State:
    logged("research")()
    return {"notes": [f"researched {state['topic']}"]}


def ask_human(state: Review) -> Review:
    logged("ask_human")()
    reply = interrupt({"question": f"approve {state['topic']}?"})
    return {"answer": reply}


def write(state: State) -> State:
    logged("write")()
    if MODE == "resume-kill":
        os.kill(os.getpid(), signal.SIGKILL)  # a crash mid-node: nothing of it is committed
    return {"notes": [f"wrote about {state['topic']}"]}


def build():
    # Interrupt two subgraphs deep: namespaces like "outer:<id>|inner:<id>".
    inner = StateGraph(Review)
    inner.add_node("ask_human", ask_human)
    inner.add_edge(START, "ask_human")
    inner.add_edge("ask_human", END)
    middle = StateGraph(Review)
    middle.add_node("inner", inner.compile())
    middle.add_edge(START, "inner")
    middle.add_edge("inner", END)
    top = StateGraph(State)
    top.add_node("research", research)
    top.add_node("review", middle.compile())
    top.add_node("write", write)
    top.add_edge(START, "research")
    top.add_edge("research", "review")
    top.add_edge("review", "write")
    top.add_edge("write", END)
    return top


class Chain(TypedDict, total=False):
    done: Annotated[list[str], operator.add]


class AckingSaver(WorldCheckpointSaver):
    """Notes each checkpoint once it is acknowledged (put returned), in LOG.acks."""

    def put(self, config, checkpoint, metadata, new_versions):  # type: ignore[no-untyped-def]
        out = super().put(config, checkpoint, metadata, new_versions)
        fd = os.open(LOG + ".acks", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:  # one write() each: whole lines, and a SIGKILL keeps what was written
            os.write(fd, f"{out['configurable']['checkpoint_id']} {metadata.get('step')}\n".encode())
        finally:
            os.close(fd)
        return out


def chain_node(i: int, seconds: float):
    def run(state: Chain) -> Chain:
        logged(f"n{i}")()
        time.sleep(seconds)
        if i == 5 and MODE == "async-kill":
            os.kill(os.getpid(), signal.SIGKILL)
        return {"done": [f"n{i}"]}
    return run


def call_graph(graph, value, config, how: str):  # type: ignore[no-untyped-def]
    if how == "invoke":
        return graph.invoke(value, config, durability="async")
    if how == "ainvoke":
        return asyncio.run(graph.ainvoke(value, config, durability="async"))

    async def streamed():  # type: ignore[no-untyped-def]
        states = [s async for s in graph.astream(value, config, durability="async", stream_mode="values")]
        return states[-1] if states else None
    return asyncio.run(streamed())


def run_chain(data_dir: str, thread: str, kind: str, seconds: float, how: str, slow: float) -> None:
    g = StateGraph(Chain)
    previous = START
    for i in range(8):
        g.add_node(f"n{i}", chain_node(i, seconds))
        g.add_edge(previous, f"n{i}")
        previous = f"n{i}"
    g.add_edge(previous, END)
    world = lw.local_world(data_dir) if kind == "local_world" else lw.virtual_world("file://" + data_dir)
    if slow:
        def slowly(name: str) -> None:
            if name in WRITES:
                time.sleep(slow)
        world = lw.tracing_world(world, slowly)
    graph = g.compile(checkpointer=AckingSaver(world))
    config = {"configurable": {"thread_id": thread}}
    if MODE == "async-kill":
        call_graph(graph, {"done": []}, config, how)
        return
    try:
        out = call_graph(graph, None, config, how)
        print(json.dumps({"done": out["done"], "error": None}))
    except Exception as e:  # the parent checks which one
        print(json.dumps({"done": None, "error": type(e).__name__}))


WRITES = {"append_event", "write_file", "create_file", "remove_file", "remove_dir",
          "write_document", "create_document", "delete_run", "write_artifact", "sync"}


def prune(data_dir: str, thread: str, layout: str, kill_at: int) -> None:
    made = [0]

    def on_call(name: str) -> None:
        if name in WRITES:
            made[0] += 1
            if made[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    world = lw.tracing_world(lw.local_world(data_dir), on_call)
    WorldCheckpointSaver(world, layout=layout).prune_old([thread], keep_last=3)
    print(json.dumps({"writes": made[0]}))


def main() -> None:
    data_dir, thread = sys.argv[1], sys.argv[3]
    if MODE == "prune":
        prune(data_dir, thread, sys.argv[5], int(sys.argv[6]))
        return
    if MODE.startswith("async-"):
        run_chain(data_dir, thread, sys.argv[5], float(sys.argv[6]),
                  sys.argv[7] if len(sys.argv) > 7 else "invoke",
                  float(sys.argv[8]) if len(sys.argv) > 8 else 0.0)
        return
    world = lw.local_world(data_dir)
    graph = build().compile(checkpointer=WorldCheckpointSaver(world))
    config = {"configurable": {"thread_id": thread}}
    if MODE == "start":
        out = graph.invoke({"topic": "otters"}, config, durability=DURABILITY)
    elif MODE in ("resume", "resume-kill"):
        out = graph.invoke(Command(resume="yes"), config, durability=DURABILITY)
    else:  # continue after a crash: no new input, LangGraph resumes from the checkpoint
        out = graph.invoke(None, config, durability=DURABILITY)
    interrupts = [i.value for i in out.get("__interrupt__", [])]
    print(json.dumps({"notes": out.get("notes"), "answer": out.get("answer"),
                      "interrupts": interrupts}))


LOG = sys.argv[2] if len(sys.argv) > 2 else os.devnull
MODE = sys.argv[4] if len(sys.argv) > 4 else "start"
# Each step's checkpoint stored before the next step starts: a SIGKILL loses no finished step.
DURABILITY = "sync"

if __name__ == "__main__":
    main()
