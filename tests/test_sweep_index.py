"""A worker's sweep reads the index of unfinished runs (`active/`), not every run ever
made: its S3 requests per sweep do not grow with the number of finished runs (counted
against a real moto server)."""

from __future__ import annotations

import os

import pytest
from checkout import SRC, TESTS
from conftest import private_memory
from s3_server import RequestCounter, put_objects_directly
from soak import soak_size

import little_workflow as lw
from little_workflow.runtime import active_index
from little_workflow.testing import SimulatedCrash

SMALL = 100
# 300 is enough to tell: the sweep that listed every run sent 529 requests at 100
# finished runs and 5,030 at 1,000 (the check allows 1.2x); with the index ignored (every
# run listed) 941 at 100 and 2,741 at 300.
BIG = soak_size("LW_SWEEP_FINISHED_RUNS", short=300, full=10000)
ACTIVE = 3


@lw.workflow(id="sweep-known")
async def known(ctx: lw.RunContext, input: dict) -> dict:
    return {"n": await ctx.step("one", lambda: input["n"] + 1)}


@lw.workflow(id="sweep-unknown")
async def unknown(ctx: lw.RunContext, input: dict) -> dict:
    return input


def finished_runs(bucket: str, count: int) -> None:
    """`count` finished runs (run.created + run.completed, real envelopes made by a
    World's append_event), written straight into the moto backend."""
    scratch = lw.virtual_world(private_memory(), "/wf")
    for i in range(count):
        rid = f"run_done{i:06d}"
        scratch.append_event(rid, "run.created", {"workflowId": "sweep-known", "input": {"n": i}},
                             durable=False)
        scratch.append_event(rid, "run.completed", {"output": {"n": i + 1}}, durable=False)
    store = scratch.files.store
    # With the run catalogue the World kept as it appended (DESIGN §14), as a World of
    # this version has it: otherwise the first open would build it for every run.
    put_objects_directly(bucket, {k.lstrip("/"): bytes(v.getvalue()) for k, v in store.items()
                                  if k.startswith(("/wf/events/", "/wf/catalogue/"))})


def sweep_requests(moto_s3, finished: int) -> tuple[int, int, dict]:
    bucket = moto_s3.new_bucket()
    finished_runs(bucket, finished)
    maker = lw.virtual_world(moto_s3.filesystem(), f"{bucket}/wf")
    # Real runs through S3: two finished (their entries come and go), some unfinished of
    # a workflow the worker does not know (their entries stay).
    for n in range(2):
        lw.run_workflow(known, {"n": n}, world=maker)
    for n in range(ACTIVE):
        lw.start_workflow(unknown, {"n": n}, world=maker)
    assert len(maker.list_runs()) == finished + 2 + ACTIVE
    assert len(active_index.active_run_ids(maker)) == ACTIVE

    fs = moto_s3.filesystem()  # a worker on another host: its own client and caches
    counter = RequestCounter(fs)
    world = lw.virtual_world(fs, f"{bucket}/wf")
    worker = lw.Worker(world, workflows=[known])
    try:
        counter.reset()
        assert worker.sweep() == 0
        first, detail = counter.total, dict(counter.by_method)
        counter.reset()
        assert worker.sweep() == 0
        second = counter.total
    finally:
        worker.close()
    return first, second, detail


def test_sweep_requests_do_not_grow_with_finished_runs(moto_s3):
    small_first, small_second, small_detail = sweep_requests(moto_s3, SMALL)
    big_first, big_second, big_detail = sweep_requests(moto_s3, BIG)
    print(f"\nS3 requests per sweep ({ACTIVE} active runs): "
          f"{SMALL} finished runs: first sweep {small_first} {small_detail}, next {small_second}; "
          f"{BIG} finished runs: first sweep {big_first} {big_detail}, next {big_second}; "
          f"growth {big_first / small_first:.2f}x / {big_second / small_second:.2f}x")
    assert big_first <= 1.2 * small_first
    assert big_second <= 1.2 * small_second
    # One listing of the index plus about one listing per active run: nothing per finished
    # run. The first sweep also looks for schedules (1 request; then once per
    # schedules.REFRESH_SECONDS, not per sweep: test_schedules).
    assert small_first <= 1 + 4 * ACTIVE + 2 and small_second <= 1 + ACTIVE


def test_crash_between_terminal_event_and_index_removal_is_cleaned_by_the_sweep(memory_world):
    world = memory_world
    lw.run_workflow(known, {"n": 1}, world=world, run_id="run_stale")
    assert active_index.active_run_ids(world) == []
    # As if the runner died right after run.completed: the entry is still there.
    active_index.mark_active(world, "run_stale", "sweep-known")
    worker = lw.Worker(world, workflows=[known])
    try:
        assert worker.sweep() == 0
    finally:
        worker.close()
    assert active_index.active_run_ids(world) == []


