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
from checkout import as_from_a_terminal
from crashes import TESTS, child_env, read_ledger

import little_workflow as lw


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


CTRL_C_SCRIPT = """
import sys, time
import little_workflow as lw

def tick(i):
    print("step", i, flush=True)
    time.sleep(0.05)
    return i

@lw.workflow(id="ticks")
async def ticks(ctx, input):
    return sum([await ctx.step(f"t{i}", tick, i) for i in range(input)])

try:
    lw.run_workflow(ticks, 200, world=lw.local_world(sys.argv[1]), run_id="run_ctrlc")
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def test_ctrl_c_stops_run_workflow_of_sync_steps_at_once_and_the_run_resumes(tmp_path):
    """Ctrl-C in a plain script (not the CLI) stops a run of synchronous steps at once,
    as in any Python program; the run is left unfinished and resumes where it stopped."""
    import signal as signal_
    import subprocess
    import sys

    data = str(tmp_path / "d")
    script = tmp_path / "ticks.py"
    script.write_text(CTRL_C_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), data], stdout=subprocess.PIPE,
                            text=True, preexec_fn=as_from_a_terminal)
    for line in proc.stdout:
        if line.startswith("step 5"):
            break
    proc.send_signal(signal_.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in out, out[-500:]
    world = lw.local_world(data)
    state = lw.materialize_run_state(world, "run_ctrlc")
    assert state.status == "running"  # unfinished, as after a crash
    done = [s for s in state.steps.values() if s.status == "succeeded"]
    # "At once" by what ran, not by a clock (the machine may be loaded): a few steps past
    # the fifth, not the remaining 195.
    assert 5 <= len(done) < 20
    world.close()
    again = subprocess.run([sys.executable, str(script), data], capture_output=True, text=True,
                           timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    ran = [int(line.split()[1]) for line in again.stdout.splitlines() if line.startswith("step")]
    assert ran == list(range(len(done), 200))  # no committed step ran again
    assert lw.materialize_run_state(lw.local_world(data), "run_ctrlc").status == "completed"
