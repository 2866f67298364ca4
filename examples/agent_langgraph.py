"""A tool-using LangGraph agent checkpointed in a World by WorldCheckpointSaver: the
process is SIGKILLed inside a tool call, a fresh process resumes the thread from its last
checkpoint, and no node that finished runs again.

Offline: the "model" node is scripted (what an LLM would decide). Needs the `langgraph`
extra. Run: python examples/agent_langgraph.py [DATA_DIR]
"""

from __future__ import annotations

import operator
import os
import signal
import subprocess
import sys
import tempfile
from typing import Annotated, TypedDict

from langgraph.graph import END, START, StateGraph

import little_workflow as lw
from little_workflow.ext.langgraph import WorldCheckpointSaver

LEDGER = os.environ.get("AGENT_LEDGER", os.devnull)
TOOLS = {
    "lookup_order": lambda arg: f"order {arg} is a kettle",
    "check_stock": lambda arg: f"{arg}s are back in stock on Friday",
}


class State(TypedDict, total=False):
    question: str
    results: Annotated[list[str], operator.add]
    next_call: tuple[str, str] | None
    answer: str


def record(call: str) -> int:
    with open(LEDGER, "a") as f:
        f.write(call + "\n")
    with open(LEDGER) as f:
        return sum(1 for line in f if line.strip() == call)


def model(state: State) -> State:
    done = state.get("results", [])
    record(f"model turn {len(done) + 1}")
    if len(done) == 0:
        return {"next_call": ("lookup_order", "A-17")}
    if len(done) == 1:
        return {"next_call": ("check_stock", "kettle")}
    return {"next_call": None, "answer": f"Your {done[0]}; {done[1]}."}


def tools(state: State) -> State:
    name, arg = state["next_call"]
    if record(f"tool {name}") == 1 and name == "check_stock" and os.environ.get("KILL_IN_TOOL"):
        os.kill(os.getpid(), signal.SIGKILL)  # the crash: mid tool call
    return {"results": [TOOLS[name](arg)]}


def build() -> StateGraph:
    g = StateGraph(State)
    g.add_node("model", model)
    g.add_node("tools", tools)
    g.add_edge(START, "model")
    g.add_conditional_edges("model", lambda s: "tools" if s.get("next_call") else END)
    g.add_edge("tools", "model")
    return g


def child(data_dir: str, resume: bool) -> None:
    with lw.local_world(data_dir) as world:
        graph = build().compile(checkpointer=WorldCheckpointSaver(world))
        config = {"configurable": {"thread_id": "support-1"}}
        # A fresh start takes the question; a resume passes None: LangGraph carries on from
        # the thread's last checkpoint. durability="sync": each step's checkpoint is stored
        # before the next step starts (LangGraph's default, "async", stores it meanwhile,
        # so a crash can lose the last steps).
        out = graph.invoke(None if resume else {"question": "Where is my kettle?"}, config,
                           durability="sync")
        print("answer:", out["answer"])


def run_in_child(data_dir: str, ledger: str, *, kill: bool, resume: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "AGENT_LEDGER": ledger, "KILL_IN_TOOL": "1" if kill else ""}
    return subprocess.run([sys.executable, __file__, "--child", data_dir, "resume" if resume else "start"],
                          env=env, capture_output=True, text=True)


def main(data: str) -> None:
    ledger, world_dir = os.path.join(data, "calls.log"), os.path.join(data, "world")
    open(ledger, "w").close()
    killed = run_in_child(world_dir, ledger, kill=True, resume=False)
    print("first process:", "killed by SIGKILL" if killed.returncode == -signal.SIGKILL
          else f"exit {killed.returncode}")
    with open(ledger) as f:
        before = [line.strip() for line in f]
    print("calls before the crash:", before)
    resumed = run_in_child(world_dir, ledger, kill=False, resume=True)
    print(resumed.stdout.strip() or resumed.stderr)
    with open(ledger) as f:
        after = [line.strip() for line in f][len(before):]
    print("calls after resuming:", after)
    again = sorted(set(before) & set(after) - {"tool check_stock"})
    print("finished nodes run again:", ", ".join(again) if again else "none")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2], resume=sys.argv[3] == "resume")
    else:
        data = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="agent-")
        os.makedirs(data, exist_ok=True)
        main(data)
