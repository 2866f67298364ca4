"""WorldCheckpointSaver under real graphs: what LangGraph's conformance suite does not
cover — fresh processes and SIGKILL, nested namespaces, Send fan-out, large values,
deletion that leaves nothing behind, cold reads of long threads, threads at once."""

from __future__ import annotations

import json
import operator
import os
import re
import signal
import subprocess
import sys
import threading
from typing import Annotated, Any, TypedDict

import pytest
from checkout import SRC

pytest.importorskip("langgraph")

from conftest import WorldMaker, private_memory  # noqa: E402
from langgraph.checkpoint.conformance.test_utils import (  # noqa: E402
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import Send  # noqa: E402
from soak import soak_size  # noqa: E402

import little_workflow as lw  # noqa: E402
from little_workflow.ext.langgraph import (  # noqa: E402
    WorldCheckpointSaver,
    thread_owner_run_id,
)

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
KINDS = ["local_world", "memory", "local-file", "s3"]


def run_child(data_dir: str, log: str, thread: str, mode: str, *extra: Any) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, TESTS, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, os.path.join(TESTS, "langgraph_child.py"),
                           data_dir, log, thread, mode, *map(str, extra)],
                          env=env, capture_output=True, text=True, timeout=120)


def ran(log: str) -> list[str]:
    with open(log) as f:
        return [line.strip() for line in f if line.strip()]


def test_interrupt_two_subgraphs_deep_resumes_in_a_fresh_process_and_survives_sigkill(tmp_path: Any) -> None:
    data, log = str(tmp_path / "data"), str(tmp_path / "nodes.log")
    first = run_child(data, log, "t-1", "start")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["interrupts"] == [{"question": "approve otters?"}]
    assert ran(log) == ["research", "ask_human"]

    # The interrupt was recorded in a namespace two subgraphs deep ("review:<id>|inner:<id>").
    with lw.local_world(data) as world:
        namespaces = {t.config["configurable"]["checkpoint_ns"]
                      for t in WorldCheckpointSaver(world).list(None)}
    deep = [ns for ns in namespaces if "|" in ns]
    assert deep and all(ns.startswith("review:") and "|inner:" in ns for ns in deep), namespaces

    # A second process resumes it and is SIGKILLed inside the next node.
    killed = run_child(data, log, "t-1", "resume-kill")
    assert killed.returncode == -signal.SIGKILL
    assert ran(log) == ["research", "ask_human", "ask_human", "write"]

    # A third process carries on from the last checkpoint: only the killed node runs again.
    done = run_child(data, log, "t-1", "continue")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out == {"notes": ["researched otters", "wrote about otters"], "answer": "yes",
                   "interrupts": []}
    assert ran(log) == ["research", "ask_human", "ask_human", "write", "write"]


#: Trials per backend; the issue saw whole threads lost in 2-4 of 5 (and here 8 of 10).
#: One by default: with SLOW_WRITE a run that does not wait for its first checkpoint
#: loses its thread in the first trial (the wait taken out: invoke on both backends and
#: ainvoke on local_world failed in trial 1; where 1 trial passed, 3 passed too).
ASYNC_TRIALS = soak_size("LW_LG_ASYNC_TRIALS", short=1, full=10)
#: Each node's work in seconds (0: the issue's case, nodes that return at once).
NODE_SECONDS = float(os.environ.get("LW_LG_NODE_SECONDS", "0"))
#: Seconds added to each World write of the killed run (an object store's round trip).
SLOW_WRITE = 1.0


