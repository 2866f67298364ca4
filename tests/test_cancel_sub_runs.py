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
