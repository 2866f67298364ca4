"""Acknowledged means durable (DESIGN §10), proven with a power-cut model.

The reference workflow runs on a virtual world over local disk whose publisher's system
calls go through `PowerCutPosix`; the power goes after operation N, for every N. The
directory tree is then what POSIX guarantees survives (unsynced names and bytes dropped),
and a fresh World (new filesystem object, fresh in-process state) resumes on it. Every
step the workflow body saw succeed before the cut must still be committed and must not
run again, and the output must be right.

Under LW_SOAK=1 the power goes after every operation. The short default cuts after one
operation drawn at random from each run of `CUT_STRIDE` consecutive ones, with a seed new
each run and printed (`LW_POWER_CUT_SEED` repeats a draw): every stretch of the run is cut
somewhere, and other runs cut elsewhere. The bug this was written for (new directories not
fsynced into their parent) broke 201 of 241 cut points; a missing fsync leaves a window of
operations after the acknowledgement, not one point.
"""

from __future__ import annotations

import functools
import os
import pathlib
import random
import shutil
import tempfile
import time
import warnings

import pytest
from fsspec.implementations.local import LocalFileSystem
from soak import soak_size

import little_workflow as lw
from fs_adapters.pyfilesystem import PyFilesystemFS
from little_workflow.testing import FakeClock, PowerCutPosix, SimulatedCrash, power_cut_filesystem

#: Cut after one operation in each run of this many (1: after every operation).
CUT_STRIDE = soak_size("LW_POWER_CUT_STRIDE", short=4, full=1)
SEED = int(os.environ.get("LW_POWER_CUT_SEED") or time.time_ns() % 1_000_000)

LEDGER: list[str] = []  # every real step call: "<runId>:<stepPath>"
ACKED: list[str] = []  # steps whose ctx.step / ctx.parallel returned to the workflow body
MEMORY_WRITES: list[dict] = []  # memory writes attempted, in order
MEMORY_ACKED: list[int] = []  # how many of them had returned (at each return)


def work(value: int) -> dict:
    step = lw.current_step()
    LEDGER.append(f"{step.run_id}:{step.step_path}")
    return {"v": value, "pad": "x" * (70_000 if value == 99 else 10)}


@lw.workflow(id="power-cut-reference")
async def reference(ctx: lw.RunContext, input: dict) -> dict:
    total = 0
    for i in range(2):
        total += (await ctx.step(f"serial-{i}", work, i + input["base"]))["v"]
        ACKED.append(f"{ctx.run_id}:serial-{i}")
    group = await ctx.parallel("fan", [functools.partial(work, i) for i in range(2)],
                               max_concurrency=2)
    ACKED.extend(f"{ctx.run_id}:fan/{i}" for i in range(2))
    big = await ctx.step("big", work, 99)  # > inline limit: the output is an artifact
    ACKED.append(f"{ctx.run_id}:big")
    note = {"total": total, "base": input["base"]}
    MEMORY_WRITES.append(note)
    ctx.memory.workflow.write_json("last.json", note)
    MEMORY_ACKED.append(len(MEMORY_WRITES))
    return {"total": total + sum(g["v"] for g in group), "big": len(big["pad"])}


def supervise(cycle: dict, history: list) -> lw.Done | lw.Continue:
    return lw.Done(cycle["output"]) if cycle["cycleNumber"] == 2 else lw.Continue({"base": 10})


EXPECTED = {"total": 10 + 11 + 0 + 1, "big": 70_000}
LAST_NOTE = {"total": 21, "base": 10}


def run_reference(world: lw.World) -> dict:
    return lw.run_workflow(reference, {"base": 0}, world=world, max_outer_cycles=3,
                           supervise=supervise, outer_loop_id="power-cut").output


def committed(world: lw.World) -> set[str]:
    out = set()
    for run_id in world.list_runs():
        for e in world.list_events(run_id):
            if e.type == "step.succeeded":
                out.add(f"{run_id}:{e.payload['stepPath']}")
    return out


