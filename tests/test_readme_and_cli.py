"""README examples are executed; the CLI is driven as a user would, in subprocesses."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from checkout import SRC

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_blocks(lang: str) -> list[str]:
    with open(os.path.join(ROOT, "README.md")) as f:
        return re.findall(rf"```{lang}\n(.*?)```", f.read(), flags=re.S)


def test_readme_python_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = readme_blocks("python")
    assert blocks
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {"__name__": "readme"})


def little(*args: str, cwd: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "little_workflow.cli", *args], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=120)


def test_readme_setup_commands_are_the_ci_commands():
    bash = readme_blocks("bash")[0]
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        ci = f.read()
    test_cmd = [line.split("#")[0].strip() for line in bash.splitlines() if "pytest" in line][0]
    assert test_cmd.replace("pip install", "python -m pip install") in ci


def test_cli_run_runs_events_replay_artifacts_verify(tmp_path):
    cwd = str(tmp_path)
    os.makedirs(tmp_path / "examples", exist_ok=True)
    with open(os.path.join(ROOT, "examples", "quickstart.py")) as f:
        (tmp_path / "myflows.py").write_text(f.read())
    r = little("run", "myflows:squares", "--input", '{"n": 4}', "--run-id", "run_cli1", "--json", cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["output"] == {"sum": 14}
    r = little("runs", "--json", cwd=cwd)
    assert [x["runId"] for x in json.loads(r.stdout)] == ["run_cli1"]
    r = little("events", "run_cli1", "--json", cwd=cwd)
    events = json.loads(r.stdout)
    assert events[0]["type"] == "run.created" and events[-1]["type"] == "run.completed"
    r = little("replay", "run_cli1", "--json", cwd=cwd)
    state = json.loads(r.stdout)
    assert state["status"] == "completed" and state["steps"]["square/2"]["output"] == 4
    assert little("replay", "run_cli1", cwd=cwd).returncode == 0
    assert little("events", "run_cli1", cwd=cwd).returncode == 0
    assert little("runs", cwd=cwd).returncode == 0
    r = little("artifacts", "run_cli1", "--json", cwd=cwd)
    assert r.returncode == 0 and json.loads(r.stdout) == []
    r = little("verify", cwd=cwd)
    assert r.returncode == 0 and "ok" in r.stdout
    # the same against a virtual world on local disk
    url = f"file://{tmp_path}/vw"
    r = little("--world", url, "run", "myflows:squares", "--input", '{"n": 3}', "--run-id", "run_v", cwd=cwd)
    assert r.returncode == 0, r.stderr
    r = little("events", "run_v", "--world", url, "--json", cwd=cwd)
    assert json.loads(r.stdout)[-1]["payload"]["output"] == {"sum": 5}


@pytest.mark.parametrize("args, needle", [
    (["run", "nosuchmodule:wf"], "cannot import module"),
    (["run", "json:dumps"], "is not a workflow"),
    (["run", "nocolon"], "MODULE:WORKFLOW"),
    (["run", "examples.quickstart:squares", "--input", "{bad"], "not valid JSON"),
    (["run", "examples.quickstart:squares", "--input", '{"n": "x"}'], "does not match its schema"),
    (["run", "examples.quickstart:squares", "--input", '{"n": 1}', "--run-id", "../x"], "invalid run id"),
    (["events", "run_missing"], "no run run_missing"),
    (["events", "bad id"], "invalid run id"),
    (["replay", "run_missing"], "no run run_missing"),
    (["--world", "nowhere", "runs"], "no world at"),  # a plain path: nothing ran there
    (["--world", "memory://x", "--data-dir", "d", "runs"], "not both"),
    (["nosuchcommand"], "No such command"),
])
def test_cli_user_mistakes_one_line_no_traceback(tmp_path, args, needle):
    r = little(*args, cwd=ROOT if args[0] == "run" else str(tmp_path))
    assert r.returncode != 0
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    assert needle in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) <= 3


def test_cli_verify_reports_tampering(tmp_path):
    import little_workflow as lw

    world = lw.local_world(str(tmp_path / "d"))
    m = world.write_artifact("run_t", "s", "n", {"a": 1})
    world.append_event("run_t", "step.succeeded", {"outputRef": m.artifact_ref})
    with open(os.path.join(world.data_dir, "artifacts", "blobs", m.artifact_id + ".bin"), "wb") as f:
        f.write(b"tampered")
    r = little("--data-dir", str(tmp_path / "d"), "verify", "--json", cwd=str(tmp_path))
    assert r.returncode == 1
    report = json.loads(r.stdout)
    assert not report["ok"] and "hashes to" in report["problems"]["artifacts"][0]


def test_cli_demo_kills_and_resumes(tmp_path):
    r = little("demo", "--data-dir", str(tmp_path / "demo"), cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "completed steps called again: none" in r.stdout
    assert "'total': 55" in r.stdout