def test_a_power_cut_may_bring_a_finished_runs_entry_back_and_the_sweep_drops_it(tmp_path):
    """The index entry is removed without a directory fsync (it costs one per run, and
    its return is harmless): with the power going right after the run ends, the entry
    comes back; the run is still completed, and the next sweep drops the entry without
    running anything."""
    from little_workflow.testing import PowerCutPosix, power_cut_filesystem

    posix = PowerCutPosix(None)
    data = str(tmp_path / "cut")
    world = lw.virtual_world(power_cut_filesystem(posix), data)
    lw.run_workflow(known, {"n": 1}, world=world, run_id="run_cut")
    entry = "active/run_cut.json"
    removal = max(i for i, op in enumerate(posix.operations) if op.startswith("unlink")
                  and op.endswith(entry))
    assert not any(op.startswith("fsync_dir") and op.endswith("/active")
                   for op in posix.operations[removal:]), posix.operations[removal:]

    again = PowerCutPosix(removal + 1)  # the same run, the power going right after that unlink
    cut_world = lw.virtual_world(power_cut_filesystem(again), str(tmp_path / "again"))
    with pytest.raises(SimulatedCrash):
        lw.run_workflow(known, {"n": 1}, world=cut_world, run_id="run_cut")
    os.rename(tmp_path / "again", tmp_path / "resumed")  # a fresh process's World
    fresh = lw.virtual_world(f"file://{tmp_path / 'resumed'}")
    assert active_index.active_run_ids(fresh) == ["run_cut"]
    assert lw.materialize_run_state(fresh, "run_cut").status == "completed"
    worker = lw.Worker(fresh, workflows=[known])
    try:
        assert worker.sweep() == 0
    finally:
        worker.close()
    assert active_index.active_run_ids(fresh) == []


def test_entry_with_no_run_log_is_kept_for_the_grace_period(memory_world, monkeypatch):
    world = memory_world
    active_index.mark_active(world, "run_unborn", "sweep-known")
    worker = lw.Worker(world, workflows=[known])
    try:
        worker.sweep()
        assert active_index.active_run_ids(world) == ["run_unborn"]  # creator may be slow
        monkeypatch.setattr("little_workflow.runtime.worker.ORPHAN_GRACE_SECONDS", 0.0)
        worker.sweep()
        assert active_index.active_run_ids(world) == []
    finally:
        worker.close()


@pytest.fixture(params=["memory", "local_world"])
def indexed_world(request, tmp_path):
    if request.param == "memory":
        return lw.virtual_world(private_memory(), "/wf")
    return lw.local_world(str(tmp_path / "lw"))


def test_every_way_a_run_is_made_indexes_it_and_every_end_removes_it(indexed_world):
    world = indexed_world
    rid = lw.start_workflow(known, {"n": 1}, world=world)
    assert active_index.active_run_ids(world) == [rid]
    lw.cancel_run(world, rid)
    assert active_index.active_run_ids(world) == []
    rid2 = lw.start_workflow(known, {"n": 2}, world=world)
    lw.Worker(world, workflows=[known]).run_until_idle()
    assert lw.run_workflow(known, {"n": 2}, world=world, run_id=rid2).output == {"n": 3}
    assert active_index.active_run_ids(world) == []
    fork = lw.fork_run(world, rid2, from_step="one")
    assert active_index.active_run_ids(world) == [fork]
    worker = lw.Worker(world, workflows=[known])
    worker.run_until_idle()
    worker.close()
    assert active_index.active_run_ids(world) == []
    assert lw.run_workflow(known, {"n": 2}, world=world, run_id=fork).output == {"n": 3}


CREATOR = """
import os, signal, sys
import little_workflow as lw
sys.path.insert(0, sys.argv[2])
from test_sweep_index import known
run_id = lw.start_workflow(known, {"n": 41}, world=lw.local_world(sys.argv[1]))
os.write(1, run_id.encode())
os.kill(os.getpid(), signal.SIGKILL)  # right after the start was acknowledged
"""


def test_local_world_indexes_a_run_in_the_transaction_of_its_creation(tmp_path):
    """local_world writes no `active/` entry (two fsyncs per run): the catalogue row that
    commits with `run.created` is the index. A process SIGKILLed right after its start
    returned leaves a run the next worker's sweep finds and finishes."""
    import subprocess
    import sys

    data = str(tmp_path / "lw")
    r = subprocess.run([sys.executable, "-c", CREATOR, data, TESTS], capture_output=True,
                       text=True, timeout=300, env=dict(os.environ, PYTHONPATH=SRC))
    assert r.returncode == -9, r.stderr[-2000:]
    run_id = r.stdout
    world = lw.local_world(data)
    assert world.list_dir("active") == []
    assert active_index.active_run_ids(world) == [run_id]
    worker = lw.Worker(world, workflows=[known])
    try:
        worker.run_until_idle()
    finally:
        worker.close()
    assert lw.materialize_run_state(world, run_id).status == "completed"
    assert active_index.active_run_ids(world) == []


def test_entries_a_local_world_wrote_before_are_still_listed_and_removed(tmp_path):
    world = lw.local_world(str(tmp_path / "lw"))
    lw.run_workflow(known, {"n": 1}, world=world, run_id="run_old_entry")
    world.write_document("active/run_old_entry.json", {"runId": "run_old_entry"})
    assert active_index.active_run_ids(world) == ["run_old_entry"]
    worker = lw.Worker(world, workflows=[known])
    try:
        assert worker.sweep() == 0
    finally:
        worker.close()
    assert active_index.active_run_ids(world) == []
