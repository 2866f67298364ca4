"""WorldCheckpointSaver's storage: checkpoints that do not grow with the conversation
(each channel value stored once per version, lists stored by what they gained), reads that
do not scan every checkpoint, pruning that keeps what the newest checkpoints need, and
threads written by the first layout still read.

Every behaviour runs on both layouts ("files": one file per record, virtual Worlds;
"events": the thread's own log, local_world's default) over the backends that matter."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from datetime import timedelta
from typing import Annotated, Any, TypedDict

import pytest
from checkout import SRC

pytest.importorskip("langgraph")

from conftest import WorldMaker, private_memory  # noqa: E402
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.conformance.test_utils import (  # noqa: E402
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402
from langgraph.types import Command  # noqa: E402
from soak import SOAK  # noqa: E402

import little_workflow as lw  # noqa: E402
from little_workflow.ext.langgraph import WorldCheckpointSaver, thread_owner_run_id  # noqa: E402
from little_workflow.world.ids import canonical_json  # noqa: E402
from little_workflow.world.models import thaw  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
FIXTURE = os.path.join(TESTS, "fixtures", "langgraph_v1")
#: (backend, layout): both layouts on memory and local_world, files on local disk.
CASES = [("memory", "files"), ("memory", "events"), ("local_world", "events"),
         ("local_world", "files"), ("local-file", "files")]
IDS = [f"{k}-{lay}" for k, lay in CASES]


def saver(world: Any, layout: str | None = None) -> WorldCheckpointSaver:
    return WorldCheckpointSaver(world, layout=layout) if layout else WorldCheckpointSaver(world)


def files_under(world: Any, rel: str) -> dict[str, int]:
    info = world.file_info(rel)
    if info is None:
        return {}
    if info["type"] == "file":
        return {rel: info["size"]}
    out: dict[str, int] = {}
    for name in world.list_dir(rel):
        out.update(files_under(world, f"{rel}/{name}"))
    return out


def thread_bytes(world: Any, thread_id: str) -> int:
    """Everything a thread holds: its runs' events (as canonical JSON), files and artifacts."""
    owner = thread_owner_run_id(thread_id)
    total = 0
    for run_id in world.list_runs():
        if not run_id.startswith(owner):
            continue
        total += sum(len(canonical_json(thaw(e.payload)).encode()) for e in world.list_events(run_id))
        total += sum(files_under(world, f"runs/{run_id}").values())
        total += sum(a.size_bytes for a in world.list_artifacts(run_id))
    return total


# --- values stored once per version --------------------------------------------------------

class Doc(TypedDict, total=False):
    doc: str
    n: int


def counting_graph(steps: int) -> StateGraph:
    g = StateGraph(Doc)
    g.add_node("count", lambda s: {"n": s["n"] + 1})
    g.add_edge(START, "count")
    g.add_conditional_edges("count", lambda s: "count" if s["n"] < steps else END)
    return g


@pytest.mark.parametrize("kind,layout", CASES, ids=IDS)
def test_an_unchanged_channel_is_stored_once_not_once_per_checkpoint(
        kind: str, layout: str, tmp_path: Any, request: Any) -> None:
    doc = "".join(chr(65 + (i * 7) % 26) for i in range(20_000))
    maker = WorldMaker(kind, tmp_path, request)
    config: Any = {"configurable": {"thread_id": "doc"}, "recursion_limit": 100}
    with maker() as world:
        graph = counting_graph(30).compile(checkpointer=saver(world, layout))
        graph.invoke({"doc": doc, "n": 0}, config, durability="sync")
        assert len(list(graph.get_state_history(config))) == 32
        # The document enters as the input, then as the state's channel (and the input
        # task's write): three copies at most, however many checkpoints hold it.
        assert thread_bytes(world, "doc") < 3 * len(doc) + 32 * 2000
    with maker.reopen() as world:
        graph = counting_graph(30).compile(checkpointer=saver(world, layout))
        history = list(graph.get_state_history(config))
        assert all(h.values.get("doc") == doc for h in history if "doc" in h.values)
        assert history[0].values == {"doc": doc, "n": 30}


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def chat_graph() -> StateGraph:
    def reply(state: Chat) -> Chat:
        last = state["messages"][-1].content
        return {"messages": [AIMessage(f"you said: {last} " + "and so on " * 12)]}

    g = StateGraph(Chat)
    g.add_node("reply", reply)
    g.add_edge(START, "reply")
    g.add_edge("reply", END)
    return g


