"""The demos `little demo` runs.

Demo 1 (`little demo`, `python examples/kill_and_resume.py`): a run killed mid-flight with
SIGKILL, started again, continuing without re-calling the steps it had completed.

Demo 2 (`little demo approval`, `python examples/approval.py`): a run drafts, sleeps on a
durable timer, waits for an approval; its process is SIGKILLed while it waits, the
approval is sent from another process with `little send`, and a worker finishes it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any, Callable

import little_workflow as lw

STEPS = 6
LEDGER_ENV = "LITTLE_DEMO_LEDGER"


def _work(i: int, delay: float) -> dict[str, Any]:
    # The ledger records every real call, so the demo can prove what ran twice (nothing).
    with open(os.environ[LEDGER_ENV], "a") as f:
        f.write(f"{os.getpid()} square-{i}\n")  # named as the step path is
    time.sleep(delay)
    return {"step": i, "square": i * i}


@lw.workflow(id="demo-squares", input_schema={
    "type": "object", "properties": {"steps": {"type": "integer", "minimum": 1},
                                     "delay": {"type": "number", "minimum": 0}},
    "required": ["steps"],
})
async def squares(ctx: lw.RunContext, input: dict[str, Any]) -> dict[str, Any]:
    results = []
    for i in range(input["steps"]):
        results.append(await ctx.step(f"square-{i}", _work, i, input.get("delay", 0.4)))
    return {"total": sum(r["square"] for r in results)}


def _child(data_dir: str, run_id: str) -> None:
    lw.run_workflow(squares, {"steps": STEPS, "delay": 0.4},
                    world=lw.local_world(data_dir), run_id=run_id)


def _ledger(path: str) -> list[str]:
    try:
        with open(path) as f:
            return [line.split()[1] for line in f if line.strip()]
    except FileNotFoundError:
        return []


def run_demo(data_dir: str = ".little-workflow", say: Callable[[str], None] = print) -> dict[str, Any]:
    data_dir = os.path.abspath(data_dir)
    world = lw.local_world(data_dir)
    run_id = "run_demo_" + os.urandom(4).hex()
    ledger = os.path.join(data_dir, "runs", run_id, "scratch", "ledger.txt")
    os.makedirs(os.path.dirname(ledger), exist_ok=True)
    env = {**os.environ, LEDGER_ENV: ledger}
    say(f"1. starting run {run_id} ({STEPS} steps) in a child process, data in {data_dir}")
    child = subprocess.Popen(
        [sys.executable, "-c",
         f"from little_workflow.demo import _child; _child({data_dir!r}, {run_id!r})"],
        env=env,
    )
    deadline = time.time() + 60
    while time.time() < deadline:
        state = lw.materialize_run_state(world, run_id) if world.list_events(run_id) else None
        done = [p for p, s in (state.steps.items() if state else []) if s.status == "succeeded"]
        if len(done) >= 3:
            break
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    before = _ledger(ledger)
    state = lw.materialize_run_state(world, run_id)
    completed = sorted(p for p, s in state.steps.items() if s.status == "succeeded")
    say(f"2. killed the child with SIGKILL; committed steps: {', '.join(completed)}")
    say(f"   run status in the log: {state.status}")
    os.environ[LEDGER_ENV] = ledger
    result = lw.run_workflow(squares, {"steps": STEPS, "delay": 0.4}, world=world, run_id=run_id)
    after = _ledger(ledger)[len(before):]
    say(f"3. started run {run_id} again: it called only {', '.join(after) or 'nothing'}")
    rerun = sorted(set(after) & set(completed))
    say(f"   completed steps called again: {', '.join(rerun) or 'none'}")
    say(f"4. output: {result.output} (status {result.status})")
    return {"runId": run_id, "completedBeforeKill": completed, "calledAfterResume": after,
            "recalled": rerun, "output": result.output}




# ---- demo 2: approval -------------------------------------------------------------------

def write_draft(topic: str) -> str:
    if os.environ.get(LEDGER_ENV):  # the demo counts real calls; by hand there is no ledger
        with open(os.environ[LEDGER_ENV], "a") as f:
            f.write(f"{os.getpid()} draft\n")
    return f"A short note about {topic}."


@lw.workflow(id="demo-approval", input_schema={
    "type": "object", "properties": {"topic": {"type": "string"},
                                     "coolOff": {"type": "number", "minimum": 0}},
    "required": ["topic"],
})
async def approve(ctx: lw.RunContext, input: dict[str, Any]) -> dict[str, Any]:
    draft = await ctx.step("draft", write_draft, input["topic"])
    await ctx.sleep("cool-off", input.get("coolOff", 2))                  # durable timer
    decision = await ctx.wait_for_event("decision", "approval", timeout=86400)
    return {"draft": draft, "approved": bool(decision and decision.get("ok"))}


def _little(data_dir: str, *args: str) -> list[str]:
    """The `little` CLI as a real subprocess of this interpreter."""
    return [sys.executable, "-m", "little_workflow.cli", "--data-dir", data_dir, *args]


def _shown(args: list[str]) -> str:
    import shlex

    return "little " + shlex.join(args)


def run_approval_demo(data_dir: str = ".little-workflow", say: Callable[[str], None] = print,
                      cool_off: float = 2.0) -> dict[str, Any]:
    import json

    data_dir = os.path.abspath(data_dir)
    world = lw.local_world(data_dir)
    run_id = "run_approval_" + os.urandom(4).hex()
    ledger = os.path.join(data_dir, "runs", run_id, "scratch", "ledger.txt")
    os.makedirs(os.path.dirname(ledger), exist_ok=True)
    env = {**os.environ, LEDGER_ENV: ledger}
    payload = json.dumps({"topic": "the release", "coolOff": cool_off})
    run_args = ["run", "little_workflow.demo:approve", "--run-id", run_id, "--input", payload]
    say(f"1. starting run {run_id} in a child process, data in {data_dir}:")
    say(f"   {_shown(run_args)}")
    child = subprocess.Popen(_little(data_dir, *run_args), env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60 + cool_off
        state = None
        while time.time() < deadline:
            if world.list_events(run_id):
                state = lw.materialize_run_state(world, run_id)
                if state.status == "waiting" and (state.waiting or {}).get("kind") == "event":
                    break
            if child.poll() is not None:
                raise RuntimeError(f"the demo's child process ended early (exit {child.returncode})")
            time.sleep(0.05)
        else:
            raise RuntimeError(f"run {run_id} never reached its wait for the approval")
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
        child.wait()
    state = lw.materialize_run_state(world, run_id)
    events = world.list_events(run_id)
    fired = [e for e in events if e.type == "timer.fired"]
    say(f"2. the run drafted (step 'draft' {state.steps['draft'].status}), slept {cool_off:g} s "
        f"on a durable timer ({'fired' if fired else 'not fired'}), and now waits for the event "
        f"'{(state.waiting or {}).get('name')}'")
    say(f"   killed its process with SIGKILL while it waits (exit {child.returncode}); "
        f"status in the log: {state.status}")
    send_args = ["send", run_id, "approval", "--payload", '{"ok": true}']
    sent = subprocess.run(_little(data_dir, *send_args), env=env, capture_output=True, text=True,
                          timeout=60)
    if sent.returncode != 0:
        raise RuntimeError(f"little send failed: {sent.stderr.strip()}")
    say(f"3. no process runs it; another process sends the approval: {_shown(send_args)}")
    say(f"   {sent.stdout.strip()}")
    worker_args = ["worker", "little_workflow.demo:approve", "--until-idle"]
    say(f"4. a worker in another process picks the run up: {_shown(worker_args)}")
    worked = subprocess.run(_little(data_dir, *worker_args), env=env, capture_output=True,
                            text=True, timeout=120)
    if worked.returncode != 0:
        raise RuntimeError(f"little worker failed: {worked.stderr.strip()}")
    final = lw.materialize_run_state(world, run_id)
    calls = _ledger(ledger)
    say(f"   run {run_id} {final.status}: {final.output}")
    say(f"5. the draft step was called {calls.count('draft')} time(s) in all: "
        f"{'not called again' if calls.count('draft') == 1 else 'CALLED AGAIN'} after the kill")
    world.close()
    return {"runId": run_id, "status": final.status, "output": final.output,
            "draftCalls": calls.count("draft"), "timerFired": bool(fired)}


if __name__ == "__main__":
    run_demo(sys.argv[1] if len(sys.argv) > 1 else ".little-workflow")
