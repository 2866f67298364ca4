"""On local_world a LangGraph super-step costs one WAL fsync, not two: a task's writes are
appended unsynced and acknowledged once the next checkpoint's synced commit (one WAL: it
makes every commit before it durable) has covered them, or after a short wait by syncing
the log themselves — so `put_writes` still returns only when its writes are durable.
Special writes (errors, interrupts), which may be a run's last, are synced at once.

Traced with strace in children (tests/test_group_commit_durability.py's check): every
acknowledged `put_writes` comes after the WAL write of its writes and a WAL fsync after it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from checkout import SRC
from external_tools import require_tool
from test_group_commit_durability import check_acks_follow_fsyncs, traced_calls

pytest.importorskip("langgraph")

GRAPH = textwrap.dedent("""
    import sys
    from typing import TypedDict
    from langgraph.graph import END, START, StateGraph
    import little_workflow as lw
    import little_workflow.ext.langgraph_store as store
    from little_workflow.ext.langgraph import WorldCheckpointSaver

    store.RIDE_SECONDS = 60.0  # counts that do not depend on the machine's load

    class Count(TypedDict):
        n: int

    k = int(sys.argv[2])
    g = StateGraph(Count)
    g.add_node("step", lambda s: {"n": s["n"] + 1})
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] < k else END)
    saver = WorldCheckpointSaver(lw.local_world(sys.argv[1]))
    if sys.argv[3:] == ["off"]:  # as after a ride that waited in vain
        from little_workflow.ext.langgraph import thread_owner_run_id
        saver._riders._off.put(thread_owner_run_id("t"), True)
    app = g.compile(checkpointer=saver)
    out = app.invoke({"n": 0}, {"configurable": {"thread_id": "t"}, "recursion_limit": k + 10},
                     durability="sync")
    assert out["n"] == k, out
    print("DONE", flush=True)
""")

WRITER = textwrap.dedent("""
    import os, sys, time
    from concurrent.futures import ThreadPoolExecutor
    from langgraph.checkpoint.base import empty_checkpoint
    import little_workflow as lw
    import little_workflow.ext.langgraph_store as store
    from little_workflow.ext.langgraph import WorldCheckpointSaver

    store.RIDE_SECONDS = 60.0  # counts that do not depend on the machine's load
    saver = WorldCheckpointSaver(lw.local_world(sys.argv[1]))
    n = int(sys.argv[2])
    cfg = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    pool = ThreadPoolExecutor(4)

    def writes(cfg, i):
        mark = f"EV-00-{i:03d}"
        saver.put_writes(cfg, [("a", i), ("b", "x" * 50)], mark, "~__pregel_pull, step")
        os.write(1, f"ACK {mark}\\n".encode())

    futures = []
    for i in range(n):  # as LangGraph does: a checkpoint, its task's writes on another
        # thread, the next checkpoint a little later
        cfg = saver.put(cfg, empty_checkpoint(), {"source": "loop", "step": i, "parents": {}}, {})
        futures.append(pool.submit(writes, cfg, i))
        time.sleep(0.002)
    cfg = saver.put(cfg, empty_checkpoint(), {"source": "loop", "step": n, "parents": {}}, {})
    for f in futures:
        f.result()
    # Writes that no checkpoint follows (a sibling task still running when the power
    # goes): acknowledged once they synced by themselves.
    store.RIDE_SECONDS = 0.2
    writes(cfg, n)
    os.write(1, b"DONE\\n")
    os._exit(0)  # no close: its checkpoint would sync what the check must not see synced