@pytest.mark.parametrize("how", ["invoke", "ainvoke", "astream"])
@pytest.mark.parametrize("kind", ["local_world", "local-file"])
def test_durability_async_never_loses_what_an_earlier_step_acknowledged(kind: str, how: str, tmp_path: Any) -> None:
    """A chain of eight nodes under durability="async" (LangGraph stores each step's
    checkpoint while the next step runs), SIGKILLed inside n5, then resumed in a fresh
    process with no input: the thread is there (not EmptyInputError — the run waits once
    for a new thread's first checkpoint; before, the graph ran past n5 while it was being
    stored, and lost the thread in most trials on both backends), every checkpoint the
    saver acknowledged before the kill reads back, and no node such a checkpoint covers
    runs again. The same through `ainvoke` and `astream`, whose first checkpoint is looked
    for on a worker thread (before, their runs never waited); every write here is slowed
    by SLOW_WRITE seconds, as on an object store, so a run that does not wait reaches n5
    before the thread's first checkpoint is stored, in every trial."""
    chain = [f"n{i}" for i in range(8)]
    for trial in range(ASYNC_TRIALS):
        folder = tmp_path / f"trial{trial}"
        folder.mkdir()
        data, log = str(folder / "data"), str(folder / "nodes.log")
        killed = run_child(data, log, "chain", "async-kill", kind, NODE_SECONDS, how, SLOW_WRITE)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert ran(log) == chain[:6]
        acks = [line.split() for line in open(log + ".acks")] if os.path.exists(log + ".acks") else []
        done = run_child(data, log, "chain", "async-continue", kind, 0, how)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"done": chain, "error": None}, f"trial {trial}"
        world = lw.local_world(data) if kind == "local_world" else lw.virtual_world("file://" + data)
        with world:
            saver = WorldCheckpointSaver(world)
            for checkpoint_id, _step in acks:
                assert saver.get_tuple({"configurable": {"thread_id": "chain", "checkpoint_id": checkpoint_id,
                                                         "checkpoint_ns": ""}}) is not None
        # A checkpoint of step s holds n0…n(s-1): the resume starts at or after the newest
        # acknowledged one, and never later than n5, which never finished.
        newest = max((int(step) for _, step in acks), default=0)
        rerun = ran(log)[6:]
        assert rerun and rerun == chain[chain.index(rerun[0]):], rerun
        assert newest <= chain.index(rerun[0]) <= 5, (newest, rerun)


class Fan(TypedDict, total=False):
    items: list[int]
    results: Annotated[list[int], operator.add]


def fan_graph(calls: list[int], fail_on: set[int], kept: threading.Semaphore | None = None,
              others: int = 0) -> StateGraph:
    def square(arg: dict) -> Fan:
        calls.append(arg["x"])
        if arg["x"] in fail_on:
            fail_on.discard(arg["x"])
            # Fail once the other branches' writes are stored: LangGraph cancels branches
            # still in flight when one fails, and those would run again whatever the saver.
            for _ in range(others):
                assert kept is not None and kept.acquire(timeout=60)
            raise RuntimeError(f"worker {arg['x']} failed")
        return {"results": [arg["x"] ** 2]}

    g = StateGraph(Fan)
    g.add_node("square", square)
    g.add_conditional_edges(START, lambda s: [Send("square", {"x": x}) for x in s["items"]])
    g.add_edge("square", END)
    return g


class CountingSaver(WorldCheckpointSaver):
    """Releases `kept` once for each fan-out branch's writes stored (`results`; the
    `__start__` task's writes, stored a super-step earlier, would otherwise count as a
    branch's, and under load the failing branch went on before a sibling was kept)."""

    def __init__(self, world: Any, kept: threading.Semaphore):
        super().__init__(world)
        self.kept = kept

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        super().put_writes(config, writes, task_id, task_path)
        if any(channel == "results" for channel, _ in writes):
            self.kept.release()


@pytest.mark.parametrize("kind", KINDS)
def test_send_fan_out_keeps_finished_branches_when_one_fails(kind: str, tmp_path: Any, request: Any) -> None:
    maker = WorldMaker(kind, tmp_path, request)
    calls: list[int] = []
    config = {"configurable": {"thread_id": "fan"}}
    kept = threading.Semaphore(0)
    with maker() as world:
        graph = fan_graph(calls, {3}, kept, others=3).compile(checkpointer=CountingSaver(world, kept))
        with pytest.raises(RuntimeError, match="worker 3 failed"):
            graph.invoke({"items": [1, 2, 3, 4]}, config)
    assert sorted(calls) == [1, 2, 3, 4]
    # Another process (a fresh World over the same storage) resumes: only the failed
    # branch runs again; the others' writes were kept as pending writes.
    with maker.reopen() as world:
        graph = fan_graph(calls, fail_on=set()).compile(checkpointer=WorldCheckpointSaver(world))
        out = graph.invoke(None, config)
    assert sorted(out["results"]) == [1, 4, 9, 16]
    assert sorted(calls) == [1, 2, 3, 3, 4]


