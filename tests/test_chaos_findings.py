"""Bugs the chaos test (tests/test_chaos.py) found, each pinned by a deterministic
scenario: the interleaving the chaos run hit, made to happen every time."""

from __future__ import annotations

import os
import shutil

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
