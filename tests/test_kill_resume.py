"""SIGKILL torture: subprocess runs killed at random moments, on local_world and on
virtual_world over local disk, each resumed to completion. The ledger of step calls shows
no committed step run twice and none missing. LW_TORTURE_TRIALS sets the number of kills
(default 20 for CI; 100 for the full torture)."""

from __future__ import annotations

import math
import os
import random

import crash_child
import pytest
from crashes import kill_and_resume

ALL_STEPS = ({f"serial-{i}" for i in range(crash_child.SERIAL)}
             | {f"fan/{i}" for i in range(crash_child.PARALLEL)} | {"big"})
TRIALS = int(os.environ.get("LW_TORTURE_TRIALS", "20"))
KILLS_PER_RUN = 4


@pytest.mark.parametrize("kind", ["local_world", "virtual-local"])
def test_sigkill_torture(kind, tmp_path):
    kills = TRIALS // 2
    runs = math.ceil(kills / KILLS_PER_RUN)
    rng = random.Random(kind)
    done = 0
    for r in range(runs):
        n = min(KILLS_PER_RUN, kills - r * KILLS_PER_RUN)
        outcome = kill_and_resume(kind, str(tmp_path / f"data{r}"), f"run_torture{r}", rng=rng,
                                  kills=n, delay=0.02, max_kill_after=0.8)
        assert "RESULT True" in outcome["stdout"], outcome["stderr"][-2000:]
        assert outcome["violations"] == [], outcome["violations"]
        state = outcome["state"]
        assert state.status == "completed" and state.output == crash_child.EXPECTED
        assert {p for p, s in state.steps.items() if s.status == "succeeded"} == ALL_STEPS
        assert set(outcome["ledger"]) == ALL_STEPS  # none missing
        done += n
    print(f"\n{kind}: {done} SIGKILLs at random moments, {runs} runs resumed correctly")
    assert done == kills
