"""The examples run as users would run them."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from checkout import SRC
from conftest import private_memory

import little_workflow as lw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_learning_orchestrator_improves_its_plan():
    sys.path.insert(0, ROOT)
    from examples.learning_orchestrator import main

    world = lw.virtual_world(private_memory(), "/wf")
    outputs = main(world, runs=3)
    calls = [o["toolCalls"] for o in outputs]
    assert calls[0] == 4 and calls[1] == 2 and calls[2] == 2
    assert outputs[1]["plan"] == ["scrape", "search"]
    assert all(o["report"] == outputs[0]["report"] for o in outputs)
    assert world.memory("pipeline", _pipeline_key()).read_json("lessons.json")["useless"] == [
        "ask-forum", "translate"]


def _pipeline_key():
    from examples.learning_orchestrator import research, write_report
    from little_workflow.runtime.memory import pipeline_key

    return pipeline_key([research.definition_hash, write_report.definition_hash])


def test_example_scripts_run(tmp_path):
    env = {**os.environ, "PYTHONPATH": SRC}
    for script, needle in (("quickstart.py", "completed {'sum': 285}"),
                           ("learning_orchestrator.py", "run 3: plan ['scrape', 'search']"),
                           ("kill_and_resume.py", "completed steps called again: none")):
        r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", script)], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert needle in r.stdout, r.stdout


def _approval_checks(data_dir: str, stdout: str) -> None:
    """The demo's printed story, checked against the run's log and its call ledger."""
    run_id = re.search(r"starting run (run_approval_[0-9a-f]+)", stdout).group(1)
    assert "slept 2 s on a durable timer (fired), and now waits for the event 'approval'" in stdout
    assert "killed its process with SIGKILL while it waits (exit -9); status in the log: waiting" in stdout
    assert f"little send {run_id} approval --payload" in stdout
    assert f"sent approval to {run_id}" in stdout
    assert f"run {run_id} completed: {{'approved': True," in stdout
    assert "the draft step was called 1 time(s) in all: not called again after the kill" in stdout
    world = lw.local_world(data_dir)
    types = [e.type for e in world.list_events(run_id)]
    # Started twice (the killed child, then the worker); one draft; one timer; one event.
    assert types.count("run.started") == 2 and types.count("step.started") == 1
    assert types.index("timer.fired") < types.index("wait.started") < types.index("signal.received")
    assert types.index("signal.received") < types.index("run.completed")
    state = lw.materialize_run_state(world, run_id)
    assert state.status == "completed" and state.output["approved"] is True
    with open(os.path.join(data_dir, "runs", run_id, "scratch", "ledger.txt")) as f:
        assert [line.split()[1] for line in f] == ["draft"]
    world.close()


def test_approval_example_survives_sigkill_and_finishes_under_a_worker(tmp_path):
    env = {**os.environ, "PYTHONPATH": SRC}
    data_dir = str(tmp_path / "data")
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "approval.py"), data_dir],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    _approval_checks(data_dir, r.stdout)


def test_little_demo_approval(tmp_path):
    env = {**os.environ, "PYTHONPATH": SRC}
    data_dir = str(tmp_path / "data")
    r = subprocess.run([sys.executable, "-m", "little_workflow.cli", "demo", "approval",
                        "--data-dir", data_dir], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    _approval_checks(data_dir, r.stdout)
    bad = subprocess.run([sys.executable, "-m", "little_workflow.cli", "demo", "nope"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr and "nope" in bad.stderr


@pytest.mark.parametrize("script, answer_line", [
    ("agent_pydantic_ai.py", "completed {'answer': 'Your order A-17 is a kettle; kettles are back in stock on Friday.', 'modelRequests': 3}"),
    ("agent_langgraph.py", "answer: Your order A-17 is a kettle; kettles are back in stock on Friday."),
])
def test_agent_examples_survive_sigkill_mid_tool_call(tmp_path, script, answer_line):
    env = {**os.environ, "PYTHONPATH": SRC}
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", script), str(tmp_path / "data")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "first process: killed by SIGKILL" in lines, r.stdout
    assert answer_line in lines, r.stdout
    # Only the interrupted tool call runs again, then the last model turn.
    assert any(line.startswith("calls after resuming: ['tool check_stock', 'model ") for line in lines), r.stdout
    assert lines[-1].endswith(": none"), r.stdout
    with open(tmp_path / "data" / "calls.log") as f:
        calls = [line.strip() for line in f]
    assert calls.count("tool lookup_order") == 1 and calls.count("tool check_stock") == 2
