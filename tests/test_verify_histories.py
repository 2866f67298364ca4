"""`little verify` names histories no single executor writes (DESIGN §15): a step path
committed twice in one run (two ends of one attempt, or a success after a success), a
record whose incarnation is older than a `run.started` before it, a `start` that does not
rise. Each history is made by hand with the log fence taken away
(`little_workflow.testing.without_log_fence`), as two unfenced executors would write it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import WorldMaker

import little_workflow as lw
from little_workflow.cli import cli
from little_workflow.testing import FakeClock, without_log_fence


@pytest.fixture(params=["local-file", "local_world"])
def maker(request: Any, tmp_path: Any) -> WorldMaker:
    return WorldMaker(request.param, tmp_path, request)


def world_args(maker: WorldMaker) -> list[str]:
    flag = "--data-dir" if maker.kind == "local_world" else "--world"
    return [flag, maker.data_dir]


def write(world: Any, run_id: str, records: list[tuple[str, dict[str, Any]]]) -> None:
    with without_log_fence():
        world.append_event(run_id, "run.created", {"workflowId": "hand", "input": None})
        for type_, payload in records:
            world.append_event(run_id, type_, payload)


def step(type_: str, path: str, attempt: int, inc: int, **more: Any) -> tuple[str, dict[str, Any]]:
    return type_, {"stepPath": path, "attempt": attempt, "incarnation": inc, **more}


def started(n: int) -> tuple[str, dict[str, Any]]:
    return "run.started", {"start": n}


def verify(maker: WorldMaker) -> tuple[int, str, dict[str, Any]]:
    runner = CliRunner()
    text = runner.invoke(cli, ["verify", *world_args(maker)])
    as_json = runner.invoke(cli, ["verify", "--json", *world_args(maker)])
    return text.exit_code, text.output, json.loads(as_json.output)


@lw.workflow(id="clean")
async def clean(ctx: lw.RunContext, input: Any) -> Any:
    flaky = await ctx.step("flaky", failing_once, retry=lw.Retry(max_attempts=2, backoff=0))
    await ctx.sleep("nap", 5)
    return [flaky, await ctx.parallel("g", [lambda: 1, lambda: 2])]


TRIES: list[int] = []


def failing_once() -> str:
    TRIES.append(1)
    if len(TRIES) % 2:
        raise ValueError("first attempt fails")
    return "ok"


def test_histories_a_single_executor_writes_are_ok(maker):
    clock = FakeClock(start=1_800_000_000)
    world = maker(clock=clock)
    assert lw.run_workflow(clean, None, world=world, run_id="run_clean", suspend=True).status \
        == "waiting"
    clock.advance(5)
    assert lw.run_workflow(clean, None, world=world, run_id="run_clean").output == ["ok", [1, 2]]
    code, out, report = verify(maker)
    assert code == 0 and report["ok"], out


def test_a_success_after_a_success_is_a_step_committed_twice(maker):
    world = maker()
    write(world, "run_twice", [
        started(1), step("step.started", "a/0", 1, 1), step("step.succeeded", "a/0", 1, 1, output=1),
        step("step.started", "a/0", 2, 1), step("step.succeeded", "a/0", 2, 1, output=2)])
    code, out, report = verify(maker)
    assert code == 1
    assert "run_twice: step a/0 committed twice: step.succeeded at 4 and at 6" in out, out
    assert report["problems"]["run_twice"] == ["step a/0 committed twice: step.succeeded at 4 "
                                               "and at 6"]


def test_two_ends_of_one_attempt_are_a_step_committed_twice(maker):
    world = maker()
    write(world, "run_ends", [
        started(1), step("step.started", "a", 1, 1),
        step("step.failed", "a", 1, 1, error={"type": "E"}, willRetry=False),
        step("step.succeeded", "a", 1, 1, output=1)])
    code, out, _ = verify(maker)
    assert code == 1
    assert "run_ends: step a attempt 1 ended twice: step.failed at 4 and step.succeeded at 5" \
        in out, out


def test_a_record_of_an_older_execution_after_a_newer_start(maker):
    world = maker()
    write(world, "run_stale", [
        started(1), step("step.started", "a", 1, 1), started(2), step("step.started", "a", 2, 2),
        step("step.succeeded", "a", 1, 1, output="late"), ("run.completed", {"output": 1,
                                                                            "incarnation": 2})])
    code, out, _ = verify(maker)
    assert code == 1
    assert ("run_stale: step.succeeded at 6 (step a) belongs to execution 1, after run.started 2 "
            "at 4") in out, out


def test_a_start_that_does_not_rise(maker):
    world = maker()
    write(world, "run_restart", [started(1), step("step.started", "a", 1, 1), started(1)])
    code, out, _ = verify(maker)
    assert code == 1
    assert "run_restart: run.started at 4 has start 1, not above start 1 at 2" in out, out
