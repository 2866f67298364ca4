"""Nothing is swallowed: replay checks a run's outcome, not only its steps (a completed
run whose code now raises, or a failed run whose code now fails another way or not at
all, diverges — the check that should catch a bad deploy no longer passes it), `little
replay-check` exits 1 naming the run and the error, and `little run` counts the steps
of parallel groups too."""

from __future__ import annotations

import errno
import functools
import os
import subprocess
import sys

import pytest
from checkout import SRC
from fsspec.implementations.memory import MemoryFileSystem

import little_workflow as lw
from little_workflow.ops.cli_support import StepProgress
from little_workflow.world.posix import Posix

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def double(x: int) -> int:
    return 2 * x


def broken_step() -> int:
    raise ValueError("the step broke")


@lw.workflow(id="calc")
async def calc(ctx: lw.RunContext, input: dict) -> dict:
    a = await ctx.step("a", double, input["x"])
    return {"a": a}


@lw.workflow(id="calc")
async def calc_v2_raises(ctx: lw.RunContext, input: dict) -> dict:
    a = await ctx.step("a", double, input["x"])
    return {"a": a.bit_count_of}  # an AttributeError the old code did not have


@lw.workflow(id="calc")
async def calc_v2_raises_first(ctx: lw.RunContext, input: dict) -> dict:
    raise KeyError("settings")


@lw.workflow(id="fails")
async def fails_in_body(ctx: lw.RunContext, input: dict) -> dict:
    await ctx.step("a", double, 1)
    raise KeyError("missing")


@lw.workflow(id="fails")
async def fails_otherwise(ctx: lw.RunContext, input: dict) -> dict:
    await ctx.step("a", double, 1)
    raise TypeError("another way")


@lw.workflow(id="fails")
async def fails_fixed(ctx: lw.RunContext, input: dict) -> dict:
    return {"a": await ctx.step("a", double, 1)}


@lw.workflow(id="step-fails")
async def step_fails(ctx: lw.RunContext, input: dict) -> dict:
    return await ctx.step("broken", broken_step)


@lw.workflow(id="bad-output", output_schema={"type": "object", "required": ["n"]})
async def bad_output(ctx: lw.RunContext, input: dict) -> dict:
    return {"m": await ctx.step("a", double, 1)}


def test_completed_run_whose_code_now_raises_diverges(memory_world):
    lw.run_workflow(calc, {"x": 2}, world=memory_world, run_id="run_ok")
    assert lw.replay_run(memory_world, "run_ok", calc).status == "completed"
    for new_code, raised in ((calc_v2_raises, AttributeError), (calc_v2_raises_first, KeyError)):
        with pytest.raises(lw.ReplayDivergenceError) as caught:
            lw.replay_run(memory_world, "run_ok", new_code)
        assert caught.value.run_id == "run_ok"
        assert isinstance(caught.value.__cause__, raised)
        assert "completed" in str(caught.value) and raised.__name__ in str(caught.value)


def test_failed_run_replays_ok_only_if_the_code_fails_the_same_way(memory_world):
    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(fails_in_body, None, world=memory_world, run_id="run_failed")
    assert lw.replay_run(memory_world, "run_failed", fails_in_body).status == "failed"
    with pytest.raises(lw.ReplayDivergenceError) as caught:
        lw.replay_run(memory_world, "run_failed", fails_otherwise)
    assert "KeyError" in str(caught.value) and "TypeError" in str(caught.value)
    assert isinstance(caught.value.__cause__, TypeError)
    with pytest.raises(lw.ReplayDivergenceError, match="KeyError.*the code completed"):
        lw.replay_run(memory_world, "run_failed", fails_fixed)


def test_failed_step_and_failed_output_schema_replay_as_failed(memory_world):
    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(step_fails, None, world=memory_world, run_id="run_step_failed")
    assert lw.replay_run(memory_world, "run_step_failed", step_fails).status == "failed"
    with pytest.raises(lw.OutputSchemaError):
        lw.run_workflow(bad_output, None, world=memory_world, run_id="run_bad_output")
    # The output breaks the schema again: the run fails the same way.
    assert lw.replay_run(memory_world, "run_bad_output", bad_output).status == "failed"


def test_waiting_run_whose_code_now_raises_diverges(memory_world):
    @lw.workflow(id="napper")
    async def napper(ctx, input):
        await ctx.step("a", double, 1)
        await ctx.sleep("nap", 3600)
        return "woke"

    @lw.workflow(id="napper")
    async def napper_broken(ctx, input):
        await ctx.step("a", double, 1)
        return None.upper()

    assert lw.run_workflow(napper, None, world=memory_world, run_id="run_nap",
                           suspend=True).status == "waiting"
    assert lw.replay_run(memory_world, "run_nap", napper).status == "waiting"
    with pytest.raises(lw.ReplayDivergenceError, match="waiting.*AttributeError"):
        lw.replay_run(memory_world, "run_nap", napper_broken)


