"""Helpers for SIGKILL tests: run a child, kill it at a random moment, resume."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import little_workflow as lw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")


def child_env(ledger: str) -> dict[str, str]:
    return {**os.environ, "LW_LEDGER": ledger,
            "PYTHONPATH": os.pathsep.join([ROOT, TESTS, os.environ.get("PYTHONPATH", "")])}


def read_ledger(path: str) -> list[str]:
    try:
        with open(path) as f:
            return [line.strip() for line in f if line.strip()]
    except FileNotFoundError:
        return []


def committed_steps(world: lw.World, run_id: str) -> set[str]:
    if not world.list_events(run_id):
        return set()
    state = lw.materialize_run_state(world, run_id)
    return {p for p, s in state.steps.items() if s.status == "succeeded"}


def kill_and_resume(kind: str, data_dir: str, run_id: str, *, rng: random.Random,
                    kills: int, delay: float, max_kill_after: float) -> dict:
    """Start the reference run `kills` times, each killed with SIGKILL after a random
    time, then once more to completion. Returns what the ledger and log show."""
    import crash_child

    ledger = os.path.join(data_dir + "-ledger.txt")
    violations: list[str] = []
    for _ in range(kills):
        before = len(read_ledger(ledger))
        world = crash_child.open_world(kind, data_dir)
        committed_before = committed_steps(world, run_id)
        proc = subprocess.Popen(
            [sys.executable, os.path.join(TESTS, "crash_child.py"), kind, data_dir, run_id, str(delay)],
            env=child_env(ledger), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.0, max_kill_after))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        rerun = set(read_ledger(ledger)[before:]) & committed_before
        violations += sorted(rerun)
    committed_before = committed_steps(crash_child.open_world(kind, data_dir), run_id)
    before = len(read_ledger(ledger))
    proc = subprocess.run(
        [sys.executable, os.path.join(TESTS, "crash_child.py"), kind, data_dir, run_id, str(delay)],
        env=child_env(ledger), capture_output=True, text=True, timeout=120)
    violations += sorted(set(read_ledger(ledger)[before:]) & committed_before)
    world = crash_child.open_world(kind, data_dir)
    state = lw.materialize_run_state(world, run_id)
    return {"stdout": proc.stdout, "stderr": proc.stderr, "violations": violations,
            "state": state, "ledger": read_ledger(ledger)}
