"""Helpers for SIGKILL tests: the child's environment, its ledger, the committed steps."""

from __future__ import annotations

import os

from checkout import SRC

import little_workflow as lw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")


def child_env(ledger: str) -> dict[str, str]:
    return {**os.environ, "LW_LEDGER": ledger,
            "PYTHONPATH": os.pathsep.join([SRC, TESTS, os.environ.get("PYTHONPATH", "")])}


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