def cut_then_resume(make_world, make_fresh, cut_after: int) -> list[str]:
    """Run with the power going after operation `cut_after`, resume; the problems found."""
    LEDGER.clear()
    ACKED.clear()
    MEMORY_WRITES.clear()
    MEMORY_ACKED.clear()
    posix = PowerCutPosix(cut_after, torn=cut_after % 2 == 0)
    try:
        run_reference(make_world(posix))
    except SimulatedCrash:
        pass
    else:
        return [f"cut #{cut_after}: the run finished before the cut"]
    acked, memory_writes = set(ACKED), list(MEMORY_WRITES)
    memory_acked = MEMORY_ACKED[-1] if MEMORY_ACKED else 0
    where = f"cut #{cut_after} (after {posix.operations[-1]})"
    fresh = make_fresh()
    try:
        done = committed(fresh)
    except lw.LittleWorkflowError as e:
        return [f"{where}: the surviving log is unreadable: {e}"]
    problems = []
    if acked - done:
        problems.append(f"{where}: acknowledged steps lost: {sorted(acked - done)}")
    if memory_acked:
        # The last acknowledged write, or a later one that landed before the cut.
        note = fresh.memory("workflow", "power-cut-reference").read_json("last.json", None)
        if note not in memory_writes[memory_acked - 1:]:
            problems.append(f"{where}: acknowledged memory write lost: {note}")
    before = len(LEDGER)
    try:
        output = run_reference(fresh)
    except lw.LittleWorkflowError as e:
        return problems + [f"{where}: resume failed: {type(e).__name__}: {e}"]
    if output != EXPECTED:
        problems.append(f"{where}: output {output}")
    note = fresh.memory("workflow", "power-cut-reference").read_json("last.json", None)
    if note != LAST_NOTE:
        problems.append(f"{where}: memory holds {note} after the resume")
    rerun = set(LEDGER[before:]) & done
    if rerun:
        problems.append(f"{where}: committed steps ran again: {sorted(rerun)}")
    report = lw.verify_world(fresh)
    if not report.ok:
        problems.append(f"{where}: verify found {report.problems}")
    return problems


def still_clock() -> FakeClock:
    """Time that stands still while the reference runs: the run catalogue files entries in
    folders by createdAt, so with the wall clock a run that crosses a second boundary makes
    more folders (and more operations) than one that does not, and the count of operations
    would differ between the counting run and the cut runs."""
    return FakeClock(start=1_800_000_000.5)


def cut_points(total: int, stride: int, seed: int) -> list[int]:
    """One operation drawn from each run of `stride` consecutive ones of 1..total."""
    if stride <= 1:
        return list(range(1, total + 1))
    rng = random.Random(seed)
    return [rng.randint(first, min(first + stride - 1, total))
            for first in range(1, total + 1, stride)]


def cut_everywhere(label: str, tmp_path, make_world, make_fresh) -> None:
    """Count the reference run's operations, then cut the power after each of the
    `cut_points` in turn (all of them under LW_SOAK=1).

    Each cut happens in its own directory, which is then renamed before the resume (as if
    the disk moved to another machine): in-process state keyed by the directory (run
    ledgers, locks) cannot leak from the "dead" World into the one that resumes."""
    counter = PowerCutPosix(None)
    os.makedirs(tmp_path / "count")
    assert run_reference(make_world(counter, str(tmp_path / "count"))) == EXPECTED
    total = counter.count
    points = cut_points(total, CUT_STRIDE, SEED)
    problems, resumed = [], 0
    for n in points:
        cut_dir, resume_dir = str(tmp_path / f"cut-{n}"), str(tmp_path / f"resume-{n}")
        os.makedirs(cut_dir)

        def make_fresh_after_cut(cut_dir=cut_dir, resume_dir=resume_dir):
            os.rename(cut_dir, resume_dir)
            return make_fresh(resume_dir)

        found = cut_then_resume(functools.partial(make_world, data_dir=cut_dir),
                                make_fresh_after_cut, n)
        shutil.rmtree(resume_dir, ignore_errors=True)
        shutil.rmtree(cut_dir, ignore_errors=True)
        problems += found
        resumed += not found
    summary = (f"{label}: cut after {len(points)} of {total} operations (one in each "
               f"{CUT_STRIDE}, LW_POWER_CUT_SEED={SEED}), {resumed} resumed correctly")
    print(f"\n{summary}")
    assert problems == [] and resumed == len(points), summary + "\n" + "\n".join(problems[:20])