""")


def wal_fsyncs(tmp_path: Any, steps: int, *extra: str) -> int:
    strace = require_tool("strace")
    script = tmp_path / "graph.py"
    script.write_text(GRAPH)
    data_dir = str(tmp_path / f"graph-{steps}{''.join(extra)}")
    trace = tmp_path / f"graph-{steps}{''.join(extra)}.txt"
    r = subprocess.run([strace, "-f", "-y", "-qq", "-o", str(trace), "-e", "trace=fsync,fdatasync",
                        sys.executable, str(script), data_dir, str(steps), *extra],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=SRC), timeout=600)
    assert r.returncode == 0 and "DONE" in r.stdout, r.stderr[-3000:]
    return sum(1 for line in trace.read_text().splitlines() if "events.db-wal" in line)


def test_a_super_step_costs_one_wal_fsync_on_local_world(tmp_path: Any) -> None:
    few, many = wal_fsyncs(tmp_path, 10), wal_fsyncs(tmp_path, 70)
    per_step = (many - few) / 60
    print(f"\nWAL fsyncs per super-step: {per_step:.2f} ({few} for 10 steps, {many} for 70)")
    assert per_step <= 1.2, per_step  # was 2.0: the checkpoint's and its writes' own


def test_writes_ride_the_next_checkpoint_when_their_thread_stored_the_last_one(
        tmp_path: Any, monkeypatch: Any) -> None:
    """Riding went by the thread of the last put: under load LangGraph's executor often
    hands a task's writes to the pool thread that just stored the checkpoint (a 70-step
    graph on a loaded machine: 2-5 times), and those writes synced by themselves (1.42
    WAL fsyncs a super-step in a CI run). Once two threads made the puts, no caller is
    making every put: the writes wait for the next checkpoint's sync."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from langgraph.checkpoint.base import empty_checkpoint

    import little_workflow as lw
    import little_workflow.ext.langgraph_store as store
    from little_workflow.ext.langgraph import WorldCheckpointSaver

    monkeypatch.setattr(store, "RIDE_SECONDS", 600.0)
    world = lw.local_world(str(tmp_path / "d"))
    saver = WorldCheckpointSaver(world)
    a, b = ThreadPoolExecutor(1), ThreadPoolExecutor(1)
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}

    def put(cfg: Any, i: int) -> Any:
        return saver.put(cfg, empty_checkpoint(), {"source": "loop", "step": i, "parents": {}}, {})

    config = a.submit(put, config, 0).result()
    config = b.submit(put, config, 1).result()
    returned = threading.Event()
    writes = b.submit(lambda: (saver.put_writes(config, [("n", 1)], "task-1",
                                                "~__pregel_pull, step"), returned.set()))
    end = time.monotonic() + 60
    while not (tup := saver.get_tuple(config)) or not tup.pending_writes:
        assert time.monotonic() < end, "the writes were never appended"
        time.sleep(0.01)
    time.sleep(0.3)  # a put_writes that syncs by itself has returned by now
    assert not returned.is_set(), "the writes synced by themselves instead of riding"
    a.submit(put, config, 2).result()
    writes.result(timeout=60)
    assert returned.is_set()
    a.shutdown()
    b.shutdown()
    world.close()


def test_riding_turned_off_by_a_wait_in_vain_comes_back_in_langgraphs_loop(tmp_path: Any) -> None:
    """After a ride waited in vain (an interrupt's sibling writes, a direct caller), the
    next put seen beginning while writes are in flight — LangGraph's loop — turns riding
    back on: a graph still costs about one WAL fsync a super-step."""
    few, many = wal_fsyncs(tmp_path, 10, "off"), wal_fsyncs(tmp_path, 70, "off")
    per_step = (many - few) / 60
    print(f"\nWAL fsyncs per super-step: {per_step:.2f} ({few} for 10 steps, {many} for 70)")
    assert per_step <= 1.2, per_step


def test_writes_are_acknowledged_only_after_a_wal_fsync_covers_them(tmp_path: Any) -> None:
    strace = require_tool("strace")
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    data_dir = str(tmp_path / "data")
    trace = tmp_path / "trace.txt"
    n = 30
    r = subprocess.run([strace, "-f", "-y", "-qq", "-s", "9000", "-o", str(trace),
                        "-e", "trace=write,pwrite64,fsync,fdatasync",
                        sys.executable, str(script), data_dir, str(n)],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=SRC), timeout=600)
    assert r.returncode == 0 and r.stdout.endswith("DONE\n"), r.stderr[-3000:]
    seen = check_acks_follow_fsyncs(traced_calls(trace), os.path.join(data_dir, "events", "events.db-wal"))
    assert seen["acks"] == n + 1
    # The writes rode the checkpoints' fsyncs: one a checkpoint (n + 1) and the last
    # writes' own, not two a checkpoint.
    assert seen["syncs"] <= n + 4, seen


