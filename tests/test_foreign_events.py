"""DESIGN §13 "Decisions are made on storage" and "Fencing holds at the write": events
another writer appended (another process, another host, another World of this process)
are folded into a running run's state before it decides anything that depends on them.

- A signal sent just before a wait's timeout is recorded: the log holds
  `signal.received` then `wait.timed_out`, so the wait returns the payload — in the first
  execution as on replay. The send is put exactly there by a hook on the World (before
  the run's `wait.timed_out` append), by this process or by a real second process.
- Failover on S3 and Azure Blob: a holder stopped (SIGSTOP) between its lease check and
  the PUT of a step's success gets that success in after the taker took the lock; the
  taker treats it as history: the step does not run again, its recorded output is the
  one used.
- A cancel request written by another process while a step runs stops the run before
  its next step.
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time

import pytest
from checkout import SRC
from conftest import ROOT, WorldMaker, private_memory

import little_workflow as lw
from little_workflow.testing import FakeClock

T0 = 1_750_000_000.0
CHILD_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.path.join(ROOT, "tests")])}


@pytest.fixture(params=["memory", "local-file", "local_world"])
def maker(request, tmp_path) -> WorldMaker:
    return WorldMaker(request.param, tmp_path, request)


def before_append_of(type_: str, action):
    """A tracing_world hook: `action()` once, right before the run appends `type_`."""
    done = []

    def on_call(name, args, kwargs):
        if name in ("append_event", "submit_event") and args[1:2] == (type_,) and not done:
            done.append(True)
            action()

    return on_call


@lw.workflow(id="waits_briefly")
async def waits_briefly(ctx, _):
    return await ctx.wait_for_event("approval", "approval", timeout=5)


def run_past_the_deadline(world, clock: FakeClock, run_id: str):
    """Start the run, let its wait begin, then move the clock past the deadline: the run
    records `wait.timed_out` (the hook sends the event right before that)."""
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(1)
    fut = pool.submit(lw.run_workflow, waits_briefly, None, world=world, run_id=run_id)
    deadline = time.monotonic() + 30
    while not any(e.type == "wait.started" for e in world.list_events(run_id)):
        assert time.monotonic() < deadline and not fut.done(), fut.done() and fut.result()
        time.sleep(0.01)
    clock.advance(5)
    try:
        return fut.result(timeout=60)
    finally:
        pool.shutdown()


def check_signal_taken(world, run_id: str, result, payload) -> None:
    types = [e.type for e in world.list_events(run_id)]
    # The race really happened: the event is in the log before the timeout record.
    assert types.index("signal.received") < types.index("wait.timed_out"), types
    assert result.output == payload
    completed = [e for e in world.list_events(run_id) if e.type == "wait.completed"]
    assert completed[0].payload["signalSequence"] is not None
    assert lw.replay_run(world, run_id, waits_briefly).output == payload


def test_signal_sent_by_this_process_just_before_the_timeout_is_returned(maker):
    clock = FakeClock(start=T0)
    inner = maker(clock=clock)
    world = lw.tracing_world(inner, before_append_of(
        "wait.timed_out", lambda: lw.send_event(inner, "run_lastsecond", "approval", {"ok": 1})))
    result = run_past_the_deadline(world, clock, "run_lastsecond")
    check_signal_taken(inner, "run_lastsecond", result, {"ok": 1})


SENDER = r"""
import sys
import little_workflow as lw
from fsspec.implementations.local import LocalFileSystem
kind, data_dir, run_id = sys.argv[1:4]
world = lw.local_world(data_dir) if kind == "local_world" else lw.virtual_world(LocalFileSystem(), data_dir)
lw.send_event(world, run_id, "approval", {"from": "another process"})
"""


def test_signal_sent_by_another_writer_just_before_the_timeout_is_returned(maker, monkeypatch):
    """Another process (local disk) or another host's World over the same store
    (memory) sends the event after this process allocated the sequence of its
    `wait.timed_out` and before that event reached storage: this process learns of the
    event only because its own write lost that sequence."""
    from little_workflow.runtime import waiting

    # No poll falls due meanwhile (the sender is slow to start): only what the run's
    # own append shows of storage counts.
    monkeypatch.setattr(waiting, "POLL_SECONDS", 3600.0)
    clock = FakeClock(start=T0)
    world = maker(clock=clock)
    run_id = "run_otherwriter"
    if maker.kind == "memory":
        other_fs = private_memory()  # another filesystem object over the same store
        other_fs.store, other_fs.pseudo_dirs = maker.fs.store, maker.fs.pseudo_dirs
        other = lw.virtual_world(other_fs, maker.data_dir)
        assert other.state is not world.state

        def send() -> None:
            lw.send_event(other, run_id, "approval", {"from": "another process"})
    else:
        def send() -> None:
            subprocess.run([sys.executable, "-c", SENDER, maker.kind, maker.data_dir, run_id],
                           check=True, timeout=120, cwd=ROOT, env=CHILD_ENV)

    enqueue, sent = world.events.enqueue, []

    def enqueue_after_the_send(run, sequence, data, **kwargs):
        if b'"type":"wait.timed_out"' in data and not sent:
            sent.append(sequence)
            send()
        return enqueue(run, sequence, data, **kwargs)

    monkeypatch.setattr(world.events, "enqueue", enqueue_after_the_send)
    result = run_past_the_deadline(world, clock, run_id)
    assert sent and world.read_event(run_id, sent[0]).type == "signal.received"
    check_signal_taken(world, run_id, result, {"from": "another process"})


# ---- failover on a leased store: a paused holder's late write is history to the taker --

LEASE = 2.0
HOST_A = r"""
import os, signal, sys
import fs_adapters.leases as leases
import foreign_flows
import little_workflow as lw

