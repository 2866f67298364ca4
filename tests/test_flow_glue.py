"""Queues, deadlines, schedules and telemetry together (DESIGN §17, §18): `deadline=` on
`lw.enqueue`, a schedule ticking through its queue, and the queue-wait metric."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

import little_workflow as lw
from little_workflow.runtime.queue_layout import slot_name
from little_workflow.testing import FakeClock

T0 = 1_800_000_000.0


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="microseconds").replace(
        "+00:00", "Z")


def drain(world, workflows) -> lw.Worker:
    worker = lw.Worker(world, workflows=list(workflows))
    try:
        worker.run_until_idle()
    finally:
        worker.close()
    return worker


@lw.workflow(id="glue-quick")
async def quick(ctx: lw.RunContext, input: dict) -> dict:
    return await ctx.step("one", lambda: {"n": input.get("n")})


@lw.workflow(id="glue-timed", timeout=timedelta(minutes=5))
async def timed(ctx: lw.RunContext, input: dict) -> int:
    return 1


# ---- deadline= on enqueue ----------------------------------------------------------------

def test_enqueue_commits_its_deadline_or_the_workflows_timeout_in_run_created(memory_world):
    clock = FakeClock(start=T0)
    world = lw.virtual_world(memory_world.files, "/dl", clock=clock)
    lw.declare_queue(world, "q")
    given = lw.enqueue(world, quick, {"n": 1}, queue="q", deadline=timedelta(minutes=30))
    assert world.list_events(given.run_id)[0].payload["deadline"] == iso(T0 + 1800)
    clock.advance(10)
    secs = lw.enqueue(world, timed, {}, queue="q", deadline=90)
    assert world.list_events(secs.run_id)[0].payload["deadline"] == iso(T0 + 10 + 90)
    default = lw.enqueue(world, timed, {}, queue="q")
    assert world.list_events(default.run_id)[0].payload["deadline"] == iso(T0 + 10 + 300)
    none = lw.enqueue(world, quick, {"n": 2}, queue="q")
    assert "deadline" not in world.list_events(none.run_id)[0].payload


def test_a_bad_enqueue_deadline_is_refused_before_anything_is_written(memory_world):
    lw.declare_queue(memory_world, "q")
    with pytest.raises(ValueError, match="deadline"):
        lw.enqueue(memory_world, quick, {"n": 1}, queue="q", run_id="run_bad_dl", deadline=-1)
    with pytest.raises(TypeError, match="deadline"):
        lw.enqueue(memory_world, quick, {"n": 1}, queue="q", run_id="run_bad_dl", deadline="soon")
    assert memory_world.list_events("run_bad_dl") == []
    assert lw.list_queues(memory_world)[0].depth == 0


def test_a_queued_run_that_never_got_a_place_is_cancelled_at_its_deadline(memory_world):
    clock = FakeClock(start=T0)
    world = lw.virtual_world(memory_world.files, "/dl", clock=clock)
    lw.declare_queue(world, "q", concurrency=1)
    held = world.take_slot(slot_name("q", 0), "another worker")  # the only place, never freed
    try:
        handle = lw.enqueue(world, quick, {"n": 1}, queue="q", deadline=60)
        clock.advance(60)
        drain(world, [quick])  # returns: the run past its deadline is no longer work
        events = world.list_events(handle.run_id)
        assert events[-1].type == "run.cancelled" and events[-1].payload["reason"] == "deadline"
        assert "run.started" not in [e.type for e in events]
        with pytest.raises(lw.RunCancelledError):
            handle.result(timeout=10)
        assert lw.list_queues(world)[0].depth == 0
    finally:
        held.release()
