"""LangGraph's graph-level scenarios (after libs/langgraph/tests: interrupt and resume,
Send fan-out, time travel, subgraphs) on WorldCheckpointSaver over every kind of World,
each checked against the same scenario on LangGraph's own InMemorySaver: what the graph
returns, and its whole state history (values, next nodes, source, step, pending
interrupts, the parent links and, for subgraphs, their own state) must be the same."""

from __future__ import annotations

import operator
from typing import Annotated, Any, Callable, TypedDict

import pytest

pytest.importorskip("langgraph")

from conftest import WorldMaker  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import Command, Send, interrupt  # noqa: E402

from little_workflow.ext.langgraph import WorldCheckpointSaver  # noqa: E402

KINDS = ["local_world", "memory", "local-file", "s3"]


class Notes(TypedDict, total=False):
    topic: str
    notes: Annotated[list[str], operator.add]


def cfg(thread: str, **extra: Any) -> Any:
    return {"configurable": {"thread_id": thread, **extra}}


def history(graph: Any, config: Any) -> list[Any]:
    """A thread's history without its checkpoint ids (which differ from saver to saver):
    each checkpoint's parent as its position in the history instead."""
    snaps = list(graph.get_state_history(config))
    position = {s.config["configurable"]["checkpoint_id"]: i for i, s in enumerate(snaps)}
    out = []
    for s in snaps:
        parent = s.parent_config["configurable"]["checkpoint_id"] if s.parent_config else None
        out.append((s.values, s.next, s.metadata.get("source"), s.metadata.get("step"),
                    [i.value for i in s.interrupts], position.get(parent) if parent else None))
    return out


def both(scenario: Callable[[Any], Any], kind: str, tmp_path: Any, request: Any) -> None:
    expected = scenario(InMemorySaver())
    with WorldMaker(kind, tmp_path, request)() as world:
        got = scenario(WorldCheckpointSaver(world))
    assert got == expected


# --- interrupt and resume ---------------------------------------------------------------

def interrupt_and_resume(saver: Any) -> Any:
    def draft(state: Notes) -> Notes:
        return {"notes": [f"draft on {state['topic']}"]}

    def review(state: Notes) -> Notes:
        verdict = interrupt({"question": "publish?", "notes": state["notes"]})
        return {"notes": [f"review: {verdict}"]}

    def publish(state: Notes) -> Notes:
        return {"notes": ["published"]}

    g = StateGraph(Notes)
    for name, fn in (("draft", draft), ("review", review), ("publish", publish)):
        g.add_node(name, fn)
    g.add_edge(START, "draft")
    g.add_edge("draft", "review")
    g.add_edge("review", "publish")
    g.add_edge("publish", END)
    graph = g.compile(checkpointer=saver, interrupt_before=["publish"])
    config = cfg("hitl")
    first = graph.invoke({"topic": "seals"}, config)
    waiting = graph.get_state(config)
    second = graph.invoke(Command(resume="yes"), config)  # stops before publish
    before_publish = graph.get_state(config).next
    third = graph.invoke(None, config)
    return (first["__interrupt__"][0].value, waiting.next, [i.value for i in waiting.interrupts],
            second, before_publish, third, history(graph, config))


@pytest.mark.parametrize("kind", KINDS)
def test_interrupt_and_resume_then_a_static_breakpoint(kind: str, tmp_path: Any, request: Any) -> None:
    both(interrupt_and_resume, kind, tmp_path, request)


# --- Send fan-out ---------------------------------------------------------------------

class Fan(TypedDict, total=False):
    items: list[int]
    squares: Annotated[list[int], operator.add]
    total: int