@pytest.fixture
def disk_dir(tmp_path):
    """A scratch directory, in RAM (tmpfs) where there is one: the World that resumes
    makes real fsyncs, hundreds of times per test, and the model needs none of them."""
    if not os.path.isdir("/dev/shm"):
        yield tmp_path
        return
    path = tempfile.mkdtemp(prefix="lw-power-cut-", dir="/dev/shm")
    try:
        yield pathlib.Path(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_power_cut_after_every_operation_local_file_virtual_world(disk_dir):
    def make_world(posix, data_dir):
        return lw.virtual_world(power_cut_filesystem(posix), data_dir, clock=still_clock())

    def make_fresh(data_dir):
        return lw.virtual_world(LocalFileSystem(skip_instance_cache=True), data_dir)

    cut_everywhere("virtual_world(LocalFileSystem)", disk_dir, make_world, make_fresh)


@pytest.fixture
def osfs():
    with warnings.catch_warnings():  # fs 2.4.16 imports pkg_resources
        warnings.simplefilter("ignore")
        from fs.osfs import OSFS
    return OSFS


def test_power_cut_after_every_operation_pyfilesystem_osfs(disk_dir, osfs):
    def make_world(posix, data_dir):
        return lw.virtual_world(PyFilesystemFS(osfs(data_dir), posix=posix), "/wf",
                                clock=still_clock())

    def make_fresh(data_dir):
        return lw.virtual_world(PyFilesystemFS(osfs(data_dir)), "/wf")

    cut_everywhere("virtual_world(PyFilesystemFS(OSFS))", disk_dir, make_world, make_fresh)


# ---- the model itself: what survives a cut -----------------------------------------------


def write_file(posix: PowerCutPosix, path: str, data: bytes, *, sync: bool) -> None:
    fd = posix.create_exclusive(path)
    try:
        posix.write(fd, data)
        if sync:
            posix.fsync(fd)
    finally:
        posix.close(fd)


@pytest.fixture
def model(tmp_path):
    (tmp_path / "old.txt").write_bytes(b"old")
    return PowerCutPosix(None), tmp_path


def test_model_keeps_only_what_was_synced(model):
    posix, d = model
    write_file(posix, f"{d}/synced-in-dir.txt", b"kept", sync=True)
    posix.fsync_dir(str(d))
    write_file(posix, f"{d}/unsynced-data.txt", b"lost bytes", sync=False)
    write_file(posix, f"{d}/unsynced-name.txt", b"lost name", sync=True)
    posix.fsync_dir(str(d))  # names durable, from here on: nothing else is
    posix.unlink(f"{d}/unsynced-name.txt")
    write_file(posix, f"{d}/late.txt", b"late", sync=True)
    posix.replace(f"{d}/late.txt", f"{d}/old.txt")
    posix.mkdir(f"{d}/c")
    posix.cut_after = posix.count + 1
    with pytest.raises(SimulatedCrash):
        posix.fsync_dir(f"{d}/c")
    with pytest.raises(SimulatedCrash):
        posix.read(f"{d}/old.txt")
    assert sorted(os.listdir(d)) == ["old.txt", "synced-in-dir.txt", "unsynced-data.txt",
                                     "unsynced-name.txt"]
    assert (d / "synced-in-dir.txt").read_bytes() == b"kept"
    assert (d / "unsynced-data.txt").read_bytes() == b""  # its name was synced, not its bytes
    assert (d / "unsynced-name.txt").read_bytes() == b"lost name"  # unlink undone
    assert (d / "old.txt").read_bytes() == b"old"  # replace undone


def test_makedirs_syncs_each_new_directory_into_its_parent(tmp_path):
    posix = PowerCutPosix(None)
    posix.makedirs(f"{tmp_path}/a/b/c")
    posix.cut_after = posix.count + 1
    with pytest.raises(SimulatedCrash):
        posix.mkdir(f"{tmp_path}/a/b/c/unsynced")
    assert [p for p, _, _ in os.walk(tmp_path)][1:] == [f"{tmp_path}/a", f"{tmp_path}/a/b",
                                                        f"{tmp_path}/a/b/c"]


def test_model_tears_unsynced_bytes_when_asked(tmp_path):
    posix = PowerCutPosix(None, torn=True)
    write_file(posix, f"{tmp_path}/f", b"0123456789", sync=False)
    posix.cut_after = posix.count + 1
    with pytest.raises(SimulatedCrash):
        posix.fsync_dir(str(tmp_path))
    assert (tmp_path / "f").read_bytes() == b"01234"


def test_directory_made_without_fsync_is_lost(tmp_path):
    posix = PowerCutPosix(None)
    posix.mkdir(f"{tmp_path}/new")
    write_file(posix, f"{tmp_path}/new/f", b"data", sync=True)
    posix.cut_after = posix.count + 1
    with pytest.raises(SimulatedCrash):
        posix.fsync_dir(f"{tmp_path}/new")  # the file's name is durable, its directory's not
    assert os.listdir(tmp_path) == []


def test_the_short_form_cuts_once_in_every_stretch_and_the_seed_moves_the_cuts():
    assert cut_points(10, 1, seed=7) == list(range(1, 11))
    for seed in range(50):
        points = cut_points(241, 4, seed)
        assert [(p - 1) // 4 for p in points] == list(range(61))  # one in each stretch
        assert all(1 <= p <= 241 for p in points)
    assert len({tuple(cut_points(241, 4, seed)) for seed in range(20)}) == 20