real_check = leases.LeasedLocks.check


def check(self, name, token):
    real_check(self, name, token)
    if foreign_flows.PAUSE_AT_NEXT_CHECK:  # the lease is still ours: stop before the PUT
        foreign_flows.PAUSE_AT_NEXT_CHECK.clear()
        os.kill(os.getpid(), signal.SIGSTOP)


leases.LeasedLocks.check = check
world = lw.virtual_world(sys.argv[1])
try:
    lw.run_workflow(foreign_flows.failover, None, world=world, run_id=sys.argv[2])
    print("A: completed")
except lw.LeaseLostError as e:
    print("A: fenced:", e)
"""


def process_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b") ", 1)[1][:1].decode()


def wait_for(condition, what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def step_successes(world, run_id: str) -> collections.Counter:
    return collections.Counter(e.payload["stepPath"] for e in world.list_events(run_id)
                               if e.type == "step.succeeded")


@pytest.mark.parametrize("kind", ["s3", "azure"])
def test_a_paused_holders_late_success_is_history_to_the_taker(kind, request, tmp_path,
                                                               monkeypatch):
    import foreign_flows
    from leased_stores import leased_store

    store = leased_store(kind, request)
    monkeypatch.setattr(store.module, "LEASE_SECONDS", LEASE)
    ledger = tmp_path / "executions.txt"
    monkeypatch.setenv("LW_FOREIGN_LEDGER", str(ledger))
    root, run_id = store.new_root(), "run_failover"
    env = {**CHILD_ENV, "LW_FOREIGN_LEDGER": str(ledger), "LW_FOREIGN_HOST": "A",
           "LW_PAUSE_BEFORE_PUT": "1", "LW_LEASE_SECONDS": str(LEASE), **store.env()}
    host_a = subprocess.Popen([sys.executable, "-c", HOST_A, store.url(root), run_id], env=env,
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    observer = lw.virtual_world(store.filesystem(), root)
    try:
        # A ran step two and passed its lease check for the success; it is stopped there.
        wait_for(lambda: host_a.poll() is not None or process_state(host_a.pid) == "T",
                 "host A to stop before its PUT")
        assert host_a.poll() is None, host_a.stdout.read()

        def a_writes_late() -> None:
            # The taker holds the lock (generation 2) and read the log; now A goes on and
            # its PUT lands before the taker's first append.
            os.kill(host_a.pid, signal.SIGCONT)
            wait_for(lambda: step_successes(observer, run_id)["two"] == 1,
                     "A's late step.succeeded")
            host_a.wait(timeout=60)

        taker = lw.tracing_world(lw.virtual_world(store.filesystem(), root),
                                 before_append_of("run.started", a_writes_late))
        deadline = time.monotonic() + 60
        while True:
            try:
                result = lw.run_workflow(foreign_flows.failover, None, world=taker, run_id=run_id)
                break
            except lw.RunLockedError:  # until A's lease expires by the store's clock
                assert time.monotonic() < deadline, "A's lease never expired"
                time.sleep(0.2)
    finally:
        if host_a.poll() is None:
            os.kill(host_a.pid, signal.SIGCONT)
            host_a.kill()
        host_a.wait()
    out = host_a.stdout.read()
    assert "A: fenced" in out, out  # A's next append after the late one was refused
    assert step_successes(observer, run_id) == {"one": 1, "two": 1}
    assert result.output == [1, "two from A"]  # the recorded output wins
    assert ledger.read_text().split() == ["A"]  # the taker did not run step two again
    assert foreign_flows.PAUSE_AT_NEXT_CHECK == []


# ---- a cancel request from another process, written while a step runs ----------------

CANCELLER = r"""
import sys
import little_workflow as lw
from fsspec.implementations.local import LocalFileSystem
kind, data_dir, run_id = sys.argv[1:4]
world = lw.local_world(data_dir) if kind == "local_world" else lw.virtual_world(LocalFileSystem(), data_dir)
lw.cancel_run(world, run_id, "from another process")
"""


@pytest.mark.parametrize("kind", ["local-file", "local_world"])
def test_cancel_requested_by_another_process_during_a_step_stops_the_run_before_the_next(
        kind, tmp_path, request, monkeypatch):
    from little_workflow.runtime import waiting

    # No poll falls due during the test: only what the run's own appends reveal counts.
    monkeypatch.setattr(waiting, "POLL_SECONDS", 3600.0)
    maker = WorldMaker(kind, tmp_path, request)
    world = maker()
    ran = []

    def cancel_from_elsewhere() -> str:
        subprocess.run([sys.executable, "-c", CANCELLER, kind, maker.data_dir, "run_cancelme"],
                       check=True, timeout=120, cwd=ROOT, env=CHILD_ENV)
        return "a"

    @lw.workflow(id="cancelled_elsewhere")
    async def wf(ctx, _):
        await ctx.step("a", cancel_from_elsewhere)
        return await ctx.step("b", lambda: ran.append("b") or "b")

    with pytest.raises(lw.RunCancelledError, match="from another process"):
        lw.run_workflow(wf, None, world=world, run_id="run_cancelme")
    assert ran == []
    types = [e.type for e in world.list_events("run_cancelme")]
    # The canceller found the run's lock held (across processes on local files too:
    # DESIGN §15) and left the end to the run, which stopped before step b.
    assert types[-3:] == ["run.cancel_requested", "step.succeeded", "run.cancelled"], types


# ---- a run another holder ended while this one took over ----------------------------

@pytest.mark.parametrize("ending", ["run.completed", "run.failed"])
def test_a_run_another_holder_ended_just_before_the_takeover_reports_that_end(ending, tmp_path):
    """Host A's last events (its steps, then the run's end) land after host B read the
    log and before B's first append: B does not run anything, it reports how A ended it."""
    fs_a = private_memory()
    fs_b = private_memory()  # host B: its own filesystem object over the same store
    fs_b.store, fs_b.pseudo_dirs = fs_a.store, fs_a.pseudo_dirs
    host_a, host_b = lw.virtual_world(fs_a, "/wf"), lw.virtual_world(fs_b, "/wf")
    ran = []

    @lw.workflow(id="ended_elsewhere")
    async def wf(ctx, _):
        return [await ctx.step("one", lambda: ran.append("one") or 1)]

    run_id = lw.start_workflow(wf, None, world=host_a, run_id="run_endedelsewhere")

    def a_finishes() -> None:
        host_a.append_event(run_id, "run.started", {"start": 1})
        host_a.append_event(run_id, "step.started", {"stepPath": "one", "attempt": 1})
        host_a.append_event(run_id, "step.succeeded", {"stepPath": "one", "attempt": 1,
                                                       "output": 1})
        if ending == "run.completed":
            host_a.append_event(run_id, ending, {"output": [1]})
        else:
            host_a.append_event(run_id, ending, {"error": {"type": "ValueError",
                                                           "message": "on host A"}})

    world = lw.tracing_world(host_b, before_append_of("run.started", a_finishes))
    if ending == "run.completed":
        assert lw.run_workflow(wf, None, world=world, run_id=run_id).output == [1]
    else:
        with pytest.raises(lw.WorkflowFailedError, match="on host A"):
            lw.run_workflow(wf, None, world=world, run_id=run_id)
    assert ran == []
    assert [e.type for e in host_b.list_events(run_id)][-1] == ending


