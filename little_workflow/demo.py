"""Demo 1: a run killed mid-flight with SIGKILL, started again, continuing without
re-calling the steps it had completed. `little demo` runs it; so does
`python examples/kill_and_resume.py`."""

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
        f.write(f"{os.getpid()} step-{i}\n")
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
    rerun = sorted(set(after) & {p.replace("square-", "step-") for p in completed})
    say(f"   completed steps called again: {', '.join(rerun) or 'none'}")
    say(f"4. output: {result.output} (status {result.status})")
    return {"runId": run_id, "completedBeforeKill": completed, "calledAfterResume": after,
            "recalled": rerun, "output": result.output}


if __name__ == "__main__":
    run_demo(sys.argv[1] if len(sys.argv) > 1 else ".little-workflow")