def test_list_none_lists_every_thread_and_namespace(memory_world: Any) -> None:
    saver = WorldCheckpointSaver(memory_world)
    stored = {}
    for thread, ns in [("a", ""), ("b", ""), ("b", "sub:1|leaf:2"), ("c:with|odd chars/and slash", "")]:
        cfg = saver.put(generate_config(thread, checkpoint_ns=ns), generate_checkpoint(),
                        generate_metadata(), {})
        stored[cfg["configurable"]["checkpoint_id"]] = (thread, ns)
    listed = {t.config["configurable"]["checkpoint_id"]: (t.config["configurable"]["thread_id"],
                                                          t.config["configurable"]["checkpoint_ns"])
              for t in saver.list(None)}
    assert listed == stored
    assert len(list(saver.list(None, limit=2))) == 2


class Big(TypedDict, total=False):
    blob: str
    n: int


@pytest.mark.parametrize("kind", KINDS)
def test_200_kb_values_are_stored_once_per_version_and_read_back(kind: str, tmp_path: Any, request: Any) -> None:
    maker = WorldMaker(kind, tmp_path, request)
    blob = "".join(chr(65 + (i * 7) % 26) for i in range(200 * 1024))
    g = StateGraph(Big)
    g.add_node("grow", lambda s: {"n": s.get("n", 0) + 1})
    g.add_edge(START, "grow")
    g.add_edge("grow", END)
    config = {"configurable": {"thread_id": "big"}}
    with maker() as world:
        graph = g.compile(checkpointer=WorldCheckpointSaver(world))
        graph.invoke({"blob": blob, "n": 0}, config)
        graph.invoke({"n": 5}, config)
        assert len(list(graph.get_state_history(config))) >= 6
        # The blob came in as the input, became the channel (and the input task's write):
        # stored three times in all, however many checkpoints hold it. On local_world the
        # events that hold it keep it as artifacts (over the World's inline limit).
        held = _thread_bytes(world, "big")
        assert 3 * len(blob) < held < 4 * len(blob), held
    with maker.reopen() as world:
        state = g.compile(checkpointer=WorldCheckpointSaver(world)).get_state(config)
    assert state.values["blob"] == blob and state.values["n"] == 6


def _thread_bytes(world: Any, thread_id: str) -> int:
    owner = thread_owner_run_id(thread_id)
    total = 0
    for run_id in (r for r in world.list_runs() if r.startswith(owner)):
        total += sum(len(json.dumps(e.payload.thaw() if hasattr(e.payload, "thaw") else e.payload,
                                    default=list)) for e in world.list_events(run_id))
        total += sum(info["size"] for info in _files(world, f"runs/{run_id}").values())
        total += sum(a.size_bytes for a in world.list_artifacts(run_id))
    return total


