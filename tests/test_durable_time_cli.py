"""`little worker`, `send`, `cancel`, `fork` and `runs` showing what waiting runs wait for,
driven in subprocesses as a user would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from checkout import SRC
from test_readme_and_cli import little

import little_workflow as lw

FLOWS = textwrap.dedent('''
    import little_workflow as lw

    @lw.workflow(id="approve")
    async def approve(ctx, input):
        draft = await ctx.step("draft", lambda: "draft of " + input["topic"])
        decision = await ctx.wait_for_event("decision", "approval")
        if not decision["ok"]:
            raise ValueError("rejected")
        return {"draft": draft, "approved": True}
''')


def state(cwd: str, run_id: str):
    return lw.materialize_run_state(lw.local_world(os.path.join(cwd, ".little-workflow")), run_id)


def wait_for(cond, timeout=30.0):
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "not reached in time"
        time.sleep(0.05)


def test_worker_send_runs_cancel_fork(tmp_path):
    cwd = str(tmp_path)
    with open(os.path.join(cwd, "approval_flows.py"), "w") as f:
        f.write(FLOWS)
    sys.path.insert(0, cwd)
    try:
        import approval_flows as flows
    finally:
        sys.path.remove(cwd)
    world = lw.local_world(os.path.join(cwd, ".little-workflow"))
    a = lw.start_workflow(flows.approve, {"topic": "a"}, world=world, run_id="run_a")
    b = lw.start_workflow(flows.approve, {"topic": "b"}, world=world, run_id="run_b")
    env = {**os.environ, "PYTHONPATH": SRC}
    worker = subprocess.Popen([sys.executable, "-m", "little_workflow.cli", "worker", "approval_flows"],
                              cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        wait_for(lambda: state(cwd, a).status == "waiting" and state(cwd, b).status == "waiting")
        rows = json.loads(little("runs", "--json", cwd=cwd).stdout)
        waiting = {r["runId"]: r["waiting"] for r in rows}
        assert waiting[a] == {"kind": "event", "stepPath": "decision", "name": "approval",
                              "deadline": None}
        wide = subprocess.run([sys.executable, "-m", "little_workflow.cli", "runs"], cwd=cwd,
                              env={**env, "COLUMNS": "250"}, capture_output=True, text=True)
        assert "decision: event 'approval'" in wide.stdout
        r = little("send", a, "approval", "--payload", '{"ok": true}', "--idempotency-key", "m1",
                   cwd=cwd)
        assert r.returncode == 0, r.stderr
        wait_for(lambda: state(cwd, a).status == "completed")
        assert state(cwd, a).output == {"draft": "draft of a", "approved": True}
        assert little("send", b, "approval", "--payload", '{"ok": false}', cwd=cwd).returncode == 0
        wait_for(lambda: state(cwd, b).status == "failed")
        r = little("fork", b, "--from-step", "decision", "--run-id", "run_b2", cwd=cwd)
        assert r.returncode == 0 and r.stdout.strip() == "run_b2", r.stderr
        wait_for(lambda: state(cwd, "run_b2").status == "waiting")
        r = little("cancel", "run_b2", "--reason", "enough", cwd=cwd)
        assert r.returncode == 0 and "cancelled" in r.stdout
        assert state(cwd, "run_b2").status == "cancelled"
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert "worker stopped" in err
    for args in (("send", "run_nobody", "x"), ("send", "bad id", "x"),
                 ("send", a, "x", "--payload", "{nope"), ("cancel", "run_nobody"),
                 ("fork", a), ("worker", "no_such_module")):
        r = little(*args, cwd=cwd)
        assert r.returncode != 0 and r.stderr.count("\n") == 1, (args, r.stderr)
        assert "Traceback" not in r.stderr


def test_little_cancel_from_another_process_stops_a_run_busy_with_fast_steps(tmp_path):
    """A run that never waits still sees a cancel request another process appended: it
    reads its log for other writers' events at a step boundary at least every second
    (and only what others wrote since, not its own thousands of events)."""
    data = str(tmp_path / ".little-workflow")
    world = lw.local_world(data)
    calls = []

    def tick(i):
        calls.append(i)
        time.sleep(0.002)
        return i

    @lw.workflow(id="busy")
    async def busy(ctx, input):
        for i in range(3000):
            await ctx.step(f"s{i}", tick, i)

    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(lw.run_workflow, busy, None, world=world, run_id="run_busy")
        wait_for(lambda: len(calls) > 50)
        r = little("cancel", "run_busy", "--reason", "enough", cwd=str(tmp_path))
        assert r.returncode == 0, r.stderr
        asked_at = len(calls)
        try:
            fut.result(timeout=30)
            raise AssertionError("the run was not cancelled")
        except lw.RunCancelledError:
            pass
    assert len(calls) < 3000 and len(calls) - asked_at < 1500, (asked_at, len(calls))
    assert lw.materialize_run_state(world, "run_busy").status == "cancelled"