def test_a_foreign_success_for_the_step_in_flight_ends_that_attempt_unrecorded():
    """While this host runs step g/0, another host (one that lost its lease) gets g/0's
    success in; this host learns of it through a sibling's append. g/0's attempt here
    ends without recording: one success in the log, and the recorded output is used."""
    fs_a = private_memory()
    fs_b = private_memory()
    fs_b.store, fs_b.pseudo_dirs = fs_a.store, fs_a.pseudo_dirs
    host_a, host_b = lw.virtual_world(fs_a, "/wf"), lw.virtual_world(fs_b, "/wf")
    run_id = "run_inflight"
    contexts = []

    def slow_zero() -> str:
        ctx = contexts[0]
        deadline = time.monotonic() + 30
        while getattr(ctx.log.steps.get("g/0"), "status", None) != "succeeded":
            assert time.monotonic() < deadline, "the foreign success was never folded in"
            time.sleep(0.01)
        return "from B"

    def one() -> int:
        host_a.append_event(run_id, "step.succeeded", {"stepPath": "g/0", "attempt": 1,
                                                       "output": "from A"})
        return 1

    @lw.workflow(id="inflight")
    async def wf(ctx, _):
        contexts.append(ctx)
        return await ctx.parallel("g", [slow_zero, one])

    assert lw.run_workflow(wf, None, world=host_b, run_id=run_id).output == ["from A", 1]
    assert step_successes(host_b, run_id) == {"g/0": 1, "g/1": 1}
    assert lw.replay_run(host_b, run_id, wf).output == ["from A", 1]