def _files(world: Any, rel: str) -> dict[str, dict]:
    """Every file under a folder of the World, through World methods."""
    info = world.file_info(rel)
    if info is None:
        return {}
    if info["type"] == "file":
        return {rel: info}
    out: dict[str, dict] = {}
    for name in world.list_dir(rel):
        out.update(_files(world, f"{rel}/{name}"))
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_delete_thread_leaves_nothing_behind(kind: str, tmp_path: Any, request: Any) -> None:
    maker = WorldMaker(kind, tmp_path, request)
    with maker() as world:
        saver = WorldCheckpointSaver(world)
        keep = saver.put(generate_config("keep"), generate_checkpoint(), generate_metadata(), {})
        before = _files(world, "")
        parent = None
        for i in range(3):
            cfg = generate_config("gone", checkpoint_ns="" if i < 2 else "sub:1|x:2")
            if parent:
                cfg["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
            parent = saver.put(cfg, generate_checkpoint(channel_values={"big": "x" * 100_000, "i": i}),
                               generate_metadata(step=i), {"big": 1, "i": i + 1})
            saver.put_writes(parent, [("ch", "y" * 70_000), ("small", i)], f"task-{i}")
        assert _thread_bytes(world, "gone") > 3 * 100_000
        saver.delete_thread("gone")
        after = _files(world, "")
        # On object stores the World keeps a released run lock as a free lease (its
        # generation must keep growing): a lock record, not the thread's data.
        leases = {p for p in after if p.strip("/").startswith("locks/")} if kind == "s3" else set()
        assert {p: i for p, i in after.items() if p not in leases} == before
        assert world.list_artifacts(thread_owner_run_id("gone")) == []
        assert saver.get_tuple(generate_config("gone")) is None
        assert [t.config for t in saver.list(None)] == [keep]


def test_cold_read_of_a_2000_checkpoint_thread_reads_only_its_head(tmp_path: Any) -> None:
    fs = private_memory()
    with lw.virtual_world(fs, "/wf") as world:
        saver = WorldCheckpointSaver(world)
        parent = None
        for i in range(2000):
            cfg = generate_config("long")
            if parent:
                cfg["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
            parent = saver.put(cfg, generate_checkpoint(channel_values={"count": i}),
                               generate_metadata(step=i), {"count": i + 1})
    calls: list[tuple[str, tuple]] = []
    cold = lw.tracing_world(lw.virtual_world(fs, "/wf"), lambda name, args, kw: calls.append((name, args)))
    tup = WorldCheckpointSaver(cold).get_tuple(generate_config("long"))
    assert tup is not None and tup.checkpoint["channel_values"] == {"count": 1999}
    assert tup.config == parent
    reads = [c for c in calls if c[0] in ("read_file", "read_document", "read_artifact")]
    listings = [c for c in calls if c[0] == "list_dir"]
    # The thread's document, one listing of its checkpoints, the head, one listing of the
    # head's writes (the value is inline: small).
    assert len(reads) == 2 and len(listings) == 2, calls
    cold.close()


def test_threads_share_one_saver_safely(tmp_path: Any) -> None:
    with lw.local_world(str(tmp_path / "data")) as world:
        saver = WorldCheckpointSaver(world)
        g = StateGraph(Big)
        g.add_node("grow", lambda s: {"n": s.get("n", 0) + 1})
        g.add_edge(START, "grow")
        g.add_edge("grow", END)
        graph = g.compile(checkpointer=saver)
        errors: list[BaseException] = []

        def work(k: int) -> None:
            try:
                for _ in range(5):
                    graph.invoke({"blob": str(k)}, {"configurable": {"thread_id": f"t{k}"}})
            except BaseException as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        for k in range(6):
            state = graph.get_state({"configurable": {"thread_id": f"t{k}"}})
            assert state.values == {"blob": str(k), "n": 5}
        assert len({t.config["configurable"]["thread_id"] for t in saver.list(None)}) == 6


def test_async_graph_on_the_saver(memory_world: Any) -> None:
    import asyncio

    calls: list[int] = []
    graph = fan_graph(calls, fail_on=set()).compile(checkpointer=WorldCheckpointSaver(memory_world))
    out = asyncio.run(graph.ainvoke({"items": [2, 5]}, {"configurable": {"thread_id": "async"}}))
    assert sorted(out["results"]) == [4, 25]
    states = asyncio.run(_history(graph, {"configurable": {"thread_id": "async"}}))
    assert len(states) >= 2


async def _history(graph: Any, config: dict) -> list:
    return [s async for s in graph.aget_state_history(config)]


def test_a_config_without_thread_id_is_a_clear_error(memory_world: Any) -> None:
    with pytest.raises(ValueError, match="thread_id"):
        WorldCheckpointSaver(memory_world).get_tuple({"configurable": {}})


def test_a_tasks_writes_are_one_atomic_file(memory_world: Any) -> None:
    """LangGraph takes a task with any stored write as done: a crash between two of its
    writes must not leave some of them stored. So one put_writes is one publication."""
    calls: list[str] = []
    saver = WorldCheckpointSaver(lw.tracing_world(memory_world, lambda name: calls.append(name)))
    cfg = saver.put(generate_config("w"), generate_checkpoint(), generate_metadata(), {})
    calls.clear()
    saver.put_writes(cfg, [("a", 1), ("b", 2), ("c", 3)], "task-1")
    assert [c for c in calls if c in ("create_document", "write_document", "create_file",
                                      "write_file")] == ["create_file"]
    # The same task again (a retry) changes nothing already kept.
    saver.put_writes(cfg, [("a", 10), ("b", 20), ("c", 30)], "task-1")
    assert [(c, v) for _, c, v in saver.get_tuple(cfg).pending_writes] == [("a", 1), ("b", 2), ("c", 3)]


def test_concurrent_writers_on_one_thread_on_s3(tmp_path: Any, request: Any) -> None:
    """Two hosts (their own s3fs objects and caches) write checkpoints and writes into one
    thread at once: every checkpoint is its own object and a task's writes are published
    once (a conditional PUT), so nothing is lost or torn, and either host reads them all."""
    maker = WorldMaker("s3", tmp_path, request)
    hosts = [maker(), maker.reopen()]
    race = WorldCheckpointSaver(hosts[0]).put(generate_config("race"), generate_checkpoint(),
                                              generate_metadata(), {})
    stored: list[list[str]] = [[], []]
    errors: list[BaseException] = []

    def write(h: int) -> None:
        try:
            saver = WorldCheckpointSaver(hosts[h])
            for i in range(15):
                cfg = saver.put(generate_config("shared", checkpoint_ns="" if i % 2 else "sub:1|x"),
                                generate_checkpoint(channel_values={"host": h, "i": i}),
                                generate_metadata(step=i, host=h), {})
                saver.put_writes(cfg, [("a", h), ("b", i)], "task-same")
                stored[h].append(cfg["configurable"]["checkpoint_id"])
                # Both hosts write task race-i's writes to one checkpoint: one host's stay.
                saver.put_writes(race, [("a", h), ("b", h)], f"race-{i}")
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(h,)) for h in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for world in hosts:
        saver = WorldCheckpointSaver(world)
        tuples = list(saver.list({"configurable": {"thread_id": "shared"}}))  # every namespace
        assert sorted(t.config["configurable"]["checkpoint_id"] for t in tuples) == sorted(stored[0] + stored[1])
        for t in tuples:
            host = t.checkpoint["channel_values"]["host"]
            assert t.metadata["host"] == host
            assert [(c, v) for _, c, v in t.pending_writes] == [("a", host), ("b", t.checkpoint["channel_values"]["i"])]
        raced = saver.get_tuple(race).pending_writes
        assert len(raced) == 30
        by_task: dict[str, list] = {}
        for task, _, v in raced:
            by_task.setdefault(task, []).append(v)
        assert all(len(set(vs)) == 1 and len(vs) == 2 for vs in by_task.values()), by_task
    for world in hosts:
        world.close()


def test_a_world_holding_threads_verifies_clean_and_lists_them(tmp_path: Any) -> None:
    with lw.local_world(str(tmp_path / "data")) as world:
        saver = WorldCheckpointSaver(world)
        cfg = saver.put(generate_config("t-big"), generate_checkpoint(channel_values={"big": "x" * 100_000}),
                        generate_metadata(), {})
        saver.put_writes(cfg, [("a", "y" * 70_000)], "task")
        owner = thread_owner_run_id("t-big")
        # Its artifacts have an owner with a log: verify finds no orphan.
        report = lw.verify_world(world)
        assert report.ok, report
        assert world.list_runs() == [owner]
        # On local_world the thread's records are its owner run's events.
        assert [e.type for e in world.list_events(owner)] == [
            "langgraph.thread", "langgraph.checkpoint", "langgraph.writes"]
        # gc leaves the thread alone: its run never finishes.
        assert lw.gc(world, older_than=0).run_ids == []
        assert saver.get_tuple(generate_config("t-big")) is not None
        saver.delete_thread("t-big")
        assert world.list_runs() == [] and lw.verify_world(world).ok


@lw.workflow("lg-neighbour")
async def _neighbour(ctx: Any, x: int) -> int:
    return await ctx.step("double", lambda: x * 2)


@pytest.mark.parametrize("kind", ["local_world", "memory", "local-file"])
def test_runs_and_the_catalogue_label_thread_owners_and_gc_and_workers_leave_them(
        kind: str, tmp_path: Any, request: Any) -> None:
    maker = WorldMaker(kind, tmp_path, request)
    with maker() as world:
        WorldCheckpointSaver(world).put(generate_config("t-label"), generate_checkpoint(),
                                        generate_metadata(), {})
        owner = thread_owner_run_id("t-label")
        [thread] = lw.list_runs(world).runs
        # Labelled by what its log holds: a LangGraph thread, no run lifecycle (no
        # run.created), so no lifecycle status: "unknown", as materialize_run_state says.
        assert (thread.run_id, thread.workflow_id, thread.status) == (owner, "langgraph", "unknown")
        assert lw.materialize_run_state(world, owner).status == thread.status
        assert [r.run_id for r in lw.list_runs(world, workflow_id="langgraph").runs] == [owner]
        assert [r.run_id for r in lw.list_runs(world, status="unknown").runs] == [owner]
        assert lw.list_runs(world, status=["created", "running", "waiting"]).runs == []
        # A Worker's sweep runs nothing of it and gc deletes nothing of it.
        worker = lw.Worker(world, workflows=[_neighbour])
        try:
            assert worker.sweep() == 0
        finally:
            worker.close()
        assert lw.gc(world, older_than=0).run_ids == []
        assert lw.verify_world(world).ok
        # `little inspect` draws it under the same label.
        from little_workflow.ops.inspect import run_page_data

        page = run_page_data(world, owner)
        assert (page["workflowId"], page["status"]) == ("langgraph", "unknown")
    if kind == "local_world":
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
        out = subprocess.run([sys.executable, "-m", "little_workflow.cli", "runs", "--json",
                              "--data-dir", maker.data_dir],
                             env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        [row] = json.loads(out.stdout)
        assert (row["runId"], row["workflowId"], row["status"]) == (owner, "langgraph", "unknown")


@pytest.mark.parametrize("kind", ["local_world", "local-file"])
def test_little_runs_and_the_ui_show_threads_as_threads(kind: str, tmp_path: Any, request: Any) -> None:
    """A thread's row says what it is — its thread id, how many checkpoints it holds, the
    node that ran last — in `little runs` (table and --json) and the UI's runs list."""
    from little_workflow.ops.ui import RunsIndex

    g = StateGraph(Fan)
    g.add_node("plan", lambda s: {"items": [1, 2]})
    g.add_node("sum_up", lambda s: {"results": [sum(s["items"])]})
    g.add_edge(START, "plan")
    g.add_edge("plan", "sum_up")
    g.add_edge("sum_up", END)
    maker = WorldMaker(kind, tmp_path, request)
    with maker() as world:
        graph = g.compile(checkpointer=WorldCheckpointSaver(world))
        graph.invoke({"items": []}, {"configurable": {"thread_id": "chat-7"}})
        owner = thread_owner_run_id("chat-7")
        thread = {"threadId": "chat-7", "checkpoints": 4, "lastNode": "sum_up"}
        [ui_row] = RunsIndex(world).summaries()[0]
        assert (ui_row["runId"], ui_row["thread"]) == (owner, thread)
        # Pruned: on local_world its log moves to the thread's next generation, a run of
        # its own, still shown as the thread.
        graph.invoke({"items": []}, {"configurable": {"thread_id": "chat-7"}})
        WorldCheckpointSaver(world).prune_old(["chat-7"], keep_last=4)
        [ui_row] = RunsIndex(world).summaries()[0]
        if kind == "local_world":
            assert ui_row["runId"] == owner + "_1"
        owner = ui_row["runId"]
        assert ui_row["thread"] == thread
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    where = ["--data-dir" if kind == "local_world" else "--world", maker.data_dir]
    listed = subprocess.run([sys.executable, "-m", "little_workflow.cli", "runs", "--json", *where],
                            env=env, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert (row["runId"], row["thread"]) == (owner, thread)
    table = subprocess.run([sys.executable, "-m", "little_workflow.cli", "runs", *where],
                           env=env, capture_output=True, text=True, timeout=60)
    assert table.returncode == 0, table.stderr
    [line] = [x for x in table.stdout.splitlines() if owner in x]
    assert "thread chat-7: 4 checkpoints, last node sum_up" in line, line
    # `little ui`'s runs list, as a browser draws it.
    from browser import dump_dom

    ui = subprocess.Popen([sys.executable, "-m", "little_workflow.cli", "ui", "--port", "0", *where],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = re.search(r"http://127\.0\.0\.1:\d+/", ui.stdout.readline() if ui.stdout else "")
        assert url, ui.stderr.read() if ui.stderr else ""
        [cell] = dump_dom(url.group(0)).find_all(data_thread_id="chat-7")
        assert cell.text() == "thread chat-7: 4 checkpoints, last node sum_up"
    finally:
        ui.terminate()
        ui.wait(timeout=10)
