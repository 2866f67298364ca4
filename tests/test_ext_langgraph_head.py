"""The head of a thread kept in files (virtual Worlds) is found cold without listing its
checkpoints: a pointer document beside them names the newest, written before each record
and only ever moved forward (issue 29: a cold get_tuple of a 1,000-checkpoint thread on
local files was 4.55x SqliteSaver's, one listing of every checkpoint name).

The pointer is a cache that must never hide a newer checkpoint: checked after a SIGKILL at
every write of a put, two processes racing puts into one thread, and a power cut (the
weakest POSIX model, PowerCutPosix) at every operation of a run of puts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from typing import Any

import pytest
from checkout import SRC

pytest.importorskip("langgraph")

from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402

import little_workflow as lw  # noqa: E402
from little_workflow.ext.langgraph import WorldCheckpointSaver  # noqa: E402
from little_workflow.testing import PowerCutPosix, SimulatedCrash  # noqa: E402
from little_workflow.testing.powercut import power_cut_filesystem  # noqa: E402
from little_workflow.world.tracing import tracing_world  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(TESTS, "langgraph_head_child.py")


def head_config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def put_chain(saver: WorldCheckpointSaver, thread: str, n: int, start: int = 0) -> list[str]:
    config: Any = head_config(thread)
    got = saver.get_tuple(config)
    if got is not None:
        config = got.config
    ids = []
    for i in range(start, start + n):
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=i))
        checkpoint["channel_values"] = {"i": i}
        checkpoint["channel_versions"] = {"i": i + 1}
        config = saver.put(config, checkpoint, {"source": "loop", "step": i, "parents": {}}, {"i": i + 1})
        ids.append(config["configurable"]["checkpoint_id"])
    return ids


def newest_listed(where: str, thread: str) -> str | None:
    """The newest checkpoint as a full listing finds it (what the head must be)."""
    saver = WorldCheckpointSaver(lw.virtual_world("file://" + where))
    found = list(saver.list(head_config(thread), limit=1))
    return found[0].config["configurable"]["checkpoint_id"] if found else None


def cold_head(where: str, thread: str) -> str | None:
    saver = WorldCheckpointSaver(lw.virtual_world("file://" + where))
    got = saver.get_tuple(head_config(thread))
    return got.config["configurable"]["checkpoint_id"] if got is not None else None


def test_a_cold_head_on_local_files_lists_no_checkpoints(tmp_path: Any) -> None:
    where = str(tmp_path / "w")
    ids = put_chain(WorldCheckpointSaver(lw.virtual_world("file://" + where)), "t", 40)
    calls: list[tuple[str, tuple]] = []
    world = tracing_world(lw.virtual_world("file://" + where),
                          lambda name, args, kwargs: calls.append((name, args)))
    got = WorldCheckpointSaver(world).get_tuple(head_config("t"))
    assert got is not None and got.config["configurable"]["checkpoint_id"] == ids[-1]
    assert got.checkpoint["channel_values"] == {"i": 39}
    listed = [args[0] for name, args in calls if name == "list_dir" and str(args[0]).endswith(".c")]
    assert listed == [], f"the head was found by listing the checkpoints: {calls}"


def test_the_head_follows_puts_deletes_and_a_thread_written_before_the_pointer(tmp_path: Any) -> None:
    where = str(tmp_path / "w")
    saver = WorldCheckpointSaver(lw.virtual_world("file://" + where))
    ids = put_chain(saver, "t", 5)
    # A thread written before pointers existed: no pointer, its next put must not point
    # below what is already there (ids need not grow: one older than the newest is put).
    pointers = [os.path.join(d, f) for d, _, fs in os.walk(where) for f in fs if f == "head"]
    assert len(pointers) == 1
    os.remove(pointers[0])
    assert cold_head(where, "t") == ids[-1]
    older = empty_checkpoint()
    older["id"] = ids[0][:-1] + ("0" if ids[0][-1] != "0" else "1")
    saver2 = WorldCheckpointSaver(lw.virtual_world("file://" + where))
    saver2.put(head_config("t"), older, {"source": "update", "step": 9, "parents": {}}, {})
    assert cold_head(where, "t") == newest_listed(where, "t") == max(ids[-1], older["id"])
    # The newest removed (delete_for_runs takes a run's checkpoints): the pointer names a
    # record that is gone, and the head is found by listing.
    config = saver2.get_tuple(head_config("t")).config
    newest = empty_checkpoint()
    saver2.put(config, newest, {"source": "loop", "step": 10, "parents": {}, "run_id": "r-doomed"}, {})
    assert cold_head(where, "t") == newest["id"]
    saver2.delete_for_runs(["r-doomed"])
    assert cold_head(where, "t") == newest_listed(where, "t") == max(ids[-1], older["id"])


def run_child(where: str, thread: str, n: int, kill_at: int | None = None) -> subprocess.CompletedProcess:
    args = [sys.executable, CHILD, where, thread, str(n)] + ([str(kill_at)] if kill_at else [])
    return subprocess.run(args, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": SRC})


def test_a_sigkill_at_every_write_of_a_put_never_hides_a_newer_checkpoint(tmp_path: Any) -> None:
    kills = 0
    for kill_at in range(1, 10):
        where = str(tmp_path / f"k{kill_at}")
        out = run_child(where, "t", 4, kill_at)
        acked = out.stdout.split()
        if out.returncode == 0:
            break  # the last put made fewer writes than kill_at: every moment was tried
        assert out.returncode == -9, out.stderr
        kills += 1
        assert len(acked) == 3
        head, listed = cold_head(where, "t"), newest_listed(where, "t")
        assert head == listed, f"killed before write {kill_at}: head {head}, listing {listed}"
        assert head is not None and head >= acked[-1]
        # The thread goes on: the next put moves the head past whatever the kill left.
        after = put_chain(WorldCheckpointSaver(lw.virtual_world("file://" + where)), "t", 1, start=10)
        assert cold_head(where, "t") == newest_listed(where, "t") == after[-1]
    assert kills >= 2  # at least the pointer's write and the record's were cut


def test_two_processes_racing_puts_into_one_thread_leave_the_newest_as_head(tmp_path: Any) -> None:
    where = str(tmp_path / "w")
    put_chain(WorldCheckpointSaver(lw.virtual_world("file://" + where)), "t", 1)
    go = str(tmp_path / "go")
    args = [[sys.executable, CHILD, where, "t", "60"] for _ in range(2)]
    procs = [subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": SRC, "HEAD_CHILD_GO": go})
             for a in args]
    time.sleep(1.0)  # both past their imports (a late one only races less)
    open(go, "w").close()
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    written = [i for out, _ in outs for i in out.split()]
    assert len(written) == 120
    assert cold_head(where, "t") == newest_listed(where, "t") == max(written)


def test_a_power_cut_at_every_operation_never_leaves_a_head_hiding_a_newer_checkpoint(tmp_path: Any) -> None:
    base = str(tmp_path / "base")
    put_chain(WorldCheckpointSaver(lw.virtual_world("file://" + base)), "t", 2)
    cuts = 0
    for cut_after in range(1, 200):
        where = str(tmp_path / f"c{cut_after}")
        shutil.copytree(base, where)
        posix = PowerCutPosix(cut_after, torn=cut_after % 2 == 0)
        world = lw.virtual_world(power_cut_filesystem(posix), where)
        try:
            put_chain(WorldCheckpointSaver(world), "t", 3, start=2)
        except SimulatedCrash:
            cuts += 1
        else:
            break  # three puts made fewer operations: every moment was cut
        head, listed = cold_head(where, "t"), newest_listed(where, "t")
        assert head == listed, f"power cut after operation {cut_after}: head {head}, listing {listed}"
        # A torn or lost pointer is written again by the next put.
        after = put_chain(WorldCheckpointSaver(lw.virtual_world("file://" + where)), "t", 1, start=20)
        assert cold_head(where, "t") == newest_listed(where, "t") == after[-1]
        shutil.rmtree(where)
    assert cuts >= 10


def test_a_world_that_keeps_no_pointers_keeps_up_a_thread_that_has_one(tmp_path: Any) -> None:
    """Whether a thread has a pointer is in its document, not in the World writing: a
    World over the same files that would not start one (here a DirFileSystem, not a local
    disk to the saver) still moves it, so the local reader's pointer is never stale."""
    from fsspec.implementations.dirfs import DirFileSystem
    from fsspec.implementations.local import LocalFileSystem

    where = str(tmp_path / "w")
    put_chain(WorldCheckpointSaver(lw.virtual_world("file://" + where)), "t", 3)
    other = lw.virtual_world(DirFileSystem(path=where, fs=LocalFileSystem()), "/")
    later = put_chain(WorldCheckpointSaver(other), "t", 3, start=3)
    assert cold_head(where, "t") == newest_listed(where, "t") == later[-1]
    # A thread begun there has no pointer, and a local World reads it by listing.
    put_chain(WorldCheckpointSaver(other), "u", 2)
    more = put_chain(WorldCheckpointSaver(lw.virtual_world("file://" + where)), "u", 2, start=2)
    assert cold_head(where, "u") == newest_listed(where, "u") == more[-1]
    assert [f for d, _, fs in os.walk(where) for f in fs if f == "head"] == ["head"]
