"""DESIGN §15, "Incarnations" and "The log fences every writer, even without a lock".

Each execution of a run begins with `run.started {start: N}`; every record it writes
carries `incarnation: N`. An executor that sees another execution's `run.started` after
its own stops with LeaseLostError: it appends nothing more and does not record its step in
flight. Tested with two executors that no lock keeps apart: two Worlds of this process
over separate filesystem objects sharing one memory store (each takes only its own
in-process locks), and two real processes on local files with the kernel lock disabled
(`little_workflow.testing.without_kernel_locks`).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from checkout import SRC
from conftest import ROOT, private_memory

import little_workflow as lw
from little_workflow.testing import FakeClock, SimulatedCrash

TESTS = os.path.join(ROOT, "tests")
CHILD_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, TESTS])}
#: Written by whoever is not an executing run: senders and cancellers.
OUTSIDE = {"signal.received", "run.cancel_requested"}


def two_hosts() -> tuple[lw.World, lw.World]:
    """Two Worlds over one memory store through separate filesystem objects: no lock of
    one is seen by the other, as two processes on a filesystem without locks."""
    fs_a, fs_b = private_memory(), private_memory()
    fs_b.store, fs_b.pseudo_dirs = fs_a.store, fs_a.pseudo_dirs
    return lw.virtual_world(fs_a, "/wf"), lw.virtual_world(fs_b, "/wf")


def wait_for(condition: Any, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def incarnations(events: list[Any]) -> list[tuple[int, str, Any]]:
    """(sequence, type, the execution it belongs to) of every record after the first
    run.started that no outside writer made, with the `incarnation` it carries."""
    out = []
    for e in events:
        if e.type in OUTSIDE or e.type == "run.created":
            continue
        out.append((e.sequence, e.type, e.payload.get("start") if e.type == "run.started"
                    else e.payload.get("incarnation")))
    return out


def check_fenced_history(events: list[Any]) -> None:
    """Each record carries the incarnation of the last run.started before it."""
    current = None
    for sequence, type_, inc in incarnations(events):
        if type_ == "run.started":
            assert current is None or inc > current, (sequence, inc, current)
            current = inc
        else:
            assert inc == current, (sequence, type_, inc, current)


# ---- every record carries its incarnation -----------------------------------------------

def test_every_record_an_execution_writes_carries_its_incarnation():
    clock = FakeClock(start=1_800_000_000)
    world = lw.virtual_world(private_memory(), "/wf", clock=clock)

    def tool(args: Any) -> str:
        return f"tool {args}"

    def with_harness() -> str:
        return lw.current_step().call_tool("t", tool, {"x": 1})

    @lw.workflow(id="member")
    async def member(ctx: lw.RunContext, input: Any) -> Any:
        return await ctx.step("m", lambda: input)

    @lw.workflow(id="orchestrate")
    async def orchestrate(ctx: lw.RunContext, input: Any) -> Any:
        return await ctx.call_workflow("member", {"n": 1})

    @lw.workflow(id="everything")
    async def everything(ctx: lw.RunContext, input: Any) -> Any:
        ctx.memory.workflow.write_text("note.md", "hi")
        ctx.memory.org.read_text("x.md", default="")
        ctx.plans.keep("plan", {"p": 1})
        ctx.now()
        await ctx.step("a", lambda: 1)
        await ctx.step("h", with_harness)
        await ctx.parallel("g", [lambda: 1, lambda: 2])
        await ctx.sleep("nap", 10)
        return await ctx.wait_for_event("w", "go", timeout=100)

    def run() -> Any:
        return lw.run_workflow(everything, None, world=world, run_id="run_everything",
                               suspend=True)

    assert run().status == "waiting"
    clock.advance(10)
    assert run().status == "waiting"
    lw.send_event(world, "run_everything", "go", {"ok": 1})
    assert run().output == {"ok": 1}
    assert lw.run_pipeline([member], None, orchestrator=orchestrate, world=world,
                           run_id="run_orchestrate").output == {"n": 1}
    events = world.list_events("run_everything")
    assert [e.payload["start"] for e in events if e.type == "run.started"] == [1, 2, 3]
    check_fenced_history(events)
    assert {t for _, t, _ in incarnations(events)} >= {
        "memory.written", "memory.read", "plan.kept", "value.recorded", "step.started",
        "step.succeeded", "harness.tool_call.started", "harness.tool_call.succeeded",
        "timer.scheduled", "timer.fired", "wait.started", "wait.completed", "run.completed"}
    pipeline_events = world.list_events("run_orchestrate")
    check_fenced_history(pipeline_events)
    assert {t for _, t, _ in incarnations(pipeline_events)} >= {
        "harness.tool_call.started", "harness.tool_call.succeeded", "run.completed"}
    assert lw.verify_world(world).ok


def test_keyed_records_written_again_by_a_later_execution_are_not_a_conflict():
    """A resumed run writes its body's memory again and restarts an unfinished harness
    call: the same idempotency keys as the first execution, whose records carry another
    incarnation. The earlier records stand; nothing is refused."""
    world = lw.virtual_world(private_memory(), "/wf")
    crash = [True]

    def tool(args: Any) -> str:
        if crash.pop(0) if crash else False:
            raise SimulatedCrash(1, "the process dies inside the tool call")
        return "done"

    @lw.workflow(id="keyed_again")
    async def keyed_again(ctx: lw.RunContext, input: Any) -> Any:
        ctx.memory.workflow.write_text("note.md", "same text")
        return await ctx.step("h", lambda: lw.current_step().call_tool("t", tool, {"a": 1}))

    with pytest.raises(SimulatedCrash):
        lw.run_workflow(keyed_again, None, world=world, run_id="run_keyed")
    assert lw.run_workflow(keyed_again, None, world=world, run_id="run_keyed").output == "done"
    events = world.list_events("run_keyed")
    types = [e.type for e in events]
    assert types.count("memory.written") == 1 and types.count("harness.tool_call.started") == 1
    check_fenced_history(events)


# ---- the log fences a superseded executor -----------------------------------------------

def test_an_executor_another_execution_started_after_stops_before_recording_its_step():
    host_a, host_b = two_hosts()
    in_slow = threading.Event()
    ran: list[str] = []

    def slow() -> str:
        world = lw.current_step().world
        ran.append("A" if world is host_a else "B")
        if world is host_a:
            in_slow.set()
            # Runs until the other execution has started (its run.started is in the log).
            wait_for(lambda: sum(e.type == "run.started"
                                 for e in host_a.list_events("run_superseded")) == 2,
                     "the second execution to start")
        return "slow"

    @lw.workflow(id="superseded")
    async def superseded(ctx: lw.RunContext, input: Any) -> list[str]:
        return [await ctx.step("one", lambda: "one"), await ctx.step("slow", slow),
                await ctx.step("three", lambda: "three")]

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(lw.run_workflow, superseded, None, world=host_a,
                            run_id="run_superseded")
        assert in_slow.wait(30), first.done() and first.result()
        second = lw.run_workflow(superseded, None, world=host_b, run_id="run_superseded")
        with pytest.raises(lw.LeaseLostError, match="run_superseded"):
            first.result(timeout=60)
    assert second.output == ["one", "slow", "three"]
    assert ran == ["A", "B"]  # the step in flight ran once more, as after a crash
    events = host_b.list_events("run_superseded")
    check_fenced_history(events)
    successes = [e for e in events if e.type == "step.succeeded"]
    assert [e.payload["stepPath"] for e in successes] == ["one", "slow", "three"]
    assert next(e for e in successes if e.payload["stepPath"] == "slow").payload[
        "incarnation"] == 2
    assert lw.verify_world(host_b).ok


def test_an_executor_blocked_in_a_wait_stops_once_another_execution_starts(monkeypatch):
    from little_workflow.runtime import waiting

    monkeypatch.setattr(waiting, "POLL_SECONDS", 0.1)
    host_a, host_b = two_hosts()

    @lw.workflow(id="waiting_twice")
    async def waiting_twice(ctx: lw.RunContext, input: Any) -> Any:
        await ctx.step("one", lambda: 1)
        return await ctx.wait_for_event("w", "go")

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(lw.run_workflow, waiting_twice, None, world=host_a,
                            run_id="run_waiting")
        wait_for(lambda: any(e.type == "wait.started" for e in host_a.list_events("run_waiting")),
                 "the first execution to wait")
        second = lw.run_workflow(waiting_twice, None, world=host_b, run_id="run_waiting",
                                 suspend=True)
        assert second.status == "waiting"
        after_second = len(host_b.list_events("run_waiting"))
        with pytest.raises(lw.LeaseLostError):
            first.result(timeout=30)
    # The first execution appended nothing once the second had started.
    assert len(host_b.list_events("run_waiting")) == after_second
    lw.send_event(host_b, "run_waiting", "go", "went")
    assert lw.run_workflow(waiting_twice, None, world=host_b, run_id="run_waiting").output \
        == "went"
    check_fenced_history(host_b.list_events("run_waiting"))
    assert lw.verify_world(host_b).ok


def before_append_of(type_: str, action: Any) -> Any:
    done: list[bool] = []

    def on_call(name: str, args: Any, kwargs: Any) -> None:
        if name in ("append_event", "submit_event") and args[1:2] == (type_,) and not done:
            done.append(True)
            action()

    return on_call


@lw.workflow(id="starts")
async def starts(ctx: lw.RunContext, input: Any) -> int:
    return await ctx.step("one", lambda: 1)


def test_the_later_of_two_executions_starting_together_is_refused():
    host_a, host_b = two_hosts()
    lw.start_workflow(starts, None, world=host_a, run_id="run_startrace")
    # A started execution 1 between B's read of the log and B's own run.started.
    late = lw.tracing_world(host_b, before_append_of("run.started", lambda: host_a.append_event(
        "run_startrace", "run.started", {"start": 1})))
    with pytest.raises(lw.RunLockedError, match="run_startrace"):
        lw.run_workflow(starts, None, world=late, run_id="run_startrace")
    assert [e.type for e in host_b.list_events("run_startrace")] == ["run.created", "run.started"]


def test_a_run_created_by_another_process_meanwhile_is_not_created_twice():
    host_a, host_b = two_hosts()
    late = lw.tracing_world(host_b, before_append_of("run.created", lambda: lw.start_workflow(
        starts, None, world=host_a, run_id="run_createrace")))
    with pytest.raises(lw.RunLockedError, match="run_createrace"):
        lw.run_workflow(starts, None, world=late, run_id="run_createrace")
    assert [e.type for e in host_b.list_events("run_createrace")] == ["run.created"]
    assert lw.run_workflow(starts, None, world=host_b, run_id="run_createrace").output == 1


# ---- two real processes, kernel lock disabled ---------------------------------------------

def test_two_processes_without_a_lock_never_interleave_their_records(tmp_path):
    """Process A executes a run on local files and is inside a step when process B (the
    kernel lock disabled in both) starts the same run: B runs it to its end; A's step
    returns, A is refused its success (LeaseLostError) and appends nothing more. The log
    reads as two executions one after the other, and `little verify` is ok."""
    url = f"file://{tmp_path}/wf"
    sync = str(tmp_path / "sync")
    os.makedirs(sync)
    child = os.path.join(TESTS, "fence_child.py")

    def start(name: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, child, name, url, sync], env=CHILD_ENV,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    a = start("A")
    wait_for(lambda: os.path.exists(os.path.join(sync, "A-in-slow")) or a.poll() is not None,
             "A to enter its slow step", 120)
    b = start("B")
    out_b, err_b = b.communicate(timeout=120)
    out_a, err_a = a.communicate(timeout=120)
    assert b.returncode == 0 and json.loads(out_b.splitlines()[-1])["outcome"] == "completed", \
        err_b[-2000:]
    assert json.loads(out_a.splitlines()[-1])["outcome"] == "LeaseLostError", (out_a, err_a[-2000:])
    world = lw.virtual_world(url)
    events = world.list_events("run_nolock")
    check_fenced_history(events)
    successes = [(e.payload["stepPath"], e.payload["incarnation"]) for e in events
                 if e.type == "step.succeeded"]
    assert successes == [("one", 1), ("slow", 2), ("three", 2)], successes
    with open(os.path.join(sync, "ledger")) as f:
        assert f.read().split() == ["one:A", "slow:A", "slow:B", "three:B"]
    verify = subprocess.run([sys.executable, "-c", "from little_workflow.cli import main; main()",
                             "verify", "--world", url], env=CHILD_ENV, capture_output=True,
                            text=True, timeout=120)
    assert verify.returncode == 0, verify.stdout + verify.stderr
