"""The examples run as users would run them."""

from __future__ import annotations

import os
import subprocess
import sys

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
    env = {**os.environ, "PYTHONPATH": ROOT}
    for script, needle in (("quickstart.py", "completed {'sum': 285}"),
                           ("learning_orchestrator.py", "run 3: plan ['scrape', 'search']"),
                           ("kill_and_resume.py", "completed steps called again: none")):
        r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", script)], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert needle in r.stdout, r.stdout
