"""SIGKILL torture, every kill landing mid-run: on local_world and on virtual_world over local
disk, a child process runs the reference workflow and writes a marker each time the
workflow body sees a step succeed; the test waits for a random k-th marker, lets a random
fraction of a step go by, kills the child with SIGKILL, checks the log, and starts it
again. Counted: kills that landed mid-run (the run not finished), acknowledged steps lost
(must be 0) and steps called again after their success was acknowledged or committed
(must be 0). LW_TORTURE_TRIALS sets the kills per kind (default 8; 20 under LW_SOAK=1,
as in CI; 100 for the full torture)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import crash_child
import pytest
from crashes import TESTS, child_env, committed_steps, read_ledger
from soak import soak_size

import little_workflow as lw

ALL_STEPS = ({f"serial-{i}" for i in range(crash_child.SERIAL)}
             | {f"fan/{i}" for i in range(crash_child.PARALLEL)} | {"big"})
TRIALS = soak_size("LW_TORTURE_TRIALS", short=8, full=20)
KILLS_PER_RUN = 4
DELAY = 0.02


def child(kind: str, data_dir: str, run_id: str, journal: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, os.path.join(TESTS, "crash_child.py"), kind, data_dir, run_id, str(DELAY)],
        env=child_env(journal), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_markers(proc: subprocess.Popen, journal: str, start: int, k: int) -> None:
    """Until this launch (journal lines from `start`) has written `k` ack markers."""
    deadline = time.monotonic() + 120
    while sum(line.startswith("ack ") for line in read_ledger(journal)[start:]) < k:
        if proc.poll() is not None:
            raise AssertionError(f"the child ended before marker {k}: {proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no marker {k} after 120 s")
        time.sleep(0.002)


class Counts:
    def __init__(self) -> None:
        self.kills = self.mid_run = self.lost = self.rerun = 0
        self.problems: list[str] = []


def torture_one_run(kind: str, data_dir: str, run_id: str, kills: int, rng: random.Random,
                    counts: Counts) -> None:
    journal = data_dir + "-journal.txt"
    acked: set[str] = set()
    for _ in range(kills):
        start = len(read_ledger(journal))
        committed_before = committed_steps(crash_child.open_world(kind, data_dir), run_id)
        proc = child(kind, data_dir, run_id, journal)
        # Marker k < MARKERS: at least the long last step is still to come.
        wait_for_markers(proc, journal, start, rng.randint(1, crash_child.MARKERS - 1))
        time.sleep(rng.uniform(0, DELAY))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        counts.kills += 1
        world = crash_child.open_world(kind, data_dir)
        state = lw.materialize_run_state(world, run_id)
        counts.mid_run += state.status != "completed"
        lines = read_ledger(journal)[start:]
        acked |= {line[4:] for line in lines if line.startswith("ack ")}
        lost = acked - committed_steps(world, run_id)
        counts.lost += len(lost)
        again = {line for line in lines if not line.startswith("ack ")} & committed_before
        counts.rerun += len(again)
        if lost or again:
            counts.problems.append(f"{run_id} kill {counts.kills}: lost {sorted(lost)}, "
                                   f"called again {sorted(again)}")
    start = len(read_ledger(journal))
    committed_before = committed_steps(crash_child.open_world(kind, data_dir), run_id)
    proc = child(kind, data_dir, run_id, journal)
    stdout, stderr = proc.communicate(timeout=120)
    assert "RESULT True" in stdout, stderr[-2000:]
    again = {line for line in read_ledger(journal)[start:] if not line.startswith("ack ")}
    counts.rerun += len(again & committed_before)
    # Across all launches: no step called after its success was acknowledged.
    seen_ack: set[str] = set()
    for line in read_ledger(journal):
        if line.startswith("ack "):
            seen_ack.add(line[4:])
        elif line in seen_ack:
            counts.rerun += 1
            counts.problems.append(f"{run_id}: {line} called after its acknowledgement")
    state = lw.materialize_run_state(crash_child.open_world(kind, data_dir), run_id)
    assert state.status == "completed" and state.output == crash_child.EXPECTED
    assert {p for p, s in state.steps.items() if s.status == "succeeded"} == ALL_STEPS
    calls = {line for line in read_ledger(journal) if not line.startswith("ack ")}
    assert calls == ALL_STEPS  # none missing


@pytest.mark.parametrize("kind", ["local_world", "virtual-local"])
def test_sigkill_torture_mid_run(kind, tmp_path):
    rng = random.Random(f"{kind}-{TRIALS}")
    counts = Counts()
    run = 0
    while counts.kills < TRIALS:
        kills = min(KILLS_PER_RUN, TRIALS - counts.kills)
        torture_one_run(kind, str(tmp_path / f"data{run}"), f"run_torture{run}", kills, rng, counts)
        run += 1
    summary = (f"{kind}: {counts.kills} SIGKILLs, {counts.mid_run} mid-run, {run} runs resumed; "
               f"acknowledged steps lost: {counts.lost}, steps re-run after ack: {counts.rerun}")
    print(f"\n{summary}")
    assert counts.kills == TRIALS and counts.mid_run == counts.kills, summary
    assert counts.lost == 0 and counts.rerun == 0, summary + "\n" + "\n".join(counts.problems)
