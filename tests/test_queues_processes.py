"""Queues across worker PROCESSES (DESIGN §17) on local_world, local files and S3 (moto):
the limits hold whichever process starts a run. Each run's step notes its start and end
in a ledger file (tests/queue_flows.py); the overlaps come from that ledger, the rate
window from the admission times the runs' `run.started` record.

Short by default; LW_SOAK=1 (tests/soak.py) runs more runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import queue_flows
from soak import soak_size
from test_queue_documents import HERE, child_env, parent_world, s3_env, world_spec

import little_workflow as lw
from little_workflow.runtime.queue_layout import key_slot_name, slot_name
from little_workflow.world.clock import from_iso

PROCESS_KINDS = ["local_world", "local-file", "s3"]
CHILD = os.path.join(HERE, "queue_child.py")
#: S3 leases (run locks and queue slots) short enough that a killed worker's come back soon.
LEASE_SECONDS = 2.0
RUNS_PER_KEY = soak_size("LW_QUEUE_RUNS_PER_KEY", short=3, full=12)


@pytest.fixture
def setting(request, tmp_path):
    """(kind, spec, env, world in this process, ledger path) for the World kind."""
    kind = request.param
    moto_s3 = request.getfixturevalue("moto_s3") if kind == "s3" else None
    spec, env = world_spec(kind, tmp_path, moto_s3)
    if kind == "s3":
        env = {**s3_env(moto_s3, LEASE_SECONDS), **env}
    ledger = str(tmp_path / "ledger.txt")
    env = {**env, "LW_QUEUE_LEDGER": ledger}
    os.environ["LW_QUEUE_LEDGER"] = ledger
    world = parent_world(spec, moto_s3)
    yield kind, spec, env, world, ledger
    os.environ.pop("LW_QUEUE_LEDGER", None)


def spawn(mode: str, spec: str, env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, CHILD, mode, spec, *args], env=child_env(env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(procs: list[subprocess.Popen], timeout: float = 300) -> None:
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise AssertionError(f"a child did not finish in {timeout} s: {err[-2000:]}") from None
        assert p.returncode == 0, err[-3000:]


def read_ledger(ledger: str) -> list[tuple[str, str, float, int]]:
    if not os.path.exists(ledger):
        return []
    rows = []
    with open(ledger) as f:
        for line in f:
            run_id, what, at, pid = line.split()
            rows.append((run_id, what, float(at), int(pid)))
    return rows


def executions(rows, killed_at: dict[int, float] | None = None) -> list[tuple[str, float, float]]:
    """(run id, start, end) of every execution of a step; one cut by a SIGKILL ends when
    its process was killed."""
    open_: dict[tuple[str, int], float] = {}
    out = []
    for run_id, what, at, pid in rows:
        if what == "start":
            open_[(run_id, pid)] = at
        else:
            out.append((run_id, open_.pop((run_id, pid)), at))
    for (run_id, pid), start in open_.items():
        assert killed_at is not None and pid in killed_at, f"{run_id} never ended in {pid}"
        out.append((run_id, start, killed_at[pid]))
    return out


def max_overlap(spans: list[tuple[float, float]]) -> int:
    points = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    now = best = 0
    for _, d in points:  # an end at the same instant as a start comes first
        now += d
        best = max(best, now)
    return best


def started_payloads(world, run_id: str) -> list[dict]:
    return [dict(e.payload) for e in world.list_events(run_id) if e.type == "run.started"]


@pytest.mark.parametrize("setting", PROCESS_KINDS, indirect=True)
def test_overlap_never_exceeds_concurrency_nor_per_key_concurrency(setting):
    kind, spec, env, world, ledger = setting
    lw.declare_queue(world, "q", concurrency=2, per_key_concurrency=1)
    keys = ["a", "b", "c"]
    # Enqueue order groups each key's runs: without the per-key limit the first two
    # places would both go to key a.
    handles = {lw.enqueue(world, queue_flows.work_flow, {"n": i, "key": k, "seconds": 0.3},
                          queue="q", key=k).run_id: k
               for k in keys for i in range(RUNS_PER_KEY)}
    finish([spawn("drain", spec, env, "4") for _ in range(3)])
    for run_id in handles:
        assert lw.get_run(world, run_id).status() == "completed"
    spans = executions(read_ledger(ledger))
    assert sorted(r for r, _, _ in spans) == sorted(handles)  # each run executed once
    assert max_overlap([(s, e) for _, s, e in spans]) == 2
    for k in keys:
        assert max_overlap([(s, e) for r, s, e in spans if handles[r] == k]) == 1
    assert len({pid for *_, pid in read_ledger(ledger)}) >= 1


@pytest.mark.parametrize("setting", PROCESS_KINDS, indirect=True)
def test_starts_in_any_window_never_exceed_the_rate_limit(setting):
    kind, spec, env, world, ledger = setting
    limit, period = 3, 1.0
    lw.declare_queue(world, "r", rate_limit=lw.RateLimit(limit=limit, period=period))
    run_ids = [lw.enqueue(world, queue_flows.work_flow, {"n": i, "seconds": 0}, queue="r").run_id
               for i in range(3 * limit)]
    finish([spawn("drain", spec, env, "4") for _ in range(3)])
    times = []
    for run_id in run_ids:
        (first, *_), = [started_payloads(world, run_id)]
        assert first["admission"]["counted"] is True
        times.append(from_iso(first["admission"]["at"]))
    times.sort()
    for i, t in enumerate(times):
        assert len([u for u in times[i:] if u < t + period]) <= limit, times


@pytest.mark.parametrize("setting", PROCESS_KINDS, indirect=True)
def test_one_slot_starts_runs_by_priority_then_enqueue_order(setting):
    kind, spec, env, world, ledger = setting
    lw.declare_queue(world, "p", concurrency=1)
    priorities = [3, 1, 2, 1, 0, 2]
    run_ids = [lw.enqueue(world, queue_flows.work_flow, {"n": i, "seconds": 0.05}, queue="p",
                          priority=p).run_id for i, p in enumerate(priorities)]
    finish([spawn("drain", spec, env, "4") for _ in range(2)])
    started = [r for r, what, _, _ in read_ledger(ledger) if what == "start"]
    expected = [r for _, _, r in sorted(zip(priorities, range(len(run_ids)), run_ids, strict=True))]
    assert started == expected
    assert max_overlap([(s, e) for _, s, e in executions(read_ledger(ledger))]) == 1


@pytest.mark.parametrize("setting", ["local_world", "s3"], indirect=True)
def test_racing_enqueuers_with_one_dedup_id_get_one_run(setting):
    kind, spec, env, world, ledger = setting
    lw.declare_queue(world, "d")
    procs = [spawn("enqueue", spec, env, "d", str(i), "-", "ticket-1", "-") for i in range(3)]
    ids = set()
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
        ids.add(out.strip())
    assert len(ids) == 1
    (run_id,) = ids
    assert lw.get_run(world, run_id).status() == "created"


@pytest.mark.parametrize("setting", ["local_world", "s3"], indirect=True)
def test_debounce_from_processes_keeps_one_run_with_the_last_input(setting):
    kind, spec, env, world, ledger = setting
    lw.declare_queue(world, "b")
    run_ids = []
    for n in range(3):  # one after another, each from its own process
        p = spawn("enqueue", spec, env, "b", str(n), "k", "-", "1")
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
        run_ids.append(out.strip())
    # Racing enqueuers: whichever is last, one run of the key is left.
    racers = [spawn("enqueue", spec, env, "b", str(10 + n), "r", "-", "1") for n in range(3)]
    racing = []
    for p in racers:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
        racing.append(out.strip())
    time.sleep(1.0)  # the debounce window (the World's clock is the system's here)
    finish([spawn("drain", spec, env, "4") for _ in range(2)])
    statuses = [lw.get_run(world, r).status() for r in run_ids]
    assert statuses == ["cancelled", "cancelled", "completed"]
    assert lw.get_run(world, run_ids[-1]).result(timeout=10) == {"n": 2, "key": "k"}
    raced = [lw.get_run(world, r).status() for r in racing]
    assert sorted(raced) == ["cancelled", "cancelled", "completed"]
    for r, status in zip(racing, raced, strict=True):
        if status == "cancelled":
            (cancelled,) = [e for e in world.list_events(r) if e.type == "run.cancelled"]
            assert cancelled.payload["reason"] == "debounced"
    assert len([r for r, what, _, _ in read_ledger(ledger) if what == "start"]) == 2


@pytest.mark.parametrize("setting", PROCESS_KINDS, indirect=True)
def test_sigkill_of_a_worker_holding_slots_loses_no_run_and_leaks_no_slot(setting):
    kind, spec, env, world, ledger = setting
    concurrency = 2
    lw.declare_queue(world, "k", concurrency=concurrency, per_key_concurrency=1)
    run_ids = [lw.enqueue(world, queue_flows.work_flow, {"n": i, "key": f"u{i % 3}", "seconds": 1.0},
                          queue="k", key=f"u{i % 3}").run_id for i in range(6)]
    workers = [spawn("worker", spec, env, "4") for _ in range(3)]
    killed_at: dict[int, float] = {}
    try:
        deadline = time.monotonic() + 120
        victim = None
        while victim is None and time.monotonic() < deadline:
            open_pids = {}
            for run_id, what, _, pid in read_ledger(ledger):
                open_pids[(run_id, pid)] = what == "start"
            holding = {pid for (_, pid), running in open_pids.items() if running}
            victim = next((w for w in workers if w.pid in holding), None)
            time.sleep(0.05)
        assert victim is not None, "no worker started a run"
        victim.send_signal(signal.SIGKILL)  # mid-step, holding its places and run locks
        killed_at[victim.pid] = time.time()
        victim.wait()
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if all(lw.get_run(world, r).status() == "completed" for r in run_ids):
                break
            time.sleep(0.25)
        assert [lw.get_run(world, r).status() for r in run_ids] == ["completed"] * len(run_ids)
    finally:
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
        for w in workers:
            try:
                w.wait(timeout=60)
            except subprocess.TimeoutExpired:
                w.kill()
                w.wait()
    spans = executions(read_ledger(ledger), killed_at)
    assert {r for r, _, _ in spans} == set(run_ids)
    # The killed run's place was not given to another run before its holder was gone.
    assert max_overlap([(s, e) for _, s, e in spans]) <= concurrency
    for key in ("u0", "u1", "u2"):
        mine = {r for i, r in enumerate(run_ids) if f"u{i % 3}" == key}
        assert max_overlap([(s, e) for r, s, e in spans if r in mine]) <= 1
    # No place is held any more (on S3, once the killed holder's lease lapsed).
    names = [slot_name("k", i) for i in range(concurrency)] + [
        key_slot_name("k", f"u{i}", 0) for i in range(3)]
    deadline = time.monotonic() + 10 * LEASE_SECONDS + 20
    for name in names:
        slot = world.take_slot(name, "test")
        while slot is None and time.monotonic() < deadline:
            time.sleep(0.25)
            slot = world.take_slot(name, "test")
        assert slot is not None, f"slot {name} leaked"
        slot.release()
