"""Run locks across processes on local files (DESIGN §15): a virtual world whose filesystem
reaches the local disk — fsspec `file://`, a DirFileSystem over it, PyFilesystem2 OSFS —
takes each run's lock (and each outer-loop fence) with a kernel lock on a file under the
data dir, which the kernel drops when its holder dies. A second process gets
RunLockedError at once; a killed holder's runs are taken at once, with no pid guessing."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from checkout import SRC
from crashes import ROOT, TESTS
from kernel_lock_child import KINDS, data_dir, open_world
from soak import soak_size

import little_workflow as lw

CHILD = os.path.join(TESTS, "kernel_lock_child.py")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, TESTS])}
#: Races per kind: the bug (both processes executing) shows at the first one.
TRIALS = soak_size("LW_LOCK_TRIALS", short=5, full=20)


def holder(kind: str, root: str, name: str, what: str = "hold") -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, CHILD, what, kind, root, name], env=ENV,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("HELD"), (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc, int(line.split()[1])


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@lw.workflow(id="locked_elsewhere")
async def one_step(ctx: lw.RunContext, input: Any) -> int:
    return await ctx.step("one", lambda: 1)


@pytest.mark.parametrize("kind", KINDS)
def test_a_run_another_process_executes_is_refused_at_once_and_a_killed_holder_frees_it(
        kind, tmp_path):
    root = str(tmp_path)
    world = open_world(kind, root)
    lw.start_workflow(one_step, None, world=world, run_id="run_held")
    proc, pid = holder(kind, root, "run_held")
    try:
        started = time.monotonic()
        with pytest.raises(lw.RunLockedError) as info:
            lw.run_workflow(one_step, None, world=world, run_id="run_held")
        assert info.value.owner_pid == pid and str(pid) in str(info.value)
        assert time.monotonic() - started < 5  # at once: no waiting for anything
        assert [e.type for e in world.list_events("run_held")] == ["run.created"]
        # A worker leaves the held run alone (and backs off; see test_many_writers_misc).
        worker = lw.Worker(world, [one_step], concurrency=1)
        try:
            worker.run_until_idle()
        finally:
            worker.close()
        assert [e.type for e in world.list_events("run_held")] == ["run.created"]
        # SIGKILL: the kernel drops the lock with the process. Nothing to guess or wait for.
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert lw.run_workflow(one_step, None, world=world, run_id="run_held").output == 1
    finally:
        stop(proc)


@pytest.mark.parametrize("kind", KINDS)
def test_outer_loop_fence_gc_fork_and_cancel_respect_a_holder_in_another_process(
        kind, tmp_path):
    root = str(tmp_path)
    world = open_world(kind, root)
    lw.run_workflow(one_step, None, world=world, run_id="run_done")
    # gc of a run another process holds skips it (its lock is held: it is in use).
    proc, _ = holder(kind, root, "run_done")
    try:
        report = lw.gc(world, older_than=0)
        assert report.run_ids == [] and "run_done" in report.skipped
    finally:
        stop(proc)
    # A fork onto a run id another process holds is refused before anything is written.
    fork_id = "run_forkheld"
    proc, _ = holder(kind, root, fork_id)
    try:
        with pytest.raises(lw.RunLockedError):
            lw.fork_run(world, "run_done", from_step="one", new_run_id=fork_id)
        assert world.list_events(fork_id) == []
    finally:
        stop(proc)
    # The outer-loop fence: callers in two processes take turns.
    proc, pid = holder(kind, root, "loop-1", what="fence")
    try:
        with pytest.raises(lw.RunLockedError) as info:
            with world.fence_lock("loop-1"):
                pass
        assert info.value.owner_pid == pid
    finally:
        stop(proc)
    with world.fence_lock("loop-1"):
        pass


def test_two_worlds_of_one_process_over_one_folder_by_different_paths_exclude_each_other(
        tmp_path):
    """Different filesystem objects (file:// and a DirFileSystem) over one folder are two
    storages to the process, but one folder to the kernel: the second gets RunLockedError."""
    from fsspec.implementations.dirfs import DirFileSystem
    from fsspec.implementations.local import LocalFileSystem

    by_url = lw.virtual_world(f"file://{tmp_path}/wf")
    by_dirfs = lw.virtual_world(DirFileSystem(path=str(tmp_path), fs=LocalFileSystem()), "/wf")
    with by_url.run_lock("run_shared"):
        with pytest.raises(lw.RunLockedError):
            with by_dirfs.run_lock("run_shared"):
                pass
    with by_dirfs.run_lock("run_shared"):
        pass


def test_a_released_lock_leaves_no_file_behind(tmp_path):
    world = lw.virtual_world(f"file://{tmp_path}/wf")
    lw.run_workflow(one_step, None, world=world, run_id="run_tidy")
    locks = tmp_path / "wf" / "locks"
    assert not locks.exists() or list(locks.iterdir()) == []


def test_little_run_on_a_held_run_prints_one_line_and_fails(tmp_path):
    root = str(tmp_path)
    proc, pid = holder("local-file", root, "run_cli_held")
    try:
        done = subprocess.run(
            [sys.executable, "-c", "from little_workflow.cli import main; main()", "run",
             "kernel_lock_child:race", "--input", '{"trial": "x"}', "--run-id", "run_cli_held",
             "--world", data_dir("local-file", root)],
            env=ENV, cwd=TESTS, capture_output=True, text=True, timeout=120)
    finally:
        stop(proc)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr + done.stdout
    lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
    assert len(lines) == 1 and "run_cli_held" in lines[0] and str(pid) in lines[0], lines


def test_two_processes_racing_for_one_run_execute_each_step_exactly_once(tmp_path):
    """Two real processes × TRIALS runs on each kind: in each, one executes every step
    once and the other gets RunLockedError naming it; the ledger the steps write holds
    each step of each run once, and `little verify` is ok."""
    root, sync = str(tmp_path), str(tmp_path / "sync")
    os.makedirs(sync)
    procs = {name: subprocess.Popen(
        [sys.executable, CHILD, "race", ",".join(KINDS), root, sync, name,
         "B" if name == "A" else "A", str(TRIALS)],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in ("A", "B")}
    outputs = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=600)
        outputs[name] = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert proc.returncode == 0, err[-3000:]
    pids = {procs[n].pid for n in procs}
    by_trial: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for lines in outputs.values():
        for line in lines:
            by_trial[line["trial"]].append(line)
    problems = [f"{t}: {[r['outcome'] for r in rs]}" for t, rs in by_trial.items()
                if sorted(r["outcome"] for r in rs) != ["completed", "locked"]]
    assert not problems, problems[:10]
    assert len(by_trial) == TRIALS * len(KINDS)
    for rs in by_trial.values():
        winner = next(r for r in rs if r["outcome"] == "completed")
        loser = next(r for r in rs if r["outcome"] == "locked")
        assert loser["ownerPid"] == winner["pid"] and winner["pid"] in pids, rs
    with open(os.path.join(root, "ledger")) as f:
        executions = collections.Counter(tuple(line.split()[:2]) for line in f if line.strip())
    twice = {k: n for k, n in executions.items() if n != 1}
    assert not twice, sorted(twice.items())[:10]
    assert len(executions) == 3 * TRIALS * len(KINDS)
    for kind in KINDS:
        verify = subprocess.run(
            [sys.executable, "-c", "from little_workflow.cli import main; main()", "verify",
             "--world", data_dir(kind, root)],
            env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert verify.returncode == 0, (kind, verify.stdout[-2000:], verify.stderr[-2000:])


def test_a_locks_folder_that_cannot_hold_locks_is_a_storage_error_naming_it(tmp_path):
    world = lw.virtual_world(f"file://{tmp_path}/wf")
    (tmp_path / "wf" / "locks").write_text("not a folder")
    with pytest.raises(lw.StorageError, match="locks"):
        lw.run_workflow(one_step, None, world=world, run_id="run_nolocks")


@lw.workflow(id="member")
async def member(ctx: lw.RunContext, input: Any) -> int:
    return await ctx.step("m", lambda: 7)


@lw.workflow(id="orchestrator")
async def orchestrator(ctx: lw.RunContext, input: Any) -> Any:
    return await ctx.call_workflow("member", None)


def test_a_sub_run_another_caller_executes_leaves_its_orchestrator_unfinished_not_failed(
        tmp_path):
    """The orchestrator's sub-run is held elsewhere (a worker resumed it, say): the call
    raises RunLockedError and records nothing, so the orchestrator is not failed and a
    later call finishes it."""
    from little_workflow.world.ids import canonical_json, sha256_hex

    world = lw.virtual_world(f"file://{tmp_path}/wf")
    sub_id = "run_" + sha256_hex(canonical_json({"parent": "run_orch",
                                                 "call": "call-0-member"}))[:24]
    with world.run_lock(sub_id):  # held by another caller (here: this thread)
        with pytest.raises(lw.RunLockedError, match=sub_id):
            lw.run_pipeline([member], None, orchestrator=orchestrator, world=world,
                            run_id="run_orch")
    types = [e.type for e in world.list_events("run_orch")]
    assert "run.failed" not in types and "harness.tool_call.failed" not in types, types
    assert lw.run_pipeline([member], None, orchestrator=orchestrator, world=world,
                           run_id="run_orch").output == 7
