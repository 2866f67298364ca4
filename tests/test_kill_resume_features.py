"""SIGKILL mid-cycle of an outer loop, inside a pipeline's sub-run, and in the middle of
a step that made several model calls: each resumes with no committed work re-called."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import crash_scenarios
import pytest
from crashes import TESTS, child_env, read_ledger


@pytest.mark.parametrize("scenario", ["outer", "pipeline", "agent"])
def test_sigkill_then_resume(scenario, tmp_path):
    data = str(tmp_path / "d")
    ledger = str(tmp_path / "ledger.txt")
    rng = random.Random(scenario)
    cmd = [sys.executable, os.path.join(TESTS, "crash_scenarios.py"), scenario, data, "run_crash"]
    violations = []
    for _ in range(5):
        before = len(read_ledger(ledger))
        done_before = crash_scenarios.committed(data) if os.path.exists(data) else set()
        proc = subprocess.Popen(cmd, env=child_env(ledger), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.2, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        violations += sorted(set(read_ledger(ledger)[before:]) & done_before)
    before = len(read_ledger(ledger))
    done_before = crash_scenarios.committed(data)
    final = subprocess.run(cmd, env=child_env(ledger), capture_output=True, text=True, timeout=120)
    violations += sorted(set(read_ledger(ledger)[before:]) & done_before)
    assert "RESULT True" in final.stdout, final.stderr[-3000:]
    assert violations == []
    # every piece of work committed exactly once in the log, and was called at least once
    # (the agent step itself writes no ledger line: only its model calls do)
    assert crash_scenarios.committed(data) - {"run_crash:agent"} == set(read_ledger(ledger))
