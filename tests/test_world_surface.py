"""The World is the only door to storage (DESIGN §10, issue 12): every read and write a run
makes is a World call that tracing_world reports; Worlds close; nothing pins private
filesystems; a MemoryFileSystem subclass sees every write."""

from __future__ import annotations

import gc
import sqlite3
import subprocess
import sys
import textwrap
import weakref

import pytest
from conftest import private_memory
from fsspec.implementations.memory import MemoryFileSystem

import little_workflow as lw


def note(text: str) -> str:
    lw.current_step().scratch.pipe_file("note.txt", text.encode())
    return text


@lw.workflow(id="surface")
async def surface(ctx, input):
    ctx.memory.workflow.write_json("seen.json", {"n": input["n"]})
    ctx.memory.pipeline.write_text("p.txt", "pipeline note")
    org = ctx.memory.org.read_text("policy.md", default="none")
    ctx.plans.keep("plan", {"steps": ["a", "b"]})
    reused = ctx.plans.reuse("plan")
    ctx.scratch.pipe_file("run-note.txt", b"run scratch")
    written = await ctx.step("note", note, "hello")
    return {"org": org, "reused": reused, "written": written}


def traced_run(world, run_id: str, wf=surface, input=None):
    calls: list[tuple[str, tuple]] = []
    traced = lw.tracing_world(world, lambda name, args, kwargs: calls.append((name, args)))
    result = lw.run_workflow(wf, input or {"n": 1}, world=traced, run_id=run_id)
    return result, calls


def paths_of(calls, method: str) -> list[str]:
    return [str(args[0]) for name, args in calls if name == method and args]


def test_tracing_reports_every_read_and_write_a_run_makes(make_world):
    world = make_world()
    world.memory("org").write_text("policy.md", "be kind")
    result, calls = traced_run(world, "run_surface1")
    assert result.output == {"org": "be kind", "reused": None, "written": "hello"}
    writes = paths_of(calls, "write_file")
    creates = paths_of(calls, "create_file")
    reads = paths_of(calls, "read_file")
    wf_dir = "memory/workflows/surface"
    assert f"{wf_dir}/seen.json" in writes
    assert any(p.startswith("memory/pipelines/pk_") and p.endswith("/p.txt") for p in writes)
    assert "memory/org/policy.md" in reads
    assert any(p.startswith("runs/run_surface1/planner-reuse/") and p.endswith("plan.json") for p in writes)
    assert "runs/run_surface1/scratch/run-note.txt" in writes
    assert "runs/run_surface1/steps/note/scratch/note.txt" in writes
    assert any(p.startswith("workflow-versions/wv_") for p in creates + paths_of(calls, "file_info"))
    assert "run_lock" in [name for name, _ in calls]
    assert "append_event" in [name for name, _ in calls]
    # And what it wrote is there, read back through the plain World.
    assert world.memory("workflow", "surface").read_json("seen.json") == {"n": 1}
    assert world.read_file("runs/run_surface1/steps/note/scratch/note.txt") == b"hello"


def test_a_second_run_reads_the_kept_plan_through_the_world(memory_world):
    traced_run(memory_world, "run_plan1")
    result, calls = traced_run(memory_world, "run_plan2")
    assert result.output["reused"] == {"steps": ["a", "b"]}
    assert "runs" in paths_of(calls, "list_dir")
    assert any(p.startswith("runs/run_plan1/planner-reuse/") for p in paths_of(calls, "read_file"))


def test_bash_memory_writes_and_removals_are_journaled_world_calls(memory_world):
    pytest.importorskip("just_bash")

    @lw.workflow(id="bash-memory")
    async def bash_memory(ctx, input):
        r = await ctx.bash("sh", "echo one > /memory/workflow/a.txt && echo two > /memory/workflow/b.txt"
                                 " && rm /memory/workflow/a.txt && cat /memory/workflow/b.txt")
        return r.stdout

    result, calls = traced_run(memory_world, "run_bashmem", wf=bash_memory)
    assert result.output == "two\n"
    assert "memory/workflows/bash-memory/b.txt" in paths_of(calls, "write_file")
    assert "memory/workflows/bash-memory/a.txt" in paths_of(calls, "remove_file")
    journal = [e.payload for e in memory_world.list_events("run_bashmem") if e.type == "memory.written"]
    assert [(j["path"], j["deleted"]) for j in journal] == [("a.txt", False), ("b.txt", False), ("a.txt", True)]
    assert memory_world.memory("workflow", "bash-memory").list() == ["b.txt"]


