"""SIGKILL during a sleep and during a wait: real processes on local_world, real time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import durable_child
from checkout import SRC

import little_workflow as lw
from little_workflow.world.clock import from_iso

HERE = os.path.dirname(os.path.abspath(__file__))


def start_child(data_dir: str, run_id: str, kind: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, HERE])}
    return subprocess.Popen([sys.executable, os.path.join(HERE, "durable_child.py"), data_dir,
                             run_id, kind], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def kill_when_waiting(proc: subprocess.Popen, world, run_id: str) -> None:
    end = time.monotonic() + 30
    while lw.materialize_run_state(world, run_id).status != "waiting":
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < end, "the child never reached its wait"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def ledger(data_dir: str) -> list[str]:
    with open(os.path.join(data_dir, durable_child.LEDGER)) as f:
        return f.read().split()


def test_sigkill_during_a_sleep_wakes_at_the_original_time(tmp_path):
    data_dir = str(tmp_path / "lw")
    world = lw.local_world(data_dir)
    proc = start_child(data_dir, "run_killnap", "sleep")
    kill_when_waiting(proc, world, "run_killnap")
    wake_at = from_iso(lw.materialize_run_state(world, "run_killnap").waiting["wakeAt"])
    time.sleep(1.0)  # the dead process' sleep keeps running down meanwhile
    r = lw.run_workflow(durable_child.napper, {"dataDir": data_dir, "seconds": 3},
                        world=world, run_id="run_killnap")
    woke = time.time()
    assert r.status == "completed"
    # Woke at the committed wake time, not a full 3 s sleep after the resume.
    assert wake_at <= woke < wake_at + 0.8, (woke - wake_at)
    fired = [e for e in world.list_events("run_killnap") if e.type == "timer.fired"]
    assert len(fired) == 1 and from_iso(fired[0].created_at) >= wake_at
    assert ledger(data_dir) == ["before", "after"]


def test_sigkill_during_a_wait_then_an_event_while_no_process_runs(tmp_path):
    data_dir = str(tmp_path / "lw")
    world = lw.local_world(data_dir)
    proc = start_child(data_dir, "run_killwait", "wait")
    kill_when_waiting(proc, world, "run_killwait")
    lw.send_event(world, "run_killwait", "approval", {"ok": True}, idempotency_key="k1")
    worker = lw.Worker(lw.local_world(data_dir), workflows=[durable_child.listener])
    worker.run_until_idle()
    worker.close()
    state = lw.materialize_run_state(world, "run_killwait")
    assert state.status == "completed" and state.output == {"ok": True}
    assert ledger(data_dir) == ["before", "after"]