def chat(graph: Any, config: Any, turns: int) -> None:
    for turn in range(turns):
        graph.invoke({"messages": [HumanMessage(f"turn {turn}: " + "words " * 20)]}, config,
                     durability="sync")


@pytest.mark.parametrize("kind,layout", CASES, ids=IDS)
def test_a_chat_thread_grows_with_its_messages_not_with_their_square(
        kind: str, layout: str, tmp_path: Any, request: Any) -> None:
    maker = WorldMaker(kind, tmp_path, request)
    config: Any = {"configurable": {"thread_id": "chat"}}
    turns = 60
    with maker() as world:
        s = saver(world, layout)
        graph = chat_graph().compile(checkpointer=s)
        chat(graph, config, turns)
        final = graph.get_state(config).values["messages"]
        assert len(final) == 2 * turns
        list_bytes = len(s.serde.dumps_typed(final)[1])
        stored = thread_bytes(world, "chat")
        # Every checkpoint holding the whole list would be ~1.5 × turns × list_bytes
        # (90× here); stored once per version, ~turns × list_bytes. Segments: each message
        # a few times (log n), plus a small record per checkpoint.
        assert stored < 14 * list_bytes, (stored, list_bytes)
    with maker.reopen() as world:
        graph = chat_graph().compile(checkpointer=saver(world, layout))
        history = list(graph.get_state_history(config))
        assert history[0].values["messages"] == final
        counts = [len(h.values.get("messages", [])) for h in history]
        # Each past checkpoint still reads its own list: 120, 119(input)… down to 0.
        assert counts[0] == 2 * turns and counts == sorted(counts, reverse=True)
        for h in history[::7]:
            assert h.values.get("messages", []) == final[:len(h.values.get("messages", []))]
        # A resumed process appends from where the list is: the next turn stores its
        # own messages, not the list again.
        s = saver(world, layout)
        graph = chat_graph().compile(checkpointer=s)
        before = thread_bytes(world, "chat")
        chat(graph, config, 1)
        assert thread_bytes(world, "chat") - before < list_bytes / 3
        assert graph.get_state(config).values["messages"][:-2] == final


# --- reads that do not scan every checkpoint ------------------------------------------------

