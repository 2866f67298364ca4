"""`replay_run` checks the code against the log by the rule resuming uses (history.py):
ungrouped steps asked for from the workflow body come in the log's order; steps of
concurrent tasks (a bare `asyncio.gather`, an agent framework's parallel tool calls) come
in whatever order the tasks ran, so a log they interleaved replays whichever asks first.
A real divergence — a step the log does not hold, the body's steps in another order, steps
the log holds that the code no longer asks for — still raises ReplayDivergenceError."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conftest import WorldMaker

import little_workflow as lw


@pytest.fixture(params=["memory", "local_world"])
def make(request: Any, tmp_path: Any) -> WorldMaker:
    return WorldMaker(request.param, tmp_path, request)


def started_at(world: Any, run_id: str) -> dict[str, int]:
    return {e.payload["stepPath"]: e.sequence for e in world.list_events(run_id)
            if e.type == "step.started"}


def chains(left: tuple[str, ...], right: tuple[str, ...], tail: tuple[str, ...] = ("a", "b"),
           *, calls: list[str] | None = None) -> Any:
    """Two gathered tasks asking for their steps, a wait for the event "go", then the
    body's own steps. On the first run the left task's first step ends only once the right
    task's last step ran, so the left task's second step starts after all of the right
    task's: the log interleaves them out of call order, with no timing involved."""
    right_done = asyncio.Event()
    calls = calls if calls is not None else []

    def fn(name: str) -> Any:
        async def call() -> str:
            calls.append(name)
            if name == left[0] and right:
                await right_done.wait()
            if right and name == right[-1]:
                right_done.set()
            return name.upper()

        return call

    async def chain(ctx: Any, names: tuple[str, ...]) -> list[str]:
        return [await ctx.step(name, fn(name)) for name in names]

    @lw.workflow(id="gathered")
    async def wf(ctx: lw.RunContext, input: Any) -> list[str]:
        got_left, got_right = await asyncio.gather(chain(ctx, left), chain(ctx, right))
        await ctx.wait_for_event("gate", "go")
        return got_left + got_right + [await ctx.step(name, fn(name)) for name in tail]

    return wf


def finished(world: Any, wf: Any, run_id: str) -> lw.RunResult[Any]:
    assert lw.run_workflow(wf, {}, world=world, run_id=run_id, suspend=True).status == "waiting"
    lw.send_event(world, run_id, "go")
    return lw.run_workflow(wf, {}, world=world, run_id=run_id)


def test_gathered_steps_that_finished_out_of_call_order_replay(make: WorldMaker) -> None:
    world = make()
    calls: list[str] = []
    wf = chains(("l0", "l1"), ("r0", "r1"), calls=calls)
    assert lw.run_workflow(wf, {}, world=world, run_id="run_out_of_order",
                           suspend=True).status == "waiting"
    started = started_at(world, "run_out_of_order")
    assert started["l0"] < started["r0"] < started["r1"] < started["l1"], started
    again: list[str] = []
    fresh = chains(("l0", "l1"), ("r0", "r1"), calls=again)
    assert lw.replay_run(world, "run_out_of_order", fresh).status == "waiting"
    # Resuming serves the interleaved steps (as it always did), then runs the new ones.
    lw.send_event(world, "run_out_of_order", "go")
    result = lw.run_workflow(fresh, {}, world=world, run_id="run_out_of_order")
    assert result.output == ["L0", "L1", "R0", "R1", "A", "B"] and again == ["a", "b"]
    assert lw.replay_run(world, "run_out_of_order", fresh).output == result.output
    assert again == ["a", "b"]  # replay calls nothing


def test_a_gathered_task_asking_for_a_step_the_log_does_not_hold_diverges(
        make: WorldMaker) -> None:
    world = make()
    finished(world, chains(("l0", "l1"), ("r0", "r1")), "run_new_step")
    with pytest.raises(lw.ReplayDivergenceError) as caught:
        lw.replay_run(world, "run_new_step", chains(("l0", "l1"), ("q0", "r1")))
    assert caught.value.run_id == "run_new_step" and caught.value.step_path == "q0"


def test_the_bodys_steps_in_another_order_diverge_after_gathered_ones(make: WorldMaker) -> None:
    world = make()
    finished(world, chains(("l0", "l1"), ("r0", "r1")), "run_swapped")
    with pytest.raises(lw.ReplayDivergenceError) as caught:
        lw.replay_run(world, "run_swapped", chains(("l0", "l1"), ("r0", "r1"), ("b", "a")))
    assert caught.value.step_path == "b" and caught.value.log_step_path == "a"


@pytest.mark.parametrize("left, right, tail, missing, asked", [
    (("l0", "l1"), ("r0", "r1"), ("a",), "b", "(end)"),  # the body's last step removed
    (("l0",), ("r0", "r1"), ("a", "b"), "l1", "a"),  # a gathered task's last step removed
    (("l0", "l1"), ("r0", "r1"), (), "a", "(end)"),  # the body's steps removed
])
def test_steps_the_log_holds_that_the_code_no_longer_asks_for_diverge(
        make: WorldMaker, left: tuple[str, ...], right: tuple[str, ...], tail: tuple[str, ...],
        missing: str, asked: str) -> None:
    world = make()
    finished(world, chains(("l0", "l1"), ("r0", "r1")), "run_removed")
    with pytest.raises(lw.ReplayDivergenceError) as caught:
        lw.replay_run(world, "run_removed", chains(left, right, tail))
    assert caught.value.run_id == "run_removed" and caught.value.log_step_path == missing
    assert caught.value.step_path == asked and not caught.value.resuming
    assert str(caught.value).startswith("replay of run run_removed diverged")
    assert f"step {missing!r}" in str(caught.value)


def grouped(order: tuple[str, str]) -> Any:
    """A step "a" and a parallel group "g" (in `order`) whose child 0 ends only after
    child 1 ran, so the children's successes are logged out of call order."""
    second_ran = asyncio.Event()

    async def first() -> int:
        await second_ran.wait()
        return 0

    async def second() -> int:
        second_ran.set()
        return 1

    @lw.workflow(id="grouped")
    async def wf(ctx: lw.RunContext, input: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in order:
            out[name] = (await ctx.step("a", lambda: "A") if name == "a"
                         else await ctx.parallel("g", [first, second]))
        return out

    return wf


def test_a_parallel_group_replays_in_any_child_order_but_not_out_of_the_bodys_order(
        make: WorldMaker) -> None:
    world = make()
    result = lw.run_workflow(grouped(("a", "g")), {}, world=world, run_id="run_grouped")
    assert result.output == {"a": "A", "g": [0, 1]}
    succeeded = [e.payload["stepPath"] for e in world.list_events("run_grouped")
                 if e.type == "step.succeeded"]
    assert succeeded.index("g/1") < succeeded.index("g/0"), succeeded
    assert lw.replay_run(world, "run_grouped", grouped(("a", "g"))).output == result.output
    with pytest.raises(lw.ReplayDivergenceError) as caught:
        lw.replay_run(world, "run_grouped", grouped(("g", "a")))
    assert caught.value.step_path == "g" and caught.value.log_step_path == "a"
