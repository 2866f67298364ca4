"""A cancelled run leaves no sub-run behind (DESIGN §11, §17): whoever ends a run
`cancelled` — `cancel_run`, or the run's own executor finding the request — asks its
unfinished sub-runs to cancel first, so a canceller killed half-way or a sub-run started
after the canceller read the parent's log still ends cancelled."""

from __future__ import annotations

import threading
import time

import pytest
from conftest import private_memory

import little_workflow as lw
from little_workflow.runtime.state import RunLog
from little_workflow.runtime.waiting import notify_run


@lw.workflow(id="child")
async def child(ctx, input):
    await ctx.wait_for_event("w", "go")
    return "done"


async def parent(ctx, input):
    return await ctx.call_workflow("child", {})


def status(world, run_id: str) -> RunLog:
    return RunLog.fold(run_id, world.list_events(run_id))


def sub_run_id(world, run_id: str) -> str:
    subs = [s["subRunId"] for s in status(world, run_id).sub_runs.values()]
    assert len(subs) == 1
    return subs[0]


def wait_for(condition, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_a_parent_its_executor_ends_cancelled_asks_its_sub_runs_to_cancel():
    """The canceller appended the parent's request and died before it reached the
    sub-run (or the sub-run was started after it read the parent's log): the parent's
    executor asks the sub-run to cancel before it ends the parent, and a worker then
    ends the sub-run cancelled."""
    world = lw.virtual_world(private_memory(), "/wf")
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            lw.run_pipeline([child], None, orchestrator=parent, world=world, run_id="run_p")
        except BaseException as e:  # noqa: BLE001 - the test reads it
            outcome.append(e)

    runner = threading.Thread(target=run)
    runner.start()
    wait_for(lambda: world.list_events("run_p") and status(world, "run_p").sub_runs
             and status(world, sub_run_id(world, "run_p")).open_waits)
    sub = sub_run_id(world, "run_p")
    # What a canceller killed right after its first append leaves behind.
    world.append_event("run_p", "run.cancel_requested", {"reason": "stop"})
    notify_run(world, "run_p")
    runner.join(timeout=30)
    assert not runner.is_alive() and isinstance(outcome[0], lw.RunCancelledError), outcome
    assert status(world, "run_p").status == "cancelled"
    sub_log = status(world, sub)
    assert sub_log.cancel_requested is not None, [e.type for e in world.list_events(sub)]
    events = [e.type for e in world.list_events("run_p")]
    assert events.index("run.cancelled") == len(events) - 1
    worker = lw.Worker(world, workflows=[child])
    try:
        worker.run_until_idle()
    finally:
        worker.close()
    assert status(world, sub).status == "cancelled"


def test_cancel_run_of_a_waiting_parent_cancels_its_waiting_sub_run():
    world = lw.virtual_world(private_memory(), "/wf")

    @lw.workflow(id="waits")
    async def waits(ctx, input):
        return await ctx.wait_for_event("w", "go")

    async def orchestrate(ctx, input):
        return await ctx.call_workflow("waits", {})

    runner = threading.Thread(target=lambda: pytest.raises(
        lw.RunCancelledError, lw.run_pipeline, [waits], None, orchestrator=orchestrate,
        world=world, run_id="run_q"))
    runner.start()
    wait_for(lambda: world.list_events("run_q") and status(world, "run_q").sub_runs
             and status(world, sub_run_id(world, "run_q")).open_waits)
    lw.cancel_run(world, "run_q")
    runner.join(timeout=30)
    assert not runner.is_alive()
    assert status(world, "run_q").status == "cancelled"
    assert status(world, sub_run_id(world, "run_q")).status == "cancelled"


def test_a_sub_run_created_after_its_parent_was_cancelled_runs_no_step(monkeypatch):
    """The chaos test's find: a parent's executor reserved a sub-run id, was stopped, lost
    its lease, and its canceller found no sub-run to ask (none existed yet) and ended the
    parent. The executor then woke and created the sub-run — which must read its parent's
    log after its own `run.created` and end cancelled before its first step."""
    from little_workflow.runtime import runner as runner_module

    world = lw.virtual_world(private_memory(), "/wf")
    calls: list[str] = []

    def work() -> int:
        calls.append("work")
        return 1

    @lw.workflow(id="late-child")
    async def late_child(ctx, input):
        return await ctx.step("work", work)

    async def orchestrate(ctx, input):
        return await ctx.call_workflow("late-child", {})

    real = runner_module.arun_single

    async def woken_late(wf, input, **kw):
        # What the canceller wrote while this executor was stopped.
        world.append_event(kw["parent_run_id"], "run.cancel_requested", {"reason": "stop"})
        world.append_event(kw["parent_run_id"], "run.cancelled", {"reason": "stop"})
        return await real(wf, input, **kw)

    monkeypatch.setattr(runner_module, "arun_single", woken_late)
    with pytest.raises(lw.LittleWorkflowError):
        lw.run_pipeline([late_child], None, orchestrator=orchestrate, world=world, run_id="run_z")
    sub = sub_run_id(world, "run_z")
    assert calls == []
    sub_log = status(world, sub)
    assert sub_log.status == "cancelled", [e.type for e in world.list_events(sub)]
    assert "parent run run_z was cancelled: stop" == sub_log.cancel_requested["reason"]


def test_a_fork_of_a_sub_run_whose_parent_was_cancelled_runs():
    """A fork copies its source's `run.created`, `parentRunId` too, but no parent reserved
    it: its source's parent being cancelled does not cancel it (the way to retry a
    sub-run's steps with fixed code after its pipeline was stopped)."""
    world = lw.virtual_world(private_memory(), "/wf")
    calls: list[str] = []

    def first() -> int:
        calls.append("first")
        return 1

    @lw.workflow(id="steps-then-waits")
    async def steps_then_waits(ctx, input):
        await ctx.step("first", first)
        return await ctx.wait_for_event("w", "go")

    async def orchestrate(ctx, input):
        return await ctx.call_workflow("steps-then-waits", {})

    runner = threading.Thread(target=lambda: pytest.raises(
        lw.RunCancelledError, lw.run_pipeline, [steps_then_waits], None,
        orchestrator=orchestrate, world=world, run_id="run_f"))
    runner.start()
    wait_for(lambda: world.list_events("run_f") and status(world, "run_f").sub_runs
             and status(world, sub_run_id(world, "run_f")).open_waits)
    lw.cancel_run(world, "run_f", "operator stop")
    runner.join(timeout=30)
    assert not runner.is_alive()
    sub = sub_run_id(world, "run_f")
    assert status(world, sub).status == "cancelled"
    fork = lw.fork_run(world, sub, from_step="first")
    result = lw.run_workflow(steps_then_waits, {}, world=world, run_id=fork, suspend=True)
    assert result.status == "waiting"
    assert calls == ["first", "first"]
    assert status(world, fork).cancel_requested is None


def test_a_sub_run_called_in_process_reads_only_the_tail_of_its_parents_log(monkeypatch, tmp_path):
    """The look at the parent costs what the parent appended since it called, not its
    whole log: a pipeline of n sub-runs read n parent logs whole (O(n²): 300 sub-runs went
    from 1.3 to 3.5 CPU-s)."""
    from little_workflow.world.core import World

    world = lw.local_world(str(tmp_path / "lw"))
    read_of_parent: list[int] = []
    real = World.list_events

    def counting(self, run_id, *, after=0):
        events = real(self, run_id, after=after)
        if run_id == "run_many":
            read_of_parent.append(len(events))
        return events

    monkeypatch.setattr(World, "list_events", counting)

    @lw.workflow(id="small")
    async def small(ctx, i):
        return await ctx.step("s", lambda: i)

    async def many(ctx, n):
        return sum([await ctx.call_workflow("small", i) for i in range(n)])

    n = 40
    assert lw.run_pipeline([small], n, orchestrator=many, world=world, run_id="run_many").output \
        == sum(range(n))
    world.close()
    assert sum(read_of_parent) <= 4 * n + 50, read_of_parent


def test_cancelling_a_cancelled_parent_again_asks_a_sub_run_left_behind():
    """breaker5: a parent's executor created a sub-run after its parent was cancelled and
    was killed before the sub-run looked at its parent; with no worker that has the
    sub-run's code, nothing ends it. `cancel_run` on the parent, a no-op before, asks it."""
    world = lw.virtual_world(private_memory(), "/wf")
    world.append_event("run_par", "run.created", {"workflowId": "p", "input": None})
    world.append_event("run_par", "harness.tool_call.started", {
        "callPath": "call-0-child", "name": "call_workflow",
        "args": {"workflow": "child", "input": {}, "subRunId": "run_left"}})
    world.append_event("run_par", "run.cancel_requested", {"reason": "stop"})
    world.append_event("run_par", "run.cancelled", {"reason": "stop"})
    world.append_event("run_left", "run.created", {"workflowId": "child", "input": {},
                                                   "parentRunId": "run_par"})
    lw.cancel_run(world, "run_par")
    assert status(world, "run_left").status == "cancelled"
    assert status(world, "run_par").status == "cancelled"
