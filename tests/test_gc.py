"""lw.gc / little gc (DESIGN §12) on every World: old finished runs go with everything
they own; young, created and running runs stay; a dry run changes nothing; a reused run
id starts fresh."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from conftest import private_memory
from gc_scenario import (
    CALLS,
    DOOMED,
    KEPT,
    files_under,
    gone,
    orphan_blobs,
    populate_old,
    run,
    snapshot,
)

import little_workflow as lw


def since(mark: float) -> float:
    """An age that puts the cutoff at `mark` (system time, which world.clock reads)."""
    return time.time() - mark


def test_gc_on_every_world(make_world):
    world = make_world()
    populate_old(world)
    time.sleep(0.05)
    mark = time.time()
    time.sleep(0.05)
    run(world, "run_young", n=5)
    before = {r: snapshot(world, r) for r in world.list_runs()}
    assert set(before) == {*DOOMED, *KEPT, "run_young"}
    assert all(before[r]["artifacts"] and before[r]["files"] for r in DOOMED)

    dry = lw.gc(world, older_than=since(mark), dry_run=True)
    assert dry.run_ids == sorted(DOOMED) and dry.dry_run and dry.bytes_freed > 0
    assert {r: snapshot(world, r) for r in world.list_runs()} == before  # nothing changed

    report = lw.gc(world, older_than=timedelta(seconds=since(mark)))
    assert report.run_ids == sorted(DOOMED) and report.skipped == {}
    assert report.bytes_freed == dry.bytes_freed > 70_000  # the big step outputs at least
    assert world.list_runs() == sorted([*KEPT, "run_young"])
    for r in DOOMED:
        assert gone(world, r) == []
    for r in [*KEPT, "run_young"]:
        assert snapshot(world, r) == before[r]  # untouched
    assert orphan_blobs(world) == []
    assert lw.verify_world(world).ok

    fresh = make_world.reopen()
    assert fresh.list_runs() == sorted([*KEPT, "run_young"])
    assert lw.gc(fresh, older_than=since(mark)).run_ids == []  # nothing left to do

    # A reused run id starts a fresh run: the step is called again, from sequence 1.
    CALLS.clear()
    result = run(world, "run_old_done", n=7)
    assert result.output == {"sum": 7 + 107}
    assert CALLS == ["run_old_done:small", "run_old_done:big"]
    events = world.list_events("run_old_done")
    assert [e.sequence for e in events][:2] == [1, 2] and events[0].type == "run.created"
    assert events[0].payload["input"] == {"n": 7}
    assert lw.verify_world(world).ok


def test_gc_statuses_and_cutoff(memory_world):
    world = memory_world
    populate_old(world)
    assert lw.gc(world, older_than=3600).run_ids == []  # all younger than an hour
    report = lw.gc(world, older_than=0, statuses=("failed",))
    assert report.run_ids == ["run_old_failed"]
    report = lw.gc(world, older_than=0, statuses="completed")
    assert report.run_ids == ["run_old_done", "run_old_done2"]
    assert world.list_runs() == sorted(KEPT)  # created and running: never


def test_gc_never_deletes_a_run_whose_lock_is_held(local_world_):
    world = local_world_
    populate_old(world)
    with world.run_lock("run_old_done"):
        report = lw.gc(world, older_than=0)
    assert report.run_ids == ["run_old_done2", "run_old_failed"]
    assert "lock is held" in report.skipped["run_old_done"]
    assert world.list_events("run_old_done")[-1].type == "run.completed"
    assert lw.gc(world, older_than=0).run_ids == ["run_old_done"]


def test_a_marked_run_is_finished_before_its_id_is_read_or_reused(memory_world):
    """A tombstone left by a crashed gc: the next read of that run id finishes the
    deletion first, so a reused id never sees the old records."""
    from little_workflow.world import run_deletion

    world = memory_world
    populate_old(world)
    ids = [m.artifact_id for m in world.list_artifacts("run_old_done")]
    run_deletion.mark_for_deletion(world, "run_old_done", ids)  # a crash right after this
    # Another process over the same files: a new filesystem object on the same store.
    other = private_memory()
    other.store, other.pseudo_dirs = world.files.store, world.files.pseudo_dirs
    fresh = lw.virtual_world(other, world.data_dir)
    assert fresh.list_events("run_old_done") == []
    assert gone(fresh, "run_old_done") == []
    CALLS.clear()
    assert run(fresh, "run_old_done", n=3).output == {"sum": 3 + 103}
    assert CALLS == ["run_old_done:small", "run_old_done:big"]


def test_world_delete_run(make_world):
    world = make_world()
    run(world, "run_a")
    run(world, "run_b")
    freed = world.delete_run("run_a")
    assert freed > 70_000 and gone(world, "run_a") == []
    assert world.list_runs() == ["run_b"] and lw.verify_world(world).ok


def test_gc_rejects_bad_arguments(memory_world):
    with pytest.raises(TypeError):
        lw.gc(memory_world, older_than="30d")
    with pytest.raises(ValueError):
        lw.gc(memory_world, older_than=-1)
    with pytest.raises(ValueError, match="only finished runs"):
        lw.gc(memory_world, older_than=0, statuses=("running",))


def test_parse_age():
    from little_workflow.ops.gc import parse_age

    assert parse_age("30d") == 30 * 86400
    assert parse_age("12h") == 43200 and parse_age("2w") == 14 * 86400
    assert parse_age("90m") == 5400 and parse_age("1.5s") == 1.5
    for bad in ("", "30", "d", "30y", "-1d", "3 0d"):
        with pytest.raises(ValueError):
            parse_age(bad)


def test_little_gc_cli(tmp_path):
    from test_readme_and_cli import little

    data = tmp_path / "data"
    world = lw.local_world(str(data))
    populate_old(world)
    world.close()
    bad = little("--data-dir", str(data), "gc", "--older-than", "30x", cwd=str(tmp_path))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "30x" in bad.stderr and "Traceback" not in bad.stderr
    dry = little("--data-dir", str(data), "gc", "--older-than", "0s", "--dry-run",
                 "--status", "failed", cwd=str(tmp_path))
    assert dry.returncode == 0, dry.stderr
    assert "would delete run_old_failed" in dry.stdout and "would delete 1 runs" in dry.stdout
    done = little("--data-dir", str(data), "gc", "--older-than", "0s", cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert all(f"deleted {r}" in done.stdout for r in DOOMED) and "deleted 3 runs" in done.stdout
    world = lw.local_world(str(data))
    assert world.list_runs() == sorted(KEPT)
    young = little("--data-dir", str(data), "gc", "--older-than", "1d", cwd=str(tmp_path))
    assert "deleted 0 runs, freed 0 bytes" in young.stdout


def test_files_under_helper_sees_scratch():
    world = lw.virtual_world(private_memory(), "/wf")
    run(world, "run_x")
    names = sorted(files_under(world, "runs/run_x"))
    assert "runs/run_x/scratch/run-notes.txt" in names
    assert "runs/run_x/steps/small/scratch/step-notes.txt" in names
