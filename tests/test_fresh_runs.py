"""A run made under an id the library just minted (`start_workflow` / `enqueue` without
`run_id`) is written without taking the run's lock or reading its log first (issue 30,
P8): no other process or thread can know that id before the call returns, so there is no
existing run to find and no one to exclude, and the lock was a third of a start's CPU on
local_world. A caller-chosen id is still created under its lock, after reading its log."""

from __future__ import annotations

from typing import Any

import little_workflow as lw
from little_workflow.world.tracing import tracing_world


@lw.workflow(id="fresh-runs-double")
async def double(ctx: lw.RunContext, input: int) -> int:
    return await ctx.step("double", lambda: input * 2)


def _traced(tmp_path: Any) -> tuple[Any, Any, list[tuple[str, tuple]]]:
    base = lw.local_world(str(tmp_path / "data"))
    calls: list[tuple[str, tuple]] = []
    world = tracing_world(base, lambda name, args, kwargs: calls.append((name, args)))
    return base, world, calls


def _run_calls(calls: list[tuple[str, tuple]], run_id: str) -> list[str]:
    return [name for name, args in calls if args[:1] == (run_id,)
            and name in ("run_lock", "list_events")]


def test_start_workflow_with_a_minted_id_takes_no_lock_and_reads_no_log(tmp_path):
    base, world, calls = _traced(tmp_path)
    run_id = lw.start_workflow(double, 4, world=world)
    assert _run_calls(calls, run_id) == []
    assert [e.type for e in base.list_events(run_id)] == ["run.created"]
    worker = lw.Worker(base, workflows=[double], concurrency=2)
    worker.run_until_idle()
    worker.close()
    assert lw.get_run(base, run_id).result(timeout=30) == 8


def test_enqueue_with_a_minted_id_takes_no_lock_and_reads_no_log(tmp_path):
    base, world, calls = _traced(tmp_path)
    lw.declare_queue(base, "q", concurrency=1)
    handles = [lw.enqueue(world, double, i, queue="q") for i in range(3)]
    for h in handles:
        assert _run_calls(calls, h.run_id) == []
        assert [e.type for e in base.list_events(h.run_id)] == ["run.created"]
    worker = lw.Worker(base, workflows=[double], concurrency=2)
    worker.run_until_idle()
    worker.close()
    assert [h.result(timeout=30) for h in handles] == [0, 2, 4]


def test_a_chosen_id_is_created_under_its_lock_once(tmp_path):
    base, world, calls = _traced(tmp_path)
    assert lw.start_workflow(double, 1, world=world, run_id="run_chosen") == "run_chosen"
    assert _run_calls(calls, "run_chosen") == ["run_lock", "list_events"]
    # Again with the same input: the existing run, nothing written.
    assert lw.start_workflow(double, 1, world=world, run_id="run_chosen") == "run_chosen"
    assert [e.type for e in base.list_events("run_chosen")] == ["run.created"]
    lw.declare_queue(base, "q")
    calls.clear()
    lw.enqueue(world, double, 1, queue="q", run_id="run_chosen_queued")
    assert _run_calls(calls, "run_chosen_queued") == ["run_lock", "list_events"]