def test_a_caller_that_makes_the_puts_itself_is_not_kept_waiting_by_its_put_writes(
        tmp_path: Any, monkeypatch: Any) -> None:
    """The saver used directly (put, put_writes, put, ... from one thread): no checkpoint
    can come while its put_writes waits, so the writes are synced at once instead of
    riding — riding made each such call wait RIDE_SECONDS (0.1 s: 1,000 direct calls took
    100 s). With RIDE_SECONDS at 10 minutes, riding shows as a call that does not return."""
    import threading

    from langgraph.checkpoint.base import empty_checkpoint

    import little_workflow as lw
    import little_workflow.ext.langgraph_store as store
    from little_workflow.ext.langgraph import WorldCheckpointSaver

    monkeypatch.setattr(store, "RIDE_SECONDS", 600.0)
    world = lw.local_world(str(tmp_path / "d"))
    saver = WorldCheckpointSaver(world)
    config: Any = {"configurable": {"thread_id": "direct", "checkpoint_ns": ""}}
    failures: list[BaseException] = []

    def direct_use() -> None:
        nonlocal config
        try:
            for i in range(3):
                cp = empty_checkpoint()
                config = saver.put(config, cp, {"step": i}, {})
                saver.put_writes(config, [("n", i)], f"task-{i}")
        except BaseException as e:  # reported below, in the test's thread
            failures.append(e)

    worker = threading.Thread(target=direct_use, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "a put_writes waited for a checkpoint its own caller makes"
    assert not failures, failures
    tup = saver.get_tuple(config)
    assert tup is not None and [(c, v) for _, c, v in tup.pending_writes] == [("n", 2)]
    world.close()


def test_an_async_caller_that_makes_the_puts_itself_is_not_kept_waiting(
        tmp_path: Any, monkeypatch: Any) -> None:
    """The same, awaited: aput and aput_writes run on whatever pool thread is free, so the
    caller is the asyncio task, not the thread (two tasks making puts: LangGraph's loop)."""
    import asyncio
    import time

    from langgraph.checkpoint.base import empty_checkpoint

    import little_workflow as lw
    import little_workflow.ext.langgraph_store as store
    from little_workflow.ext.langgraph import WorldCheckpointSaver

    monkeypatch.setattr(store, "RIDE_SECONDS", 600.0)
    world = lw.local_world(str(tmp_path / "d"))
    saver = WorldCheckpointSaver(world)

    async def direct_use() -> Any:
        config: Any = {"configurable": {"thread_id": "direct", "checkpoint_ns": ""}}
        for i in range(3):
            # Other awaits keep the default executor's threads busy, so the calls land
            # on different threads.
            busy = [asyncio.ensure_future(asyncio.to_thread(time.sleep, 0.05)) for _ in range(3)]
            config = await saver.aput(config, empty_checkpoint(), {"step": i}, {})
            await saver.aput_writes(config, [("n", i)], f"task-{i}")
            await asyncio.gather(*busy)
        return config

    config = asyncio.run(asyncio.wait_for(direct_use(), 60))
    tup = saver.get_tuple(config)
    assert tup is not None and [(c, v) for _, c, v in tup.pending_writes] == [("n", 2)]
    world.close()


def test_writes_riding_on_a_file_world_survive_a_power_cut_after_another_thread_synced(
        tmp_path: Any, monkeypatch: Any) -> None:
    """Riding rests on one WAL: a synced commit makes every commit before it durable. The
    events layout on a file World (`layout="events"`) keeps each thread in its own run
    folder, so another thread's checkpoint syncs another folder — a put_writes it
    acknowledged was lost at a power cut (PowerCutPosix). There its writes sync at once."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from langgraph.checkpoint.base import empty_checkpoint

    import little_workflow as lw
    import little_workflow.ext.langgraph_store as store
    from little_workflow.ext.langgraph import WorldCheckpointSaver
    from little_workflow.testing import PowerCutPosix, SimulatedCrash
    from little_workflow.testing.powercut import power_cut_filesystem

    monkeypatch.setattr(store, "RIDE_SECONDS", 600.0)
    where = str(tmp_path / "w")
    os.makedirs(where)
    posix = PowerCutPosix(None)
    saver = WorldCheckpointSaver(lw.virtual_world(power_cut_filesystem(posix), where),
                                 layout="events")
    a, b, c = ThreadPoolExecutor(1), ThreadPoolExecutor(1), ThreadPoolExecutor(1)

    def put(cfg: Any, i: int) -> Any:
        return saver.put(cfg, empty_checkpoint(), {"source": "loop", "step": i, "parents": {}}, {})

    config_a: Any = {"configurable": {"thread_id": "A", "checkpoint_ns": ""}}
    config_b: Any = {"configurable": {"thread_id": "B", "checkpoint_ns": ""}}
    # Two OS threads make thread A's puts (LangGraph's loop): its writes may ride.
    config_a = b.submit(put, a.submit(put, config_a, 0).result(), 1).result()
    config_b = a.submit(put, config_b, 0).result()
    returned = threading.Event()
    writes = c.submit(lambda: (saver.put_writes(config_a, [("n", 1)], "task-1",
                                                "~__pregel_pull, step"), returned.set()))
    end = time.monotonic() + 60
    while not (tup := saver.get_tuple(config_a)) or not tup.pending_writes:
        assert time.monotonic() < end, "the writes were never appended"
        time.sleep(0.01)
    a.submit(put, config_b, 1).result()  # thread B's checkpoint: a synced append elsewhere
    writes.result(timeout=60)
    posix.cut_after = posix.count  # the power goes at the next operation
    with pytest.raises(SimulatedCrash):
        posix.fsync_dir(where)
    for pool in (a, b, c):
        pool.shutdown()
    tup = WorldCheckpointSaver(lw.virtual_world("file://" + where)).get_tuple(config_a)
    assert tup is not None
    assert [(ch, v) for _, ch, v in tup.pending_writes] == [("n", 1)]


def test_a_server_putting_then_writing_on_any_pool_thread_waits_in_vain_once(
        tmp_path: Any, monkeypatch: Any) -> None:
    """The saver used directly by a threaded server: each request puts, then writes, on
    whatever pool thread serves it. Once two threads made a thread's puts its writes rode —
    and each waited RIDE_SECONDS for a checkpoint its own caller makes next (breaker5: 18 of
    20 calls, 50 calls 0.16 -> 5.05 s). A ride that waited in vain turns riding off for
    that thread: one such wait, not one a request."""
    from concurrent.futures import ThreadPoolExecutor

    from langgraph.checkpoint.base import empty_checkpoint

    import little_workflow as lw
    import little_workflow.ext.langgraph_store as store
    from little_workflow.ext.langgraph import WorldCheckpointSaver

    monkeypatch.setattr(store, "RIDE_SECONDS", 0.2)
    in_vain: list[bool] = []
    real = store.Coverage.wait

    def counted(self: Any, n: int, raced: bool, seconds: float) -> bool:
        covered = real(self, n, raced, seconds)
        in_vain.append(not covered and not raced)  # waited `seconds` for nothing
        return covered

    monkeypatch.setattr(store.Coverage, "wait", counted)
    world = lw.local_world(str(tmp_path / "d"))
    saver = WorldCheckpointSaver(world)
    config: Any = {"configurable": {"thread_id": "served", "checkpoint_ns": ""}}

    def request(cfg: Any, i: int) -> Any:
        cfg = saver.put(cfg, empty_checkpoint(), {"step": i}, {})
        saver.put_writes(cfg, [("n", i)], f"task-{i}")
        return cfg

    with ThreadPoolExecutor(4) as pool:
        for i in range(20):
            # Another request in flight keeps this one off the pool's last thread.
            busy = pool.submit(__import__("time").sleep, 0.01)
            config = pool.submit(request, config, i).result()
            busy.result()
    world.close()
    assert sum(in_vain) <= 1, in_vain