def send_fan_out(saver: Any) -> Any:
    def plan(state: Fan) -> Fan:
        return {}

    def square(item: int) -> Fan:
        return {"squares": [item * item]}

    def reduce(state: Fan) -> Fan:
        return {"total": sum(state["squares"])}

    g = StateGraph(Fan)
    g.add_node("plan", plan)
    g.add_node("square", square)  # type: ignore[arg-type]
    g.add_node("reduce", reduce)
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", lambda s: [Send("square", i) for i in s["items"]], ["square"])
    g.add_edge("square", "reduce")
    g.add_edge("reduce", END)
    graph = g.compile(checkpointer=saver)
    out = graph.invoke({"items": [1, 2, 3, 4, 5]}, cfg("fan"))
    # A second run on the same thread fans out again from the stored state.
    again = graph.invoke({"items": [6, 7]}, cfg("fan"))
    return (sorted(out["squares"]), out["total"], sorted(again["squares"]), again["total"],
            [(sorted(v.get("squares", [])), n, src, step) for v, n, src, step, _, _ in history(graph, cfg("fan"))])


@pytest.mark.parametrize("kind", KINDS)
def test_send_fan_out_and_a_second_run_on_the_thread(kind: str, tmp_path: Any, request: Any) -> None:
    both(send_fan_out, kind, tmp_path, request)


# --- time travel ----------------------------------------------------------------------

def chain(saver: Any) -> Any:
    g = StateGraph(Notes)
    for name in ("a", "b", "c"):
        g.add_node(name, lambda s, name=name: {"notes": [f"{name}({len(s.get('notes', []))})"]})
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", "c")
    g.add_edge("c", END)
    return g.compile(checkpointer=saver)


def time_travel(saver: Any) -> Any:
    graph = chain(saver)
    config = cfg("travel")
    done = graph.invoke({"topic": "t"}, config)
    snaps = list(graph.get_state_history(config))
    before_b = next(s for s in snaps if s.next == ("b",))
    # Replay: from a past checkpoint, the nodes after it run again (a new branch).
    replayed = graph.invoke(None, before_b.config)
    # Fork: a changed past state, then run on from the fork.
    forked = graph.update_state(before_b.config, {"notes": ["edited"]})
    fork_state = graph.get_state(forked)
    from_fork = graph.invoke(None, forked)
    # update_state as a node: as if "b" had written this, so only "c" runs next.
    as_b = graph.update_state(before_b.config, {"notes": ["b by hand"]}, as_node="b")
    as_b_next = graph.get_state(as_b).next
    from_as_b = graph.invoke(None, as_b)
    past = graph.get_state(before_b.config)
    return (done, replayed, fork_state.values, fork_state.next, from_fork, as_b_next, from_as_b,
            past.values, past.next, history(graph, config))


@pytest.mark.parametrize("kind", KINDS)
def test_time_travel_replay_fork_and_update_as_node(kind: str, tmp_path: Any, request: Any) -> None:
    both(time_travel, kind, tmp_path, request)


# --- subgraphs ------------------------------------------------------------------------

def subgraphs(saver: Any) -> Any:
    inner = StateGraph(Notes)
    inner.add_node("look", lambda s: {"notes": ["looked"]})
    inner.add_node("ask", lambda s: {"notes": [f"answer: {interrupt('which?')}"]})
    inner.add_edge(START, "look")
    inner.add_edge("look", "ask")
    inner.add_edge("ask", END)
    outer = StateGraph(Notes)
    outer.add_node("start", lambda s: {"notes": ["started"]})
    outer.add_node("research", inner.compile())
    outer.add_node("finish", lambda s: {"notes": ["finished"]})
    outer.add_edge(START, "start")
    outer.add_edge("start", "research")
    outer.add_edge("research", "finish")
    outer.add_edge("finish", END)
    graph = outer.compile(checkpointer=saver)
    config = cfg("nested")
    first = graph.invoke({"topic": "seals"}, config)
    state = graph.get_state(config, subgraphs=True)
    [task] = state.tasks
    sub = task.state
    sub_history = [(s.values, s.next) for s in graph.get_state_history(sub.config)]
    done = graph.invoke(Command(resume="the grey one"), config)
    return (first["__interrupt__"][0].value, state.next, task.name, sub.values, sub.next,
            [i.value for i in sub.interrupts], sub_history, done, history(graph, config))


@pytest.mark.parametrize("kind", KINDS)
def test_subgraph_state_history_and_resume(kind: str, tmp_path: Any, request: Any) -> None:
    both(subgraphs, kind, tmp_path, request)
