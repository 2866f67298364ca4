"""Which kind of World a path makes, and the CLI opening it: `world="/some/dir"` (a plain
path) makes a virtual world, which `--world /some/dir` opens and `--data-dir /some/dir`
refuses naming `--world`; LITTLE_WORLD / LITTLE_DATA_DIR stand for the options."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from checkout import SRC

import little_workflow as lw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@lw.workflow(id="hello")
async def hello(ctx: lw.RunContext, input: dict) -> str:
    return await ctx.step("greet", lambda: "hi " + input["name"])


def little(*args: str, cwd, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("LITTLE_WORLD", "LITTLE_DATA_DIR")}
    return subprocess.run([sys.executable, "-m", "little_workflow.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**base, "PYTHONPATH": SRC, **(env or {})})


def event_types(r: subprocess.CompletedProcess) -> list[str]:
    assert r.returncode == 0, r.stderr
    return [e["type"] for e in json.loads(r.stdout)]


@pytest.fixture
def virtual_dir(tmp_path):
    path = str(tmp_path / "vw")
    lw.run_workflow(hello, {"name": "ada"}, world=path, run_id="run_v")
    return path


def test_a_plain_path_makes_a_virtual_world_and_world_opens_it(virtual_dir, tmp_path):
    assert lw.virtual_world(virtual_dir).list_runs() == ["run_v"]
    assert not os.path.exists(os.path.join(virtual_dir, "events", "events.db"))
    assert event_types(little("--world", virtual_dir, "events", "run_v", "--json", cwd=tmp_path))[-1] \
        == "run.completed"
    assert event_types(little("events", "run_v", "--json", "--world", "vw", cwd=tmp_path))[-1] \
        == "run.completed"  # relative to the current directory


def test_data_dir_at_a_virtual_world_names_world(virtual_dir, tmp_path):
    for args in (("events", "run_v"), ("run", "nothing:here", "--run-id", "run_x")):
        r = little("--data-dir", virtual_dir, *args, cwd=tmp_path)
        assert r.returncode == 1
        assert "is a virtual world" in r.stderr and f"--world {virtual_dir}" in r.stderr, r.stderr
    assert not os.path.exists(os.path.join(virtual_dir, "events", "events.db"))  # nothing made


def test_environment_variables_stand_for_the_options(virtual_dir, tmp_path):
    r = little("events", "run_v", "--json", cwd=tmp_path, env={"LITTLE_WORLD": virtual_dir})
    assert event_types(r)[-1] == "run.completed"
    local = str(tmp_path / "local")
    lw.run_workflow(hello, {"name": "bo"}, world=lw.local_world(local), run_id="run_l")
    r = little("events", "run_l", "--json", cwd=tmp_path, env={"LITTLE_DATA_DIR": local})
    assert event_types(r)[-1] == "run.completed"
    # An option given on the command line wins over the environment.
    r = little("--data-dir", local, "events", "run_l", "--json", cwd=tmp_path,
               env={"LITTLE_WORLD": virtual_dir})
    assert event_types(r)[-1] == "run.completed"
    r = little("events", "run_l", cwd=tmp_path,
               env={"LITTLE_WORLD": virtual_dir, "LITTLE_DATA_DIR": local})
    assert r.returncode == 1 and "LITTLE_WORLD" in r.stderr and "LITTLE_DATA_DIR" in r.stderr, r.stderr
