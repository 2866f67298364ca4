"""`little worker` says what it does: a line per run started, completed, failed or left
waiting (or one JSON object per line with --json), right counts and plurals at the end;
a first Ctrl-C says what it waits for, a second stops at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from checkout import SRC

import little_workflow as lw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLOWS = '''
import time

import little_workflow as lw


def broken(n):
    raise ValueError(f"row {n} is bad")


@lw.workflow(id="breaks")
async def breaks(ctx, input):
    return await ctx.step("parse", broken, input["n"], retry=lw.Retry(max_attempts=1))


@lw.workflow(id="fine")
async def fine(ctx, input):
    return await ctx.step("add", lambda: input["n"] + 1)


@lw.workflow(id="slow")
async def slow(ctx, input):
    await ctx.step("long", time.sleep, 60)
    return "done"
'''


def project(tmp_path):
    (tmp_path / "flows.py").write_text(FLOWS)
    sys.path.insert(0, str(tmp_path))
    sys.modules.pop("flows", None)
    try:
        import flows
    finally:
        sys.path.remove(str(tmp_path))
    return flows, lw.local_world(str(tmp_path / ".little-workflow"))


def worker(*args: str, cwd) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "little_workflow.cli", "worker", *args], cwd=cwd,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_line_per_run_and_true_counts(tmp_path):
    flows, world = project(tmp_path)
    for i in range(3):
        lw.start_workflow(flows.breaks, {"n": i}, world=world, run_id=f"run_bad{i}")
    lw.start_workflow(flows.fine, {"n": 1}, world=world, run_id="run_good")
    out, err = worker("flows", "--until-idle", cwd=tmp_path).communicate(timeout=120)
    for i in range(3):
        assert f"run_bad{i} failed: step 'parse' failed: ValueError: row {i} is bad" in err, err
        assert f"run_bad{i} started (workflow breaks)" in err, err
    assert "run_good completed" in err, err
    assert err.strip().splitlines()[-1] == "worker stopped: 4 runs started: 1 completed, 3 failed", err


def test_one_run_is_singular(tmp_path):
    flows, world = project(tmp_path)
    lw.start_workflow(flows.fine, {"n": 1}, world=world, run_id="run_one")
    out, err = worker("flows", "--until-idle", cwd=tmp_path).communicate(timeout=120)
    assert err.strip().splitlines()[-1] == "worker stopped: 1 run started: 1 completed", err


def test_json_lines(tmp_path):
    flows, world = project(tmp_path)
    lw.start_workflow(flows.breaks, {"n": 7}, world=world, run_id="run_bad")
    lw.start_workflow(flows.fine, {"n": 1}, world=world, run_id="run_good")
    out, err = worker("flows", "--until-idle", "--json", cwd=tmp_path).communicate(timeout=120)
    lines = [json.loads(line) for line in out.splitlines()]
    by_run = {}
    for line in lines:
        by_run.setdefault(line["runId"], []).append(line["event"])
    assert by_run == {"run_bad": ["started", "failed"], "run_good": ["started", "completed"]}, lines
    failed = next(line for line in lines if line["event"] == "failed")
    assert failed["workflowId"] == "breaks" and failed["error"]["type"] == "StepFailedError"
    assert "row 7 is bad" in failed["error"]["message"]


def wait_for_line(stream, text: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    seen = ""
    while time.monotonic() < deadline:
        line = stream.readline()
        seen += line
        if text in line:
            return seen
    raise AssertionError(f"no {text!r} in {seen!r}")


def test_first_ctrl_c_says_what_it_waits_for_second_stops_at_once(tmp_path):
    flows, world = project(tmp_path)
    lw.start_workflow(flows.slow, {}, world=world, run_id="run_slow")
    p = worker("flows", cwd=tmp_path)
    try:
        wait_for_line(p.stderr, "run_slow started")
        time.sleep(0.5)  # into the step's time.sleep
        p.send_signal(signal.SIGINT)
        said = wait_for_line(p.stderr, "Ctrl-C again")
        assert "waiting for 1 run in flight (run_slow)" in said, said
        assert p.poll() is None  # still waiting for the run
        t = time.monotonic()
        p.send_signal(signal.SIGINT)
        p.wait(timeout=20)
        assert time.monotonic() - t < 10
    finally:
        if p.poll() is None:
            p.kill()
    rest = p.stderr.read()
    assert p.returncode == 130, rest
    assert "stopped at once: run_slow left unfinished" in rest, rest
    state = lw.materialize_run_state(lw.local_world(str(tmp_path / ".little-workflow")), "run_slow")
    assert state.status == "running"  # unfinished: a worker resumes it
