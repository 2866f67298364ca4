"""Bugs the chaos test (tests/test_chaos.py) found, each pinned by a deterministic
scenario: the interleaving the chaos run hit, made to happen every time."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from fsspec.implementations.local import LocalFileSystem

import little_workflow as lw
from little_workflow.world.posix import Posix


def local_file_world(data_dir: str, posix: Posix | None = None) -> lw.World:
    fs = LocalFileSystem(skip_instance_cache=True)  # its own instance: `posix` stays here
    if posix is not None:
        fs.posix = posix
    return lw.virtual_world(fs, data_dir)


# ---- 1. sync() after another process deleted a folder it still owed an fsync ---------

def test_sync_forgets_a_folder_another_process_deleted(tmp_path):
    data = str(tmp_path / "wf")
    world = local_file_world(data)
    world.append_event("run_x", "run.created", {"n": 1}, durable=False)
    # gc in another process removes the run's events folder before this one syncs it.
    shutil.rmtree(os.path.join(data, "events", "run_x"))
    world.sync()  # nothing left to make durable there: not an error
    world.append_event("run_y", "run.created", {"n": 2}, durable=False)
    world.sync()  # and the folder is not owed forever either
    assert [e.type for e in world.list_events("run_y")] == ["run.created"]
    world.close()


# ---- 2. two gc deleting the same run at once -------------------------------------------

class OtherGcRemovesTheParent(Posix):
    """Right after this process removes `<run>/sub`, another gc (same run, same moment)
    removes the now-empty run folder: the parent this process is about to fsync."""

    def __init__(self, victim: str):
        self.victim = victim

    def rmdir(self, path: str) -> None:
        super().rmdir(path)
        if os.path.dirname(path) == self.victim:
            os.rmdir(self.victim)


def test_gc_racing_another_gc_on_the_same_run_is_success(tmp_path):
    data = str(tmp_path / "wf")
    world = local_file_world(data, OtherGcRemovesTheParent(os.path.join(data, "runs", "run_x")))
    world.append_event("run_x", "run.created", {})
    world.write_file("runs/run_x/sub/scratch.txt", b"scratch")
    world.delete_run("run_x")  # the other gc removed part of it: still deleted, no error
    assert world.list_events("run_x") == []
    assert not os.path.exists(os.path.join(data, "runs", "run_x"))
    world.close()


# ---- 3. a stale sender appending after gc deleted the run ------------------------------

@pytest.mark.parametrize("make_world", ["s3", "local-file"], indirect=True)
def test_stale_sender_never_leaves_a_lone_event_after_gc(make_world):
    sender = make_world()

    def gc_in_another_process() -> None:
        if make_world.kind == "s3":  # another host: its own client, its own ledgers
            other = make_world.reopen()
            other.delete_run("run_x")
            other.close()
        else:  # the same folder in one process shares one ledger: a real other process
            code = ("import sys, little_workflow as lw; "
                    "w = lw.virtual_world('file://' + sys.argv[1]); w.delete_run('run_x'); w.close()")
            subprocess.run([sys.executable, "-c", code, make_world.data_dir], check=True)
    sender.append_event("run_x", "run.created", {})
    for i in range(2, 9):
        sender.append_event("run_x", "signal.received", {"i": i})
    publish = sender.events.publish_if_absent

    def gc_between_check_and_publish(run_id, sequence, *args, **kwargs):
        # The sender checked that event 8 exists; gc deletes the run before its PUT.
        sender.events.publish_if_absent = publish
        assert sequence == 9
        gc_in_another_process()
        return publish(run_id, sequence, *args, **kwargs)

    sender.events.publish_if_absent = gc_between_check_and_publish
    with pytest.raises((lw.RunFinishedError, lw.StorageError), match="run_x"):
        sender.append_event("run_x", "signal.received", {"i": 9})
    assert sender.events.publish_if_absent is publish  # the deletion did happen in between
    after = make_world.reopen()
    assert after.list_events("run_x") == []  # no lone event 9: no hole
    assert sender.list_events("run_x") == []
    after.close()
    sender.close()


# ---- 4. run_until_idle() called again tries the runs it once found locked --------------

HOLD = """
import sys
import little_workflow as lw
world = lw.local_world(sys.argv[1])
with world.run_lock(sys.argv[2]):
    print("held", flush=True)
    sys.stdin.read()  # until the parent closes our stdin
"""


@lw.workflow(id="plus_one")
async def plus_one(ctx, input):
    return await ctx.step("one", lambda: input + 1)


def test_run_until_idle_again_runs_a_run_another_process_let_go(tmp_path):
    data = str(tmp_path / "lw")
    world = lw.local_world(data)
    lw.start_workflow(plus_one, 1, world=world, run_id="run_held")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, data, "run_held"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        worker = lw.Worker(world, [plus_one])
        worker.run_until_idle()  # held elsewhere: left alone
        assert "run.completed" not in [e.type for e in world.list_events("run_held")]
        holder.stdin.close()  # the other process lets go of it
        assert holder.wait(30) == 0
        worker.run_until_idle()  # a new call: the run is tried again, and runs
        assert [e.type for e in world.list_events("run_held")][-1] == "run.completed"
    finally:
        holder.kill()
        holder.wait()
        world.close()