FLOWS_V1 = '''
import little_workflow as lw


@lw.workflow(id="calc")
async def calc(ctx, input):
    a = await ctx.step("a", lambda: 2 * input["x"])
    return {"a": a}
'''

FLOWS_V2 = FLOWS_V1.replace('return {"a": a}', 'return {"a": a.bit_count_of}')


def little(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "little_workflow.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": SRC})


def test_replay_check_fails_a_completed_run_whose_code_now_raises(tmp_path):
    (tmp_path / "flows.py").write_text(FLOWS_V1)
    r = little("run", "flows:calc", "--input", '{"x": 2}', "--run-id", "run_c1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = little("replay-check", "flows:calc", cwd=tmp_path)
    assert r.returncode == 0 and "run_c1: ok (completed)" in r.stdout, r.stdout + r.stderr
    (tmp_path / "flows.py").write_text(FLOWS_V2)
    r = little("replay-check", "flows:calc", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    line = next(line for line in r.stdout.splitlines() if line.startswith("run_c1:"))
    assert "ok" not in line and "AttributeError" in line and "completed" in line, line


def test_progress_counts_the_steps_of_parallel_groups(memory_world):
    @lw.workflow(id="fan")
    async def fan(ctx, input):
        first = await ctx.step("first", double, 1)
        parts = await ctx.parallel("parts", [functools.partial(double, i) for i in range(3)])
        return first + sum(parts)

    progress = StepProgress()
    lw.run_workflow(fan, None, world=lw.tracing_world(memory_world, progress.on_call),
                    run_id="run_fan")
    assert sorted(progress.done) == ["first", "parts/0", "parts/1", "parts/2"]


def test_replay_check_names_a_run_it_cannot_read_instead_of_skipping_it(tmp_path):
    (tmp_path / "flows.py").write_text(FLOWS_V1)
    world_dir = tmp_path / "vw"
    for run_id in ("run_good", "run_torn"):
        r = little("--world", str(world_dir), "run", "flows:calc", "--input", '{"x": 1}',
                   "--run-id", run_id, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    (world_dir / "events" / "run_torn" / "0000000001.json").write_bytes(b'{"torn')
    r = little("--world", str(world_dir), "replay-check", "flows:calc", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "run_good: ok (completed)" in r.stdout, r.stdout
    line = next((line for line in r.stdout.splitlines() if line.startswith("run_torn:")), "")
    assert "cannot be checked" in line and "corrupt" in line, r.stdout


# ---- a folder that cannot be removed is not "not empty" -----------------------------------

class RmdirFails(Posix):
    """The real system calls, except that removing a folder fails with `code`."""

    def __init__(self, code: int):
        self.code = code

    def rmdir(self, path: str) -> None:
        raise OSError(self.code, os.strerror(self.code), path)


def test_local_remove_dir_raises_a_failure_other_than_not_empty(tmp_path):
    from little_workflow.testing import power_cut_filesystem

    world = lw.virtual_world(power_cut_filesystem(RmdirFails(errno.EIO)), str(tmp_path / "wf"))
    world.ensure_dir("runs/run_x/scratch")
    with pytest.raises(lw.StorageIOError) as caught:
        world.remove_dir("runs/run_x/scratch")
    assert caught.value.path == str(tmp_path / "wf" / "runs" / "run_x" / "scratch")
    # Not empty, or not there: nothing to report, as before.
    quiet = lw.virtual_world(power_cut_filesystem(RmdirFails(errno.ENOTEMPTY)), str(tmp_path / "q"))
    quiet.ensure_dir("runs/run_y/scratch")
    quiet.remove_dir("runs/run_y/scratch")
    lw.virtual_world(str(tmp_path / "q")).remove_dir("runs/no-such-folder")


class ReadOnlyFolders(MemoryFileSystem):
    """A memory filesystem that refuses to remove folders (a subclass: used through its
    own methods, like any other fsspec filesystem)."""

    def rmdir(self, path):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)


def test_fsspec_remove_dir_raises_a_failure_other_than_not_empty():
    fs = ReadOnlyFolders(skip_instance_cache=True, global_store=False)
    world = lw.virtual_world(fs, "/wf")
    world.ensure_dir("runs/run_x/scratch")
    with pytest.raises(lw.StoragePermissionError):
        world.remove_dir("runs/run_x/scratch")
    plain = lw.virtual_world(MemoryFileSystem(skip_instance_cache=True, global_store=False), "/wf")
    plain.write_file("runs/run_x/scratch/f.txt", b"x")
    plain.remove_dir("runs/run_x/scratch")  # not empty: stays, nothing raised
    assert plain.read_file("runs/run_x/scratch/f.txt") == b"x"