def test_a_wait_another_holder_completed_returns_what_that_holder_took():
    """Another host (one that lost its lease) ended the wait this host blocks in: it
    took the event. This host returns that event, records no second completion, and
    does not wait for another one."""
    import concurrent.futures

    fs_a = private_memory()
    fs_b = private_memory()
    fs_b.store, fs_b.pseudo_dirs = fs_a.store, fs_a.pseudo_dirs
    host_a, host_b = lw.virtual_world(fs_a, "/wf"), lw.virtual_world(fs_b, "/wf")
    run_id = "run_waitelsewhere"

    @lw.workflow(id="waits_forever")
    async def wf(ctx, _):
        return await ctx.wait_for_event("w", "approval")

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        fut = pool.submit(lw.run_workflow, wf, None, world=host_b, run_id=run_id)
        wait_for(lambda: any(e.type == "wait.started" for e in host_a.list_events(run_id)),
                 "the wait to start", 30)
        signal_event = host_a.append_event(run_id, "signal.received",
                                           {"name": "approval", "payload": "taken on A"})
        host_a.append_event(run_id, "wait.completed", {
            "stepPath": "w", "name": "approval", "signalSequence": signal_event.sequence})
        try:
            assert fut.result(timeout=30).output == "taken on A"
        finally:
            if not fut.done():
                lw.cancel_run(host_a, run_id, "the wait never returned")
    types = [e.type for e in host_b.list_events(run_id)]
    assert types.count("wait.completed") == 1, types
