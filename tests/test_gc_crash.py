"""gc crashes at every storage operation of its pass (FaultPlan(crash_at=k)), for a
memory virtual_world and for local_world. After each crash, on a fresh World over the
surviving files: every doomed run is whole, marked (a tombstone) or gone; the running and
created runs are untouched; a marked run id reused at once starts fresh; the next gc
finishes every marked run, leaving nothing half-deleted and a World that verifies."""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
import time

import pytest
from conftest import private_memory
from fsspec.implementations.memory import MemoryFile
from gc_scenario import CALLS, DOOMED, KEPT, gone, orphan_blobs, populate_old, run, snapshot

import little_workflow as lw
from little_workflow.testing import FaultPlan, FaultyFileSystem, SimulatedCrash, faulty_local_world


def same(world, run_id: str, expected: dict) -> bool:
    try:
        return snapshot(world, run_id) == expected
    except lw.LittleWorkflowError:
        return False  # a missing artifact or a broken log is not "whole"


def check_after_crash(index: int, fresh, before: dict) -> list[str]:
    problems = []
    mark = time.time()  # the cutoff of the next gc: older than the reused run below
    time.sleep(0.01)
    marked = [r for r in DOOMED if fresh.read_file(f"gc/{r}.json") is not None]
    for r in DOOMED:
        if r in marked:
            # What is left of a marked log is still a log: a prefix, never a hole.
            left = fresh.events.listed_sequences(r)
            if left != list(range(1, len(left) + 1)):
                problems.append(f"crash #{index}: marked {r} has a hole: {left}")
            continue
        if gone(fresh, r) == []:
            continue
        if not same(fresh, r, before[r]):
            problems.append(f"crash #{index}: {r} is neither whole, marked nor gone")
        elif lw.materialize_run_state(fresh, r).status not in ("completed", "failed"):
            problems.append(f"crash #{index}: {r} does not materialize as finished")
    for r in KEPT:
        if not same(fresh, r, before[r]):
            problems.append(f"crash #{index}: unfinished run {r} was touched")
    # A marked run id reused before any gc finishes it: a fresh run, no old records.
    reused = marked[0] if marked else None
    if reused is not None:
        CALLS.clear()
        result = run(fresh, reused, n=9)
        events = fresh.list_events(reused)
        if (result is None or result.output != {"sum": 9 + 109}
                or CALLS != [f"{reused}:small", f"{reused}:big"]
                or events[0].payload["input"] != {"n": 9}):
            problems.append(f"crash #{index}: reused id {reused} did not start fresh")
    # The next gc finishes marked runs and deletes the rest of the old finished ones.
    lw.gc(fresh, older_than=time.time() - mark)
    for r in DOOMED:
        if r == reused:
            if lw.materialize_run_state(fresh, r).output != {"sum": 9 + 109}:
                problems.append(f"crash #{index}: reused run {r} lost by the next gc")
            continue
        left = gone(fresh, r)
        if left:
            problems.append(f"crash #{index}: {r} half-deleted after the next gc: {left}")
    for r in KEPT:
        if not same(fresh, r, before[r]):
            problems.append(f"crash #{index}: unfinished run {r} was touched by the next gc")
    if fresh.list_dir("gc"):
        problems.append(f"crash #{index}: tombstones left: {fresh.list_dir('gc')}")
    if orphan_blobs(fresh):
        problems.append(f"crash #{index}: orphan blobs {orphan_blobs(fresh)}")
    report = lw.verify_world(fresh)
    if not report.ok:
        problems.append(f"crash #{index}: verify found {report.problems}")
    for r in fresh.list_runs():
        try:
            lw.materialize_run_state(fresh, r)
        except lw.LittleWorkflowError as e:
            problems.append(f"crash #{index}: {r} does not materialize: {e}")
    return problems


def crash_everywhere(label: str, copy_template, make_faulty, make_fresh, before: dict) -> None:
    """Count a gc pass's storage operations, then crash at each one in turn."""
    plan = FaultPlan(crash_at=None)
    target = copy_template()
    report = lw.gc(make_faulty(target, plan), older_than=0)
    assert report.run_ids == sorted(DOOMED)
    total = plan.count
    problems, finished = [], 0
    for index in range(1, total + 1):
        target = copy_template()
        plan = FaultPlan(crash_at=index, partial=index % 2 == 0)
        try:
            lw.gc(make_faulty(target, plan), older_than=0)
        except SimulatedCrash:
            pass
        assert plan.crashed, f"crash #{index} did not happen"
        found = check_after_crash(index, make_fresh(target), before)
        problems += found
        finished += not found
    print(f"\n{label}: {total} crash points, {finished} finished correctly")
    assert problems == [] and finished == total and total > 40


def memory_alias(fs):
    """Another process over the same memory store: a new filesystem object (its own
    in-process state), the same files."""
    other = private_memory()
    other.store, other.pseudo_dirs = fs.store, fs.pseudo_dirs
    return other


def test_gc_crash_at_every_operation_virtual_world():
    template = private_memory()
    world = lw.virtual_world(template, "/wf")
    populate_old(world)
    before = {r: snapshot(world, r) for r in [*DOOMED, *KEPT]}

    def copy_template():
        fs = private_memory()
        for key, f in template.store.items():
            fs.store[key] = MemoryFile(fs, key, f.getvalue())
        fs.pseudo_dirs[:] = list(template.pseudo_dirs)
        return fs

    crash_everywhere(
        "virtual_world (memory)", copy_template,
        lambda fs, plan: lw.virtual_world(FaultyFileSystem(memory_alias(fs), plan), "/wf"),
        lambda fs: lw.virtual_world(memory_alias(fs), "/wf"),
        before)


@pytest.fixture
def fast_tmp(tmp_path):
    """A scratch dir on tmpfs when there is one: these crashes are process crashes
    (the fault layer), not power cuts, so fsync speed is all the disk changes."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        d = tempfile.mkdtemp(prefix="lw-gc-", dir="/dev/shm")
        yield pathlib.Path(d)
        shutil.rmtree(d, ignore_errors=True)
    else:
        yield tmp_path


def test_gc_crash_at_every_operation_local_world(fast_tmp):
    tmp_path = fast_tmp
    template = str(tmp_path / "template")
    with lw.local_world(template) as world:
        populate_old(world)
        before = {r: snapshot(world, r) for r in [*DOOMED, *KEPT]}
    copies: list[str] = []
    worlds: list = []

    def copy_template():
        for w in worlds:
            w.close()
        worlds.clear()
        d = str(tmp_path / f"copy{len(copies)}")
        shutil.copytree(template, d)
        copies.append(d)
        return d

    def make_faulty(d, plan):
        worlds.append(faulty_local_world(d, plan))
        return worlds[-1]

    def make_fresh(d):
        for w in worlds:
            w.close()
        worlds.clear()
        worlds.append(lw.local_world(d))
        return worlds[-1]

    crash_everywhere("local_world", copy_template, make_faulty, make_fresh, before)
    for w in worlds:
        w.close()
