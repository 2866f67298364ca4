"""Forking says what it can fork from: after a failure outside any step the hint names
`--from-step` in the CLI (`from_step=` in Python) and the steps there are, and a parallel
group's path is a fork point (its children run again)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from checkout import SRC

import little_workflow as lw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLOWS = '''
from functools import partial

import little_workflow as lw

CALLS = []


def note(name, value):
    CALLS.append(name)
    return value


@lw.workflow(id="grouped")
async def grouped(ctx, input):
    first = await ctx.step("first", note, "first", 1)
    parts = await ctx.parallel("chunks", [partial(note, f"chunk{i}", i) for i in range(3)])
    if input.get("fail"):
        raise RuntimeError("failed after the group")
    return first + sum(parts)
'''


def little(*args: str, cwd: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "little_workflow.cli", *args], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def flows(tmp_path, monkeypatch):
    (tmp_path / "flows.py").write_text(FLOWS)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("flows", None)
    import flows as module

    return module


def failed_outside_any_step(flows, world) -> None:
    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(flows.grouped, {"fail": True}, world=world, run_id="run_src")


def test_no_failed_step_names_the_fork_points_and_from_step(flows, tmp_path):
    world = lw.local_world(str(tmp_path / "data"))
    failed_outside_any_step(flows, world)
    with pytest.raises(lw.ForkPointError) as caught:
        lw.fork_run(world, "run_src")
    e = caught.value
    assert isinstance(e, lw.StepError) and e.run_id == "run_src" and e.from_step is None
    assert e.fork_points == ["first", "chunks", "chunks/0", "chunks/1", "chunks/2"]
    assert "failed outside any step" in str(e) and "from_step=" in str(e) and "first, chunks, chunks/0" in str(e)
    assert "step '-'" not in str(e)


def test_the_cli_hint_says_from_step_not_the_python_name(flows, tmp_path):
    failed_outside_any_step(flows, lw.local_world(str(tmp_path / "data")))
    r = little("--data-dir", "data", "fork", "run_src", cwd=str(tmp_path))
    assert r.returncode == 1
    assert "--from-step" in r.stderr and "from_step=" not in r.stderr, r.stderr
    assert "first, chunks, chunks/0" in r.stderr, r.stderr
    r = little("--data-dir", "data", "fork", "run_src", "--from-step", "chunkz", cwd=str(tmp_path))
    assert r.returncode == 1
    assert "no step 'chunkz'" in r.stderr and "--from-step" in r.stderr and "chunks/2" in r.stderr, r.stderr


def test_forking_from_a_parallel_groups_path_runs_the_group_again(flows, tmp_path):
    world = lw.local_world(str(tmp_path / "data"))
    failed_outside_any_step(flows, world)
    flows.CALLS.clear()
    fork_id = lw.fork_run(world, "run_src", from_step="chunks", new_run_id="run_fork")
    assert lw.materialize_run_state(world, fork_id).forked_from == {"runId": "run_src",
                                                                   "stepPath": "chunks"}
    with pytest.raises(lw.WorkflowFailedError):  # the same input still fails after the group
        lw.run_workflow(flows.grouped, {"fail": True}, world=world, run_id=fork_id)
    assert sorted(flows.CALLS) == ["chunk0", "chunk1", "chunk2"]  # "first" came from the log


def test_the_cli_forks_from_a_group_path(flows, tmp_path):
    failed_outside_any_step(flows, lw.local_world(str(tmp_path / "data")))
    r = little("--data-dir", "data", "fork", "run_src", "--from-step", "chunks",
               "--run-id", "run_cli_fork", cwd=str(tmp_path))
    assert r.returncode == 0 and r.stdout.strip() == "run_cli_fork", r.stderr


def test_forking_from_one_child_of_a_group_keeps_its_finished_siblings(flows, tmp_path):
    """`--from-step chunks/1` runs chunks/1 again, not chunks/0 and chunks/2 (issue 32):
    the children of a group start together, so a cut at one child's start would leave
    its siblings' successes out."""
    world = lw.local_world(str(tmp_path / "data"))
    assert lw.run_workflow(flows.grouped, {}, world=world, run_id="run_whole").output == 4
    flows.CALLS.clear()
    fork_id = lw.fork_run(world, "run_whole", from_step="chunks/1", new_run_id="run_child")
    assert lw.run_workflow(flows.grouped, {}, world=world, run_id=fork_id).output == 4
    assert flows.CALLS == ["chunk1"]
    assert lw.replay_run(world, fork_id, flows.grouped).output == 4


def test_a_run_that_failed_outside_any_step_is_told_a_fork_that_works(flows, tmp_path):
    failed_outside_any_step(flows, lw.local_world(str(tmp_path / "data")))
    r = little("--data-dir", "data", "run", "flows:grouped", "--input", '{"fail": true}',
               "--run-id", "run_src", cwd=str(tmp_path))
    assert r.returncode == 1
    hint = r.stderr.strip().splitlines()[-1]
    assert "little fork run_src --from-step chunks/2" in hint, hint
    command = hint[hint.index("little fork"):].split()
    r = little("--data-dir", "data", *command[1:], cwd=str(tmp_path))
    assert r.returncode == 0 and r.stdout.strip().startswith("run_"), r.stderr
