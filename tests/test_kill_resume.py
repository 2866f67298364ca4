"""SIGKILL a real subprocess at many points; every resume finishes with the right output
and no step whose success was committed is ever called again."""

from __future__ import annotations

import random

import pytest

import crash_child
from crashes import kill_and_resume

ALL_STEPS = ({f"serial-{i}" for i in range(crash_child.SERIAL)}
             | {f"fan/{i}" for i in range(crash_child.PARALLEL)} | {"big"})


@pytest.mark.parametrize("kind", ["local_world", "virtual-local"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_at_random_points_then_resume(kind, seed, tmp_path):
    rng = random.Random(seed)
    outcome = kill_and_resume(kind, str(tmp_path / "data"), f"run_kill{seed}", rng=rng,
                              kills=4, delay=0.03, max_kill_after=0.9)
    assert "RESULT True" in outcome["stdout"], outcome["stderr"][-2000:]
    assert outcome["violations"] == []
    state = outcome["state"]
    assert state.status == "completed" and state.output == crash_child.EXPECTED
    assert {p for p, s in state.steps.items() if s.status == "succeeded"} == ALL_STEPS
    assert set(outcome["ledger"]) == ALL_STEPS  # nothing lost: every step ran at least once