def test_a_failed_memory_write_is_journaled_as_failed(tmp_path):
    class FullDisk(MemoryFileSystem):
        """Refuses writes under memory/ as a full disk would."""

        def pipe_file(self, path, value, *args, **kwargs):
            if "/memory/" in path:
                raise OSError(28, "No space left on device", path)
            return super().pipe_file(path, value, *args, **kwargs)

    world = lw.virtual_world(FullDisk(skip_instance_cache=True, global_store=False), "/wf")

    @lw.workflow(id="full")
    async def full(ctx, input):
        ctx.memory.workflow.write_text("x.txt", "data")

    with pytest.raises(lw.StorageError, match="No space left"):
        lw.run_workflow(full, {}, world=world, run_id="run_full1")
    types = [e.type for e in world.list_events("run_full1")]
    # The journal says it was attempted and that it failed; the run stays resumable.
    assert types.index("memory.written") < types.index("memory.write_failed")
    assert "run.failed" not in types


def test_memory_filesystem_subclass_sees_every_write():
    seen: list[str] = []

    class Instrumented(MemoryFileSystem):
        def pipe_file(self, path, value, *args, **kwargs):
            seen.append(path)
            return super().pipe_file(path, value, *args, **kwargs)

        def _open(self, path, mode="rb", *args, **kwargs):
            if "w" in mode or "x" in mode:
                seen.append(path)
            return super()._open(path, mode, *args, **kwargs)

    world = lw.virtual_world(Instrumented(skip_instance_cache=True, global_store=False), "/wf")
    lw.run_workflow(surface, {"n": 2}, world=world, run_id="run_sub1")
    names = {p.rsplit("/", 1)[-1] for p in seen}
    for event in world.list_events("run_sub1"):  # written under a temp name, then moved
        assert any(n.endswith(f"{event.sequence:010d}.json") for n in names), event.sequence
    assert any("/memory/workflows/surface/" in p and p.endswith("seen.json") for p in seen)


def test_worlds_over_private_filesystems_are_not_kept_alive():
    refs = []
    for i in range(30):
        fs = private_memory()
        fs.pipe_file("/pad", b"x" * 2_000_000)  # 2 MB each: a leak would be 60 MB
        world = lw.virtual_world(fs, "/wf")
        lw.run_workflow(surface, {"n": i}, world=world, run_id=f"run_priv{i}")
        refs.append(weakref.ref(fs))
        del fs, world
    gc.collect()
    alive = sum(1 for r in refs if r() is not None)
    assert alive == 0, f"{alive} private filesystems still alive after their Worlds were dropped"


# The garbage collector runs a dropped World's finalizer in the middle of whatever
# allocation triggered it: possibly while this very thread holds the storage's lock.
# (Before the fix, the finalizer took that lock again and the thread hung for good: a CI
# run stopped mid-suite for 80 minutes.) Each case runs in a child process with a deadline.
_COLLECTED_UNDER_LOCK = textwrap.dedent("""
    import gc, sys
    import little_workflow as lw
    from fsspec.implementations.memory import MemoryFileSystem

    fs = MemoryFileSystem(skip_instance_cache=True)
    keeper = lw.virtual_world(fs, "/wf")        # keeps the shared storage state alive
    for i in range(5):
        dropped = lw.virtual_world(fs, "/wf")
        dropped.cycle = dropped                 # only the cyclic collector can free it
        dropped.append_event(f"run_gc{i}", "t", {"i": i})
        del dropped
        with keeper.state.lock:                 # a thread inside the storage's bookkeeping
            gc.collect()                        # ... when the collector comes by
    keeper.append_event("run_gc0", "t", {"after": True})
    assert [e.sequence for e in keeper.list_events("run_gc0")] == [1, 2]
    # The same under allocation-driven collection, as it happens in real programs.
    gc.set_threshold(1, 1, 1)
    for i in range(60):
        w = lw.virtual_world(MemoryFileSystem(skip_instance_cache=True), f"/x{i}")
        w.cycle = w
        del w
        lw.virtual_world(MemoryFileSystem(skip_instance_cache=True), f"/y{i}").append_event(
            f"run_th{i}", "t", {})
    print("ok")
""")


