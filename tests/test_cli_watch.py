"""`little start` (create a run for a worker, optionally wait for its result from this
process) and `little stream` (print a run's durable stream as it is written), driven as a
user would, in subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest
from checkout import SRC

import little_workflow as lw

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, TESTS])}
LITTLE = [sys.executable, "-m", "little_workflow.cli"]


def little(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LITTLE, *args], cwd=TESTS, capture_output=True, text=True,
                          timeout=timeout, env=ENV)


def popen_little(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*LITTLE, *args], cwd=TESTS, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV)


def one_line_error(r: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert r.returncode not in (0, None), r.stdout
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def wait_for_run(data: str, run_id: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with lw.local_world(data, read_only=True) as world:
                if world.list_events(run_id):
                    return
        except lw.StorageError:  # the starting process has not written its World yet
            pass
        time.sleep(0.05)
    raise AssertionError(f"{run_id} was never created")


@pytest.fixture
def data(tmp_path: Any) -> str:
    return str(tmp_path / "data")


def test_start_creates_the_run_for_a_worker_and_prints_its_id(data: str) -> None:
    r = little("start", "watch_flows:greet", "--input", '{"name": "ada"}', "--run-id",
               "run_cs1", "--data-dir", data)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "run_cs1"
    with lw.local_world(data) as world:
        assert lw.get_run(world, "run_cs1").status() == "created"  # not executed here
    worker = little("worker", "watch_flows", "--until-idle", "--data-dir", data)
    assert worker.returncode == 0, worker.stderr
    with lw.local_world(data) as world:
        assert lw.get_run(world, "run_cs1").result(timeout=0) == {"text": "hello ada"}


def test_start_wait_prints_the_result_a_worker_process_produced(data: str, tmp_path: Any) -> None:
    gate = str(tmp_path / "gate")
    waiting = popen_little("start", "watch_flows:priced", "--input",
                           json.dumps({"item": "tea", "gate": gate}), "--run-id", "run_cs2",
                           "--wait", "--data-dir", data)
    try:
        wait_for_run(data, "run_cs2")
        worker = popen_little("worker", "watch_flows", "--until-idle", "--data-dir", data)
        open(gate, "w").close()
        assert worker.wait(120) == 0
        out, err = waiting.communicate(timeout=60)
    finally:
        for proc in (waiting,):
            if proc.poll() is None:
                proc.kill()
    assert waiting.returncode == 0, err
    lines = out.splitlines()
    assert lines[0] == "run_cs2 completed"
    # Typed like the workflow's output (a Quote with a Decimal), shown as JSON.
    assert json.loads("\n".join(lines[1:])) == {"item": "tea", "price": "4.20"}


def test_start_wait_json_and_a_run_that_already_completed(data: str) -> None:
    assert little("run", "watch_flows:greet", "--input", '{"name": "bo"}', "--run-id",
                  "run_cs3", "--data-dir", data).returncode == 0
    r = little("start", "watch_flows:greet", "--input", '{"name": "bo"}', "--run-id",
               "run_cs3", "--wait", "--json", "--data-dir", data)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"runId": "run_cs3", "status": "completed",
                                    "output": {"text": "hello bo"}, "workflowId": "greet"}


def test_start_wait_timeout_and_user_mistakes_are_one_line(data: str) -> None:
    r = little("start", "watch_flows:greet", "--input", '{"name": "cy"}', "--run-id",
               "run_cs4", "--wait", "--timeout", "0.2", "--json", "--data-dir", data)
    one_line_error(r, "run_cs4", "0.2")
    with lw.local_world(data) as world:  # created all the same, for a worker
        assert lw.get_run(world, "run_cs4").status() == "created"
    one_line_error(little("start", "watch_flows:greet", "--input", "{nope", "--data-dir", data),
                   "--input")
    one_line_error(little("start", "no_such_module:wf", "--input", "{}", "--data-dir", data),
                   "no_such_module")
    one_line_error(little("start", "watch_flows:greet", "--input", '{"name": "other"}',
                          "--run-id", "run_cs4", "--data-dir", data), "run_cs4")


def test_stream_prints_each_value_as_a_json_line(data: str, tmp_path: Any) -> None:
    ledger = str(tmp_path / "ledger")
    with lw.local_world(data) as world:
        lw.run_workflow(lw_tokens(), {"n": 3, "ledger": ledger}, world=world, run_id="run_ss1")
    r = little("stream", "run_ss1", "tokens", "--data-dir", data)
    assert r.returncode == 0, r.stderr
    assert [json.loads(line) for line in r.stdout.splitlines()] == [
        {"i": i, "text": f"token-{i}"} for i in range(3)]
    r = little("stream", "run_ss1", "tokens", "--after", "2", "--data-dir", data)
    assert [json.loads(line) for line in r.stdout.splitlines()] == [{"i": 2, "text": "token-2"}]
    assert little("stream", "run_ss1", "other", "--data-dir", data).stdout == ""  # ended run
    one_line_error(little("stream", "run_nope", "tokens", "--data-dir", data), "run_nope")
    one_line_error(little("stream", "not-a-run-id", "tokens", "--data-dir", data),
                   "not-a-run-id")


def test_stream_follows_a_run_another_process_executes(data: str, tmp_path: Any) -> None:
    ledger = str(tmp_path / "ledger")
    with lw.local_world(data) as world:
        lw.start_workflow(lw_tokens(), {"n": 4, "ledger": ledger}, world=world, run_id="run_ss2")
    follower = popen_little("stream", "run_ss2", "tokens", "--data-dir", data)
    try:
        time.sleep(0.5)  # the follower waits on a stream not written yet
        assert follower.poll() is None
        worker = little("worker", "watch_flows", "--until-idle", "--data-dir", data)
        assert worker.returncode == 0, worker.stderr
        out, err = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, err
    assert [json.loads(line)["i"] for line in out.splitlines()] == [0, 1, 2, 3]


def lw_tokens() -> Any:
    sys.path.insert(0, TESTS)
    from watch_flows import tokens

    return tokens