def fill(s: WorldCheckpointSaver, thread_id: str, n: int, runs: list[str]) -> list[Any]:
    parent = None
    out = []
    for i in range(n):
        cfg = generate_config(thread_id)
        if parent:
            cfg["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
        parent = s.put(cfg, generate_checkpoint(channel_values={"i": i}, channel_versions={"i": i + 1}),
                       generate_metadata(step=i, run_id=runs[i % len(runs)]), {"i": i + 1})
        s.put_writes(parent, [("i", i)], f"task-{i}")
        out.append(parent)
    return out


READS = ("read_file", "read_document", "read_event", "read_artifact", "list_events")


def counted(world: Any) -> tuple[Any, list[str]]:
    calls: list[str] = []
    return lw.tracing_world(world, lambda name: calls.append(name)), calls


@pytest.mark.parametrize("kind,layout", [("memory", "files"), ("memory", "events"),
                                         ("local_world", "events")],
                         ids=["memory-files", "memory-events", "local_world-events"])
def test_list_none_filtered_list_and_delete_for_runs_read_only_what_they_return(
        kind: str, layout: str, tmp_path: Any, request: Any) -> None:
    costs = []
    for n in (40, 120):
        os.makedirs(tmp_path / str(n))
        with WorldMaker(kind, tmp_path / str(n), request)() as world:
            s = saver(world, layout)
            for t in range(6):
                fill(s, f"t{n}-{t}", n, ["run-a", "run-b", "run-c", "run-d"])
            fill(s, f"t{n}-rare", n, ["run-z"] + ["run-a"] * (n - 1))

            def reads(op: Any) -> int:
                traced, calls = counted(world)
                op(saver(traced, layout))
                return sum(1 for c in calls if c in READS)

            first = reads(lambda sv: list(sv.list(None, limit=3)))
            rare = reads(lambda sv: list(sv.list(generate_config(f"t{n}-rare"), filter={"run_id": "run-z"})))
            gone = reads(lambda sv: sv.delete_for_runs(["run-z"]))
            costs.append((first, rare, gone))
            assert [t.metadata["run_id"] for t in s.list(generate_config(f"t{n}-rare"))].count("run-z") == 0
            assert len(list(s.list(generate_config(f"t{n}-rare")))) == n - 1
            assert len(list(s.list(None, limit=3))) == 3
    # Three times the checkpoints, the same reads (give or take a record a cache kept):
    # what is read is what is returned (and on the events layout one read of each
    # thread's log), never every checkpoint.
    assert all(b <= a + 2 for a, b in zip(*costs, strict=True)), costs
    assert all(c <= 25 for c in costs[1]), costs


@pytest.mark.parametrize("layout", ["files", "events"])
def test_a_cold_head_read_costs_the_same_for_a_short_and_a_long_thread(layout: str) -> None:
    costs = []
    for n in (50, 1000):
        fs = private_memory()
        with lw.virtual_world(fs, "/wf") as world:
            fill(saver(world, layout), "long", n, ["r"])
        traced, calls = counted(lw.virtual_world(fs, "/wf"))
        tup = saver(traced, layout).get_tuple(generate_config("long"))
        assert tup is not None and tup.checkpoint["channel_values"] == {"i": n - 1}
        assert [(c, v) for _, c, v in tup.pending_writes] == [("i", n - 1)]
        costs.append(sorted(calls))
        traced.close()
    assert costs[0] == costs[1], costs


def test_the_events_layouts_head_hint_moves_without_replacing_a_file(tmp_path: Any) -> None:
    """The hint that lets a cold read of the head skip the log is moved by writing a new
    name and removing the old one: replacing a file (a rename over it) makes ext4 flush the
    new file first (auto_da_alloc), 0.4-0.8 ms a move measured here, inside the put that
    LangGraph waits for. A cold reader still starts from the newest hint."""
    data = str(tmp_path / "data")
    world = lw.local_world(data)
    replaced: list[str] = []

    def on_call(name: str, args: tuple, kwargs: dict) -> None:
        if name == "write_file" and world.file_info(args[0]) is not None:
            replaced.append(args[0])

    fill(saver(lw.tracing_world(world, on_call), "events"), "hinted", 60, ["r"])
    world.close()
    assert replaced == []
    with lw.local_world(data) as world:
        assert len(world.list_dir(f"runs/{thread_owner_run_id('hinted')}/lg-head")) == 1
        reads: list[int] = []
        traced = lw.tracing_world(world, lambda name, args, kwargs: reads.append(
            kwargs.get("after", 0)) if name == "list_events" else None)
        tup = saver(traced, "events").get_tuple(generate_config("hinted"))
        assert tup is not None and tup.checkpoint["channel_values"] == {"i": 59}
        assert [(c, v) for _, c, v in tup.pending_writes] == [("i", 59)]
        assert reads and min(reads) > 100  # from the hint: 120 events, a few read


def test_a_head_hint_of_the_first_form_is_read_then_replaced_by_a_name(tmp_path: Any) -> None:
    """A thread hinted before hints were names (`<nsKey>.json` holding `{"seq": n}`) is
    still read cold from its hint; the next hint this process writes removes it."""
    data = str(tmp_path / "data")
    folder = f"runs/{thread_owner_run_id('old')}/lg-head"
    with lw.local_world(data) as world:
        s = saver(world, "events")
        fill(s, "old", 60, ["r"])
        (name,) = world.list_dir(folder)
        key, _, seq = name.partition(".")
        world.remove_file(f"{folder}/{name}")
        world.write_file(f"{folder}/{key}.json", json.dumps({"seq": int(seq)}).encode())
    with lw.local_world(data) as world:
        reads: list[int] = []
        traced = lw.tracing_world(world, lambda name, args, kwargs: reads.append(
            kwargs.get("after", 0)) if name == "list_events" else None)
        tup = saver(traced, "events").get_tuple(generate_config("old"))
        assert tup is not None and tup.checkpoint["channel_values"] == {"i": 59}
        assert reads and min(reads) > 100
        s = saver(world, "events")
        parent = tup.config
        for i in range(60, 70):
            parent = s.put(parent, generate_checkpoint(channel_values={"i": i}, channel_versions={"i": i + 1}),
                           generate_metadata(step=i, run_id="r"), {"i": i + 1})
        (name,) = world.list_dir(folder)
        assert name.partition(".")[2].isdigit() and int(name.partition(".")[2]) > int(seq)


def test_after_a_cold_head_its_neighbours_read_whole(tmp_path: Any) -> None:
    """A cold head folds the few events after its hint without decoding their records
    (only the head's own are decoded); what a later call asks of those neighbours — a
    parent, its writes, tags for a filter — is decoded then, not lost."""
    data = str(tmp_path / "data")
    with lw.local_world(data) as world:
        fill(saver(world, "events"), "near", 60, ["r"])
    with lw.local_world(data) as world:
        s = saver(world, "events")
        head = s.get_tuple(generate_config("near"))
        assert head is not None and head.checkpoint["channel_values"] == {"i": 59}
        parent = s.get_tuple(head.parent_config)
        assert parent is not None and parent.checkpoint["channel_values"] == {"i": 58}
        assert [(c, v) for _, c, v in parent.pending_writes] == [("i", 58)]
        assert parent.parent_config is not None
        assert [t.checkpoint["channel_values"]["i"] for t in s.list(generate_config("near"), limit=3)] \
            == [59, 58, 57]
        (found,) = s.list(generate_config("near"), filter={"step": 58})
        assert found.config == parent.config


# --- pruning ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,layout", CASES, ids=IDS)
def test_prune_old_keeps_the_newest_and_the_values_they_still_need(
        kind: str, layout: str, tmp_path: Any, request: Any) -> None:
    doc = "".join(chr(65 + (i * 3) % 26) for i in range(30_000))
    maker = WorldMaker(kind, tmp_path, request)
    config: Any = {"configurable": {"thread_id": "p"}, "recursion_limit": 100}
    with maker() as world:
        s = saver(world, layout)
        graph = counting_graph(40).compile(checkpointer=s)
        graph.invoke({"doc": doc, "n": 0}, config, durability="sync")
        before = thread_bytes(world, "p")
        newest = [h.config["configurable"]["checkpoint_id"] for h in graph.get_state_history(config)][:5]
        assert s.prune_old(["p"], keep_last=5) == 42 - 5
        history = list(graph.get_state_history(config))
        assert [h.config["configurable"]["checkpoint_id"] for h in history] == newest
        # The document was stored by a checkpoint now gone; every kept one still reads it.
        assert all(h.values["doc"] == doc for h in history)
        assert history[0].values == {"doc": doc, "n": 40}
        assert thread_bytes(world, "p") < before
        # The thread goes on after a prune, from its head.
        graph = counting_graph(43).compile(checkpointer=s)
        assert graph.invoke(None, config, durability="sync") == {"doc": doc, "n": 40}
        assert graph.invoke({"n": 40}, config, durability="sync")["n"] == 43
    with maker.reopen() as world:
        history = list(counting_graph(43).compile(checkpointer=saver(world, layout)).get_state_history(config))
        assert history[0].values == {"doc": doc, "n": 43} and len(history) == 5 + 5


@pytest.mark.parametrize("layout", ["files", "events"])
def test_prune_old_by_age_reads_the_worlds_clock(layout: str) -> None:
    clock = lw.testing.FakeClock()
    with lw.virtual_world(private_memory(), "/wf", clock=clock) as world:
        s = saver(world, layout)
        fill(s, "aged", 10, ["r"])
        clock.advance(3600)
        fill(s, "aged", 3, ["r"])  # a new chain (no parent given): three young ones
        assert s.prune_old(keep_for=timedelta(minutes=30)) == 10
        assert len(list(s.list(generate_config("aged")))) == 3
        clock.advance(3600)
        # Older than the cutoff, but a namespace always keeps its newest.
        assert s.prune_old(keep_for=600) == 2
        assert len(list(s.list(generate_config("aged")))) == 1
        with pytest.raises(ValueError, match="keep_last or keep_for"):
            s.prune_old()


# --- the first layout ------------------------------------------------------------------------

def fixture_into(world: Any) -> None:
    """Put the first layout's files (tests/fixtures/langgraph_v1) into a World, and its
    owner runs' events."""
    data = os.path.join(FIXTURE, "data")
    for folder in ("langgraph", "runs", "artifacts"):
        for root, _dirs, files in os.walk(os.path.join(data, folder)):
            for name in files:
                full = os.path.join(root, name)
                with open(full, "rb") as f:
                    world.write_file(os.path.relpath(full, data).replace(os.sep, "/"), f.read())
    for run in os.listdir(os.path.join(data, "events")):
        with open(os.path.join(data, "events", run, "0000000001.json")) as f:
            e = json.load(f)
        world.append_event(run, e["type"], e["payload"], idempotency_key=e["appendIdempotencyKey"])


def fixture_graphs() -> tuple[Any, Any]:
    sys.path.insert(0, FIXTURE)
    try:
        import make_v1
    finally:
        sys.path.remove(FIXTURE)
    return make_v1.graphs()


@pytest.mark.parametrize("kind", ["memory", "local_world", "local-file"])
def test_threads_of_the_first_layout_read_resume_and_prune(kind: str, tmp_path: Any, request: Any) -> None:
    with open(os.path.join(FIXTURE, "expected.json")) as f:
        expected = json.load(f)
    maker = WorldMaker(kind, tmp_path, request)
    g, f_graph = fixture_graphs()
    with maker() as world:
        fixture_into(world)
        s = WorldCheckpointSaver(world)
        graph, fan = g.compile(checkpointer=s), f_graph.compile(checkpointer=s)
        for name, app in (("done", graph), ("waiting", graph), ("fan", fan)):
            cfg: Any = {"configurable": {"thread_id": name}}
            state = app.get_state(cfg)
            values = {k: (len(v) if k == "big" else v) for k, v in state.values.items()}
            history = list(app.get_state_history(cfg))
            assert (values, list(state.next)) == (expected[name]["values"], expected[name]["next"])
            assert [h.config["configurable"]["checkpoint_id"] for h in history] == expected[name]["checkpoint_ids"]
            assert [i.value for t in state.tasks for i in t.interrupts] == expected[name]["interrupts"]
        # The waiting thread resumes from its first-layout interrupt; the fan-out retries
        # only its failed branch (the others' writes were kept as pending writes).
        waiting: Any = {"configurable": {"thread_id": "waiting"}}
        out = graph.invoke(Command(resume="no"), waiting, durability="sync")
        assert out["notes"] == ["researched seals", "wrote about seals (no)"] and len(out["big"]) == 66_000
        fan_cfg: Any = {"configurable": {"thread_id": "fan"}}
        with pytest.raises(RuntimeError, match="boom"):
            fan.invoke(None, fan_cfg)
        assert sorted(fan.get_state(fan_cfg).values["results"]) == [1, 4]
        # Pruned and deleted like any thread, first-layout files and artifacts included.
        assert s.prune_old(["waiting"], keep_last=1) >= 3
        assert [h.values["notes"] for h in graph.get_state_history(waiting)][0] == out["notes"]
        s.delete_thread("done")
        assert graph.get_state({"configurable": {"thread_id": "done"}}).values == {}
        assert not files_under(world, f"runs/{thread_owner_run_id('done')}")
        assert world.list_artifacts(thread_owner_run_id("done")) == []


# --- crash-safety of pruning ----------------------------------------------------------------

def run_prune_child(data_dir: str, layout: str, kill_at: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, TESTS, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, os.path.join(TESTS, "langgraph_child.py"), data_dir,
                           os.devnull, "p", "prune", layout, str(kill_at)],
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("layout", ["events", "files"])
def test_a_prune_killed_at_any_write_leaves_a_readable_thread(layout: str, tmp_path: Any) -> None:
    doc = "".join(chr(65 + (i * 3) % 26) for i in range(30_000))
    config: Any = {"configurable": {"thread_id": "p"}, "recursion_limit": 100}
    template = str(tmp_path / "template")
    with lw.local_world(template) as world:
        graph = counting_graph(12).compile(checkpointer=saver(world, layout))
        graph.invoke({"doc": doc, "n": 0}, config, durability="sync")
        full = [h.config["configurable"]["checkpoint_id"] for h in graph.get_state_history(config)]
    # Spread over a prune's writes (13 on events, 35 on files); the short form keeps
    # one kill early, one mid-copy or mid-removal, one late.
    kill_points = [1, 2, 3, 5, 8, 13, 21, 34] if SOAK else [2, 7, 12]
    killed = 0
    for kill_at in kill_points:
        data = str(tmp_path / f"k{kill_at}")
        shutil.copytree(template, data)
        child = run_prune_child(data, layout, kill_at)
        assert child.returncode in (0, -signal.SIGKILL), child.stderr
        killed += child.returncode == -signal.SIGKILL
        with lw.local_world(data) as world:
            s = saver(world, layout)
            graph = counting_graph(13).compile(checkpointer=s)
            history = list(graph.get_state_history(config))
            ids = [h.config["configurable"]["checkpoint_id"] for h in history]
            # Whatever the moment: the head and the newest are whole, nothing else appeared.
            assert ids[:3] == full[:3] and set(ids) <= set(full), (kill_at, ids)
            assert all(h.values["doc"] == doc for h in history if h.metadata["step"] >= 0)
            assert history[0].values == {"doc": doc, "n": 12}
            # A later prune finishes the job, and the thread goes on.
            s.prune_old(["p"], keep_last=3)
            assert [h.config["configurable"]["checkpoint_id"] for h in graph.get_state_history(config)] == full[:3]
            assert graph.invoke({"n": 12}, config, durability="sync")["n"] == 13
    assert killed >= 3, "the kill points should land inside the prune"