def test_a_world_collected_while_its_storage_lock_is_held_does_not_hang():
    proc = subprocess.run([sys.executable, "-c", _COLLECTED_UNDER_LOCK],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


def test_a_dropped_local_world_gives_its_connection_back_at_the_next_open(tmp_path):
    world = lw.local_world(str(tmp_path / "lw"))
    world.append_event("run_drop1", "t", {})
    store = world.events
    del world
    gc.collect()
    lw.local_world(str(tmp_path / "other")).close()  # any World opened or closed is a safe point
    with pytest.raises((sqlite3.ProgrammingError, lw.StorageError)):
        store.read_after("run_drop1", 0)
    assert [e.sequence for e in lw.local_world(str(tmp_path / "lw")).list_events("run_drop1")] == [1]


@lw.workflow(id="scratch-first-write")
async def scratch_first_write(ctx, input):
    before = ctx.scratch.ls("", detail=False)
    ctx.scratch.pipe_file("a.txt", b"x")
    return {"before": before, "after": ctx.scratch.ls("", detail=False)}


def test_a_runs_scratch_folder_is_empty_until_its_first_write(world):
    # On object stores a folder exists only through its files: the view's own root
    # still reads as an empty folder before the first write.
    out = lw.run_workflow(scratch_first_write, None, world=world, run_id="run_scr1").output
    assert out == {"before": [], "after": ["a.txt"]}


def test_close_releases_the_sqlite_connection_and_worlds_are_context_managers(tmp_path):
    with lw.local_world(str(tmp_path / "lw")) as world:
        lw.run_workflow(surface, {"n": 3}, world=world, run_id="run_close1")
        other = lw.local_world(str(tmp_path / "lw"))  # shares the connection
    assert world.closed and not other.closed
    assert other.list_events("run_close1")  # the shared store stays open for `other`
    store = other.events
    other.close()
    other.close()  # twice is harmless
    with pytest.raises((sqlite3.ProgrammingError, lw.StorageError)):
        store.read_after("run_close1", 0)
    reopened = lw.local_world(str(tmp_path / "lw"))
    assert lw.materialize_run_state(reopened, "run_close1").status == "completed"
    reopened.close()


def test_identity_keys_survive_id_reuse():
    """A new filesystem that happens to get a dead one's id() must not inherit its
    in-process state (ledgers, locks). CPython hands a freed object's address to the
    next one of its size: the loop stops once that happened a few times (a full
    `gc.collect()` costs seconds in a long session's heap), and fails if it never did."""
    seen: set[int] = set()
    reused = 0
    for i in range(50):
        fs = private_memory()
        reused += id(fs) in seen
        seen.add(id(fs))
        world = lw.virtual_world(fs, "/wf")
        world.append_event("run_idreuse", "x", {"i": i})
        assert [e.payload["i"] for e in world.list_events("run_idreuse")] == [i]
        del world, fs
        gc.collect()
        if reused >= 3:
            break
    assert reused >= 1, f"no id() was reused in 50 filesystems ({len(seen)} ids): nothing tested"


def test_relative_paths_cannot_leave_the_data_dir(memory_world):
    for bad in ("../x", "a/../../b", "a//b", ".tmp-x/y"):
        with pytest.raises(lw.WorldPathError):
            memory_world.write_file(bad, b"no")


CRASH_ONCE = {"armed": True}


def crash_once() -> str:
    if CRASH_ONCE["armed"]:
        CRASH_ONCE["armed"] = False
        from little_workflow.testing import SimulatedCrash

        raise SimulatedCrash(0, "test")  # a BaseException: the run is left unfinished
    return "done"


@lw.workflow(id="reads")
async def reads_memory(ctx, input):
    seen = ctx.memory.workflow.read_text("flag.txt", default="missing")
    org = ctx.memory.org.read_json("cfg.json", default=None)
    await ctx.step("work", crash_once)
    again = ctx.memory.workflow.read_text("flag.txt", default="missing")
    return {"seen": seen, "org": org, "again": again}


def test_memory_reads_in_a_workflow_body_are_part_of_the_history(make_world):
    from little_workflow.testing import SimulatedCrash

    world = make_world()
    world.memory("workflow", "reads").write_text("flag.txt", "first")
    world.memory("org").write_json("cfg.json", {"v": 1})
    CRASH_ONCE["armed"] = True
    with pytest.raises(SimulatedCrash):
        lw.run_workflow(reads_memory, {}, world=world, run_id="run_reads1")
    # Memory changes while the run is down; the resumed run sees what it first read.
    world.memory("workflow", "reads").write_text("flag.txt", "second")
    world.memory("org").write_json("cfg.json", {"v": 2})
    result = lw.run_workflow(reads_memory, {}, world=world, run_id="run_reads1")
    assert result.output == {"seen": "first", "org": {"v": 1}, "again": "second"}
    reads = [e.payload for e in world.list_events("run_reads1") if e.type == "memory.read"]
    assert [(r["scope"], r["path"], r["index"]) for r in reads] == [
        ("workflow", "flag.txt", 0), ("org", "cfg.json", 0), ("workflow", "flag.txt", 1)]
    assert reads[0]["contentHash"].startswith("sha256:")
    world.memory("workflow", "reads").write_text("flag.txt", "third")
    assert lw.replay_run(world, "run_reads1", reads_memory).output == result.output


def test_a_world_opened_while_another_thread_gives_back_a_dropped_one_keeps_its_storage(
        tmp_path, monkeypatch):
    """The storage is counted for a new World as it is handed out: a thread that gives
    back the storage of a dropped World in between cannot close it under the new one."""
    import threading

    from little_workflow.world import core

    data, other = str(tmp_path / "d"), str(tmp_path / "other")
    first = lw.local_world(data)
    reached, go = threading.Event(), threading.Event()
    original = core.World.__init__

    def slow_init(self, **kwargs):
        if threading.current_thread().name == "opener":
            reached.set()
            go.wait(10)  # storage handed out, World not built yet
        original(self, **kwargs)

    monkeypatch.setattr(core.World, "__init__", slow_init)
    box = {}
    opener = threading.Thread(target=lambda: box.setdefault("w", lw.local_world(data)),
                              name="opener")
    opener.start()
    assert reached.wait(10)
    state = first.state
    del first
    gc.collect()  # dropped without close(): queued
    lw.local_world(other).close()  # any open or close gives queued storages back
    go.set()
    opener.join(10)
    second = box["w"]
    assert second.state is state and lw.local_world(data).state is state
    second.append_event("run_race1", "t", {})  # its SQLite connection is open
    assert [e.sequence for e in second.list_events("run_race1")] == [1]


def test_a_run_on_the_callers_own_event_loop_does_not_stall_it(memory_world):
    """On a loop the caller owns, a World call that blocks goes to a thread: the caller's
    timers keep firing while a slow store answers (here: 0.3 s per log read)."""
    import asyncio
    import time

    def slow(name, args, kwargs):
        if name == "list_events":
            time.sleep(0.3)

    traced = lw.tracing_world(memory_world, slow)
    traced.blocking = True  # a store whose calls block (as local disk, S3)

    async def main():
        beats = []
        loop = asyncio.get_running_loop()

        def beat():
            beats.append(1)
            loop.call_later(0.02, beat)

        loop.call_later(0.02, beat)
        await lw.arun_workflow(surface, {"n": 1}, world=traced, run_id="run_own_loop")
        return len(beats)

    assert asyncio.run(main()) >= 10  # about 0.3 s / 0.02 s of them
