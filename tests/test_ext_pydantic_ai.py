"""LittleWorkflowDurability: an agent's model requests and tool calls are durable steps of
the enclosing run. FunctionModel / TestModel only (no network)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from typing import Any

import pytest
from checkout import SRC

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, ModelRetry  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    FunctionToolResultEvent,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.models.test import TestModel  # noqa: E402

import little_workflow as lw  # noqa: E402
from little_workflow.ext.pydantic_ai import STEP_PREFIX, LittleWorkflowDurability  # noqa: E402

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)


class Counter:
    def __init__(self) -> None:
        self.model = 0
        self.tools: list[str] = []


def weather_agent(counter: Counter, name: str = "forecaster",
                  waits: dict[str, asyncio.Event] | None = None, **capability: Any) -> Agent:
    """`waits`: the tool is async, and the call for each city named there returns only once
    its event is set (no timing: the order tools finish in is the test's)."""
    async def stream_fn(messages: list, info: AgentInfo) -> Any:
        from pydantic_ai.models.function import DeltaToolCall

        response = model_fn(messages, info)
        for i, part in enumerate(response.parts):
            if isinstance(part, TextPart):
                yield part.content
            else:
                yield {i: DeltaToolCall(name=part.tool_name, json_args=json.dumps(part.args),
                                        tool_call_id=part.tool_call_id)}

    def model_fn(messages: list, info: AgentInfo) -> ModelResponse:
        counter.model += 1
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart("forecast: " + "; ".join(sorted(str(p.content) for p in returns)))])
        return ModelResponse(parts=[ToolCallPart("weather", {"city": "Paris"}, tool_call_id="c1"),
                                    ToolCallPart("weather", {"city": "Oslo"}, tool_call_id="c2")])

    agent = Agent(FunctionModel(model_fn, stream_function=stream_fn), name=name,
                  capabilities=[LittleWorkflowDurability(**capability)])

    if waits is not None:
        @agent.tool_plain
        async def weather(city: str) -> str:
            counter.tools.append(city)
            if city in waits:
                await waits[city].wait()
            return f"sunny in {city}"

        return agent

    @agent.tool_plain
    def weather(city: str) -> str:
        counter.tools.append(city)
        return f"sunny in {city}"

    return agent


def unit_paths(world: Any, run_id: str) -> list[str]:
    return [e.payload["stepPath"] for e in world.list_events(run_id)
            if e.type == "step.succeeded" and e.payload["stepPath"].startswith(STEP_PREFIX + "/")]


def test_run_makes_every_model_request_and_tool_call_a_step(lw_world: Any) -> None:
    counter = Counter()
    agent = weather_agent(counter)

    @lw.workflow(id="ask")
    async def ask(ctx: lw.RunContext, input: dict) -> dict:
        result = await agent.run(input["q"])
        return {"output": result.output, "requests": result.usage.requests, "runId": result.run_id}

    res = lw.run_workflow(ask, {"q": "weather?"}, world=lw_world, run_id="run_a1")
    assert res.output["output"] == "forecast: sunny in Oslo; sunny in Paris"
    assert counter.model == 2 and sorted(counter.tools) == ["Oslo", "Paris"]
    # Readable: agent name and its run's number in this workflow run, the turn (run step),
    # then `model` or the tool's name and its call id (never the order calls finish in).
    assert sorted(unit_paths(lw_world, "run_a1")) == [
        f"{STEP_PREFIX}/forecaster-1/1/model",
        f"{STEP_PREFIX}/forecaster-1/1/weather/c1",
        f"{STEP_PREFIX}/forecaster-1/1/weather/c2",
        f"{STEP_PREFIX}/forecaster-1/2/model",
    ]
    # The same run again returns its result; replay re-executes the body calling nothing.
    assert lw.run_workflow(ask, {"q": "weather?"}, world=lw_world, run_id="run_a1").output == res.output
    assert lw.replay_run(lw_world, "run_a1", ask).output == res.output
    assert counter.model == 2 and len(counter.tools) == 2


def test_outside_a_workflow_the_agent_runs_as_usual(lw_world: Any) -> None:
    counter = Counter()
    agent = weather_agent(counter)
    assert agent.run_sync("weather?").output == "forecast: sunny in Oslo; sunny in Paris"
    assert asyncio.run(agent.run("weather?")).output.startswith("forecast:")
    assert counter.model == 4 and lw_world.list_runs() == []
    assert lw.current_run() is None


def test_inside_a_step_function_the_step_is_the_durable_unit(lw_world: Any) -> None:
    counter = Counter()
    agent = weather_agent(counter)

    async def ask(q: str) -> str:
        assert lw.current_run() is not None  # the run is known, but this is a step
        return (await agent.run(q)).output

    @lw.workflow(id="in-step")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        assert lw.current_run() is ctx
        return {"answer": await ctx.step("ask", ask, input["q"])}

    res = lw.run_workflow(wf, {"q": "weather?"}, world=lw_world, run_id="run_step1")
    assert res.output == {"answer": "forecast: sunny in Oslo; sunny in Paris"}
    assert unit_paths(lw_world, "run_step1") == []  # one step, "ask"


def test_iter_and_run_stream_are_durable_too(lw_world: Any) -> None:
    counter = Counter()
    agent = weather_agent(counter)

    @lw.workflow(id="iter")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        nodes = []
        async with agent.iter(input["q"]) as run:
            async for node in run:
                nodes.append(type(node).__name__)
        return {"output": run.result.output, "nodes": nodes}

    res = lw.run_workflow(wf, {"q": "weather?"}, world=lw_world, run_id="run_it1")
    assert res.output["output"] == "forecast: sunny in Oslo; sunny in Paris"
    assert len(unit_paths(lw_world, "run_it1")) == 4
    assert lw.replay_run(lw_world, "run_it1", wf).output == res.output
    assert counter.model == 2


def test_model_retry_from_a_tool_is_recorded_and_not_repeated(lw_world: Any) -> None:
    attempts: list[int] = []

    def model_fn(messages: list, info: AgentInfo) -> ModelResponse:
        # A tool's ModelRetry comes back as a tool return marked as a retry.
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns and not returns[-1].retry:
            return ModelResponse(parts=[TextPart(f"got {returns[-1].content}")])
        return ModelResponse(parts=[ToolCallPart("lookup", {"key": "k"}, tool_call_id=f"t{len(returns)}")])

    agent = Agent(FunctionModel(model_fn), name="retrier", capabilities=[LittleWorkflowDurability()])

    @agent.tool_plain
    def lookup(key: str) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise ModelRetry("not yet, try again")
        return "value"

    @lw.workflow(id="retry")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        return {"output": (await agent.run("go")).output}

    res = lw.run_workflow(wf, {}, world=lw_world, run_id="run_r1")
    assert res.output == {"output": "got value"} and len(attempts) == 2
    assert lw.replay_run(lw_world, "run_r1", wf).output == res.output
    assert len(attempts) == 2


def test_two_concurrent_agent_runs_keep_their_own_results(lw_world: Any) -> None:
    counter = Counter()
    agent = weather_agent(counter)

    @lw.workflow(id="two")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        a, b = await asyncio.gather(agent.run("first"), agent.run("second"))
        return {"a": a.run_id, "b": b.run_id, "out": [a.output, b.output]}

    res = lw.run_workflow(wf, {}, world=lw_world, run_id="run_two")
    assert res.output["a"] != res.output["b"]
    paths = unit_paths(lw_world, "run_two")
    assert len(paths) == 8
    # Each agent run has its own label, numbered in the order the runs start.
    assert {p.split("/")[1] for p in paths} == {"forecaster-1", "forecaster-2"}
    # Served again on a resume: each agent run gets its own recorded results back.
    assert lw.run_workflow(wf, {}, world=lw_world, run_id="run_two").output == res.output
    # Not `replay_run` here: two agent runs under a bare asyncio.gather interleave their
    # steps in whatever order their threads finish, and replay checks the log's order of
    # steps that are not in one ctx.parallel group (a known limit, noted on issue 22).


def test_an_error_in_a_tool_keeps_its_type_and_the_run_fails(lw_world: Any) -> None:
    def model_fn(messages: list, info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("explode", {}, tool_call_id="x1")])

    agent = Agent(FunctionModel(model_fn), name="exploder", capabilities=[LittleWorkflowDurability()])

    @agent.tool_plain
    def explode() -> str:
        raise KeyError("no such thing")

    seen: list[type] = []

    @lw.workflow(id="explode")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        try:
            await agent.run("go")
        except Exception as e:
            seen.append(type(e))
            raise
        return {}

    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(wf, {}, world=lw_world, run_id="run_x1")
    assert seen == [KeyError]
    failed = [e for e in lw_world.list_events("run_x1") if e.type == "step.failed"]
    assert len(failed) == 1 and "KeyError" in json.dumps(failed[0].payload["error"])


def test_test_model_agent_with_structured_output(lw_world: Any) -> None:
    agent = Agent(TestModel(), name="tm", output_type=dict, capabilities=[LittleWorkflowDurability()])

    @agent.tool_plain
    def double(x: int) -> int:
        return 2 * x

    @lw.workflow(id="tm")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        result = await agent.run("go")
        return {"output": result.output, "requests": result.usage.requests}

    res = lw.run_workflow(wf, {}, world=lw_world, run_id="run_tm1")
    assert res.output["requests"] >= 2
    assert lw.replay_run(lw_world, "run_tm1", wf).output == res.output


# ---- SIGKILL at each boundary -------------------------------------------------------


def run_child(data: str, ledger: str, run_id: str, kill_at: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, TESTS, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, os.path.join(TESTS, "pydantic_ai_child.py"),
                           data, ledger, run_id, kill_at],
                          env=env, capture_output=True, text=True, timeout=120)


def ledger(path: str) -> list[str]:
    with open(path) as f:
        return sorted(line.strip() for line in f if line.strip())


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: Any) -> dict:
    tmp = tmp_path_factory.mktemp("clean")
    done = run_child(str(tmp / "data"), str(tmp / "ledger"), "run_clean", "none")
    assert done.returncode == 0, done.stderr
    assert ledger(str(tmp / "ledger")) == ["model1", "model2", "tool-c1", "tool-c2"]
    return json.loads(done.stdout)


@pytest.mark.parametrize("kill_at, calls", [
    # killed while both tools were in flight: the model request was committed, no tool was
    ("tool", ["model1", "model2", "tool-c1", "tool-c1", "tool-c2", "tool-c2"]),
    # killed inside the second model request: both tool results were committed
    ("model2", ["model1", "model2", "model2", "tool-c1", "tool-c2"]),
    # killed inside tool c2 once c1 was committed: only c2 runs again
    ("parallel", ["model1", "model2", "tool-c1", "tool-c2", "tool-c2"]),
])
def test_sigkill_then_resume_calls_nothing_committed_again(
        kill_at: str, calls: list[str], uninterrupted: dict, tmp_path: Any) -> None:
    data, led = str(tmp_path / "data"), str(tmp_path / "ledger")
    killed = run_child(data, led, "run_k1", kill_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = run_child(data, led, "run_k1", "none")
    assert resumed.returncode == 0, resumed.stderr
    assert ledger(led) == sorted(calls)
    out = json.loads(resumed.stdout)
    # Output and usage equal an uninterrupted run's (the agent run id is the run's own).
    assert {k: v for k, v in out.items() if k != "runId"} == \
        {k: v for k, v in uninterrupted.items() if k != "runId"}
    # Replaying the log in a fresh process re-executes the body calling nothing.
    replayed = run_child(data, led, "run_k1", "replay")
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout) == out and ledger(led) == sorted(calls)


def test_deferred_tool_approval_suspends_the_run_until_send_event(lw_world: Any) -> None:
    from pydantic_ai import DeferredToolRequests

    from little_workflow.ext.pydantic_ai import wait_for_approvals

    deleted: list[str] = []
    model_calls: list[int] = []

    def model_fn(messages: list, info: AgentInfo) -> ModelResponse:
        model_calls.append(1)
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"done: {returns[-1].content}")])
        return ModelResponse(parts=[ToolCallPart("delete_file", {"name": "a.txt"}, tool_call_id="d1")])

    agent = Agent(FunctionModel(model_fn), name="janitor", output_type=[str, DeferredToolRequests],
                  capabilities=[LittleWorkflowDurability()])

    @agent.tool_plain(requires_approval=True)
    def delete_file(name: str) -> str:
        deleted.append(name)
        return f"deleted {name}"

    @lw.workflow(id="janitor")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        result = await agent.run("clean up")
        if isinstance(result.output, DeferredToolRequests):
            decisions = await wait_for_approvals(ctx, "approve", result.output)
            result = await agent.run(message_history=result.all_messages(),
                                     deferred_tool_results=decisions)
        return {"output": result.output}

    first = lw.run_workflow(wf, {}, world=lw_world, run_id="run_j1", suspend=True)
    assert first.status == "waiting" and first.waiting["name"] == "approval"
    assert deleted == [] and len(model_calls) == 1
    lw.send_event(lw_world, "run_j1", "approval", {"approvals": {"d1": True}})
    done = lw.run_workflow(wf, {}, world=lw_world, run_id="run_j1", suspend=True)
    assert done.status == "completed" and done.output == {"output": "done: deleted a.txt"}
    # The first agent run was served from the log on resume: one model call before, one after.
    assert deleted == ["a.txt"] and len(model_calls) == 2
    assert lw.replay_run(lw_world, "run_j1", wf).output == done.output


def test_denied_tool_call_is_not_run(lw_world: Any) -> None:
    from pydantic_ai import DeferredToolRequests

    from little_workflow.ext.pydantic_ai import wait_for_approvals

    deleted: list[str] = []

    def model_fn(messages: list, info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"result: {returns[-1].content}")])
        return ModelResponse(parts=[ToolCallPart("delete_file", {"name": "b.txt"}, tool_call_id="d2")])

    agent = Agent(FunctionModel(model_fn), name="janitor2", output_type=[str, DeferredToolRequests],
                  capabilities=[LittleWorkflowDurability()])

    @agent.tool_plain(requires_approval=True)
    def delete_file(name: str) -> str:
        deleted.append(name)
        return f"deleted {name}"

    @lw.workflow(id="janitor2")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        result = await agent.run("clean up")
        decisions = await wait_for_approvals(ctx, "approve", result.output)
        result = await agent.run(message_history=result.all_messages(), deferred_tool_results=decisions)
        return {"output": result.output}

    lw.send_event(lw_world, lw.start_workflow(wf, {}, world=lw_world, run_id="run_j2"), "approval",
                  {"approvals": {"d2": "not that file"}})
    done = lw.run_workflow(wf, {}, world=lw_world, run_id="run_j2")
    assert deleted == [] and done.output == {"output": "result: not that file"}


def test_each_call_waiting_for_approval_is_listed_and_answered_on_its_own(lw_world: Any) -> None:
    from pydantic_ai import DeferredToolRequests

    from little_workflow.ext.pydantic_ai import wait_for_approvals

    done: list[str] = []

    def model_fn(messages: list, info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart("; ".join(sorted(str(p.content) for p in returns)))])
        return ModelResponse(parts=[
            ToolCallPart("delete_file", {"name": "a.txt"}, tool_call_id="d1"),
            ToolCallPart("refund", {"order": "A-17", "amount": 20}, tool_call_id="r1")])

    agent = Agent(FunctionModel(model_fn), name="clerk", output_type=[str, DeferredToolRequests],
                  capabilities=[LittleWorkflowDurability()])

    @agent.tool_plain(requires_approval=True)
    def delete_file(name: str) -> str:
        done.append(name)
        return f"deleted {name}"

    @agent.tool_plain(requires_approval=True)
    def refund(order: str, amount: int) -> str:
        done.append(order)
        return f"refunded {order}"

    @lw.workflow(id="clerk")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        result = await agent.run("tidy up")
        if isinstance(result.output, DeferredToolRequests):
            decisions = await wait_for_approvals(ctx, "approve", result.output)
            result = await agent.run(message_history=result.all_messages(),
                                     deferred_tool_results=decisions)
        return {"output": result.output}

    assert lw.run_workflow(wf, {}, world=lw_world, run_id="run_cl1", suspend=True).status == "waiting"
    pending = lw.pending_approvals(lw_world)
    assert [(p.run_id, p.workflow_id, p.tool_call_id, p.tool_name, p.args) for p in pending] == [
        ("run_cl1", "clerk", "d1", "delete_file", {"name": "a.txt"}),
        ("run_cl1", "clerk", "r1", "refund", {"order": "A-17", "amount": 20})]
    # One call answered: the run goes on waiting for the other, which alone is pending.
    lw.approve_tool_call(lw_world, "run_cl1", "r1")
    again = lw.run_workflow(wf, {}, world=lw_world, run_id="run_cl1", suspend=True)
    assert again.status == "waiting" and done == []
    assert [p.tool_call_id for p in lw.pending_approvals(lw_world)] == ["d1"]
    lw.approve_tool_call(lw_world, "run_cl1", "d1", approved=False, reason="keep a.txt")
    res = lw.run_workflow(wf, {}, world=lw_world, run_id="run_cl1", suspend=True)
    assert res.status == "completed" and done == ["A-17"]
    assert res.output == {"output": "keep a.txt; refunded A-17"}
    assert lw.pending_approvals(lw_world) == []
    assert lw.replay_run(lw_world, "run_cl1", wf).output == res.output


def test_run_stream_and_an_event_stream_handler_are_durable(lw_world: Any) -> None:
    counter = Counter()
    seen: list[str] = []

    async def handler(ctx: Any, events: Any) -> None:
        async for event in events:
            seen.append(type(event).__name__)

    agent = weather_agent(counter, name="streamer", event_stream_handler=handler)

    @lw.workflow(id="stream")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        async with agent.run_stream(input["q"]) as run:
            output = await run.get_output()
        return {"output": output}

    res = lw.run_workflow(wf, {"q": "weather?"}, world=lw_world, run_id="run_st1")
    assert res.output == {"output": "forecast: sunny in Oslo; sunny in Paris"}
    paths = unit_paths(lw_world, "run_st1")
    assert f"{STEP_PREFIX}/streamer-1/1/model.stream" in paths, paths
    # Tool events are handled in steps of their own, under the tool call they belong to.
    events = sorted(p for p in paths if ".event" in p)
    assert events == [f"{STEP_PREFIX}/streamer-1/1/weather/{call}.event{n}"
                      for call in ("c1", "c2") for n in ("", "-2")], paths
    handled = list(seen)
    assert lw.replay_run(lw_world, "run_st1", wf).output == res.output
    assert counter.model == 2 and len(counter.tools) == 2
    assert handled.count("FunctionToolCallEvent") == 2 and handled.count("FunctionToolResultEvent") == 2
    # Replay serves the handler's steps (and the model request streamed inside its step)
    # from the log: the handler is not called again.
    assert seen == handled


def test_parallel_tool_calls_that_finish_out_of_call_order_replay(lw_world: Any) -> None:
    """Paris (call c1) returns only once Oslo's (c2) result event was handled: the log holds
    c2's result event step before c1's, the reverse of the order they were called in.
    Replay serves every step without calling anything, as resuming does (the run waits
    after the agent, so resuming runs the body again)."""
    counter = Counter()
    seen: list[str] = []
    oslo_handled = asyncio.Event()

    async def handler(ctx: Any, events: Any) -> None:
        async for event in events:
            seen.append(type(event).__name__)
            if isinstance(event, FunctionToolResultEvent) and event.tool_call_id == "c2":
                oslo_handled.set()

    agent = weather_agent(counter, name="streamer", waits={"Paris": oslo_handled},
                          event_stream_handler=handler)

    @lw.workflow(id="stream")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        async with agent.run_stream(input["q"]) as run:
            output = await run.get_output()
        return {"output": output, "then": await ctx.wait_for_event("gate", "go")}

    first = lw.run_workflow(wf, {"q": "weather?"}, world=lw_world, run_id="run_order", suspend=True)
    assert first.status == "waiting"
    started = {e.payload["stepPath"].rpartition("/")[2]: e.sequence
               for e in lw_world.list_events("run_order") if e.type == "step.started"}
    assert started["c1"] < started["c2"] < started["c2.event-2"] < started["c1.event-2"], started
    handled = list(seen)
    assert lw.replay_run(lw_world, "run_order", wf).status == "waiting"
    lw.send_event(lw_world, "run_order", "go", "on")
    res = lw.run_workflow(wf, {"q": "weather?"}, world=lw_world, run_id="run_order")
    assert res.output == {"output": "forecast: sunny in Oslo; sunny in Paris", "then": "on"}
    assert lw.replay_run(lw_world, "run_order", wf).output == res.output
    assert seen == handled and counter.model == 2 and len(counter.tools) == 2


def test_a_registered_model_can_be_selected_inside_a_workflow(lw_world: Any) -> None:
    def other_fn(messages: list, info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("from the other model")])

    other = FunctionModel(other_fn)
    counter = Counter()
    agent = weather_agent(counter, name="selector", models={"other": other})

    @lw.workflow(id="select")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        a = await agent.run("weather?")
        b = await agent.run("anything", model=other)
        return {"a": a.output, "b": b.output}

    res = lw.run_workflow(wf, {}, world=lw_world, run_id="run_sel1")
    assert res.output == {"a": "forecast: sunny in Oslo; sunny in Paris", "b": "from the other model"}
    assert f"{STEP_PREFIX}/selector-2/1/model.other" in unit_paths(lw_world, "run_sel1")
    assert lw.replay_run(lw_world, "run_sel1", wf).output == res.output


def test_tool_retry_is_an_lw_retry_of_the_tool_step(lw_world: Any) -> None:
    calls: list[int] = []

    def model_fn(messages: list, info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"got {returns[-1].content}")])
        return ModelResponse(parts=[ToolCallPart("flaky", {}, tool_call_id="f1")])

    agent = Agent(FunctionModel(model_fn), name="flaky_agent",
                  capabilities=[LittleWorkflowDurability(tool_retry=lw.Retry(max_attempts=3, backoff=0))])

    @agent.tool_plain
    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("try again")
        return "ok"

    @lw.workflow(id="flaky")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        return {"output": (await agent.run("go")).output}

    res = lw.run_workflow(wf, {}, world=lw_world, run_id="run_f1")
    assert res.output == {"output": "got ok"} and len(calls) == 3
    state = lw.materialize_run_state(lw_world, "run_f1")
    tool_step = next(s for p, s in state.steps.items() if p.endswith("/f1"))
    assert tool_step.attempts == 3


def call_then_answer(tool: str, args: dict | None = None) -> FunctionModel:
    """A model that calls `tool` once (call id `t1`), then answers with what it returned."""
    def model_fn(messages: list, info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"got {returns[-1].content}")])
        return ModelResponse(parts=[ToolCallPart(tool, args or {}, tool_call_id="t1")])

    return FunctionModel(model_fn)


def test_a_tool_marked_not_durable_runs_inline_in_the_workflow_body(lw_world: Any) -> None:
    from pydantic_ai import Tool

    seen: list[tuple[bool, bool]] = []

    def clock() -> str:
        # Inline: in the workflow body (the run is known), not inside a step.
        try:
            lw.current_step()
            in_step = True
        except lw.NotInStepError:
            in_step = False
        seen.append((lw.current_run() is not None, not in_step))
        return "noon"

    agent = Agent(call_then_answer("clock"), name="inline",
                  tools=[Tool(clock, metadata={"little_workflow": False})],
                  capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="inline")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        return {"output": (await agent.run("time?")).output}

    res = lw.run_workflow(wf, {}, world=lw_world, run_id="run_in1")
    assert res.output == {"output": "got noon"} and seen == [(True, True)]
    # Only the model requests are steps; the tool call is not recorded.
    assert sorted(unit_paths(lw_world, "run_in1")) == [
        f"{STEP_PREFIX}/inline-1/1/model", f"{STEP_PREFIX}/inline-1/2/model"]
    # As with DBOS's inline tools, a replay (or a resume) calls it again: not a step.
    assert lw.replay_run(lw_world, "run_in1", wf).output == res.output and len(seen) == 2


def test_per_tool_retry_and_timeout_come_from_the_tool_metadata(lw_world: Any) -> None:
    from pydantic_ai import Tool

    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("try again")
        return "ok"

    async def slow() -> str:
        await asyncio.sleep(30)
        return "late"

    retried = Agent(call_then_answer("flaky"), name="per_tool",
                    tools=[Tool(flaky, metadata={"little_workflow": {
                        "retry": lw.Retry(max_attempts=3, backoff=0)}})],
                    capabilities=[LittleWorkflowDurability()])
    timed = Agent(call_then_answer("slow"), name="per_tool_timeout",
                  tools=[Tool(slow, metadata={"little_workflow": {"timeout": 0.2}})],
                  capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="per-tool")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        out = {"retried": (await retried.run("go")).output}
        try:
            await timed.run("go")
        except lw.StepTimeoutError as e:
            out["timedOut"] = str(e)
        return out

    res = lw.run_workflow(wf, {}, world=lw_world, run_id="run_pt1")
    assert res.output["retried"] == "got ok" and len(calls) == 3
    assert "0.2" in res.output["timedOut"]
    state = lw.materialize_run_state(lw_world, "run_pt1")
    assert state.steps[f"{STEP_PREFIX}/per_tool-1/1/flaky/t1"].attempts == 3
    assert state.steps[f"{STEP_PREFIX}/per_tool_timeout-1/1/slow/t1"].status == "failed"


def test_tool_metadata_the_capability_cannot_read_is_an_error_naming_the_tool(lw_world: Any) -> None:
    from pydantic_ai import Tool
    from pydantic_ai.exceptions import UserError

    def lookup() -> str:
        return "x"

    agent = Agent(call_then_answer("lookup"), name="bad_meta",
                  tools=[Tool(lookup, metadata={"little_workflow": {"retries": 3}})],
                  capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="bad-meta")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        return {"output": (await agent.run("go")).output}

    with pytest.raises(lw.WorkflowFailedError) as info:
        lw.run_workflow(wf, {}, world=lw_world, run_id="run_bm1")
    cause = info.value.__cause__
    assert isinstance(cause, UserError)
    assert "'lookup'" in str(cause) and "'retries'" in str(cause) and "retry" in str(cause)


def runtime_tool() -> str:
    return "tool-result"


def test_a_function_toolset_added_at_run_time_runs_inline(lw_world: Any) -> None:
    from pydantic_ai import FunctionToolset

    agent = Agent(call_then_answer("runtime_tool"), name="runtime_fn",
                  capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="runtime-fn")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        result = await agent.run("go", toolsets=[FunctionToolset(tools=[runtime_tool])])
        return {"output": result.output}

    res = lw.run_workflow(wf, {}, world=lw_world, run_id="run_rt1")
    assert res.output == {"output": "got tool-result"}
    assert sorted(unit_paths(lw_world, "run_rt1")) == [
        f"{STEP_PREFIX}/runtime_fn-1/1/model", f"{STEP_PREFIX}/runtime_fn-1/2/model"]


def test_a_dynamic_toolset_added_at_run_time_is_still_refused(lw_world: Any) -> None:
    from pydantic_ai import FunctionToolset
    from pydantic_ai.exceptions import UserError
    from pydantic_ai.toolsets._dynamic import DynamicToolset

    agent = Agent(call_then_answer("runtime_tool"), name="runtime_dyn",
                  capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="runtime-dyn")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        toolset = DynamicToolset(lambda _: FunctionToolset(tools=[runtime_tool]), id="dyn")
        return {"output": (await agent.run("go", toolsets=[toolset])).output}

    with pytest.raises(lw.WorkflowFailedError) as info:
        lw.run_workflow(wf, {}, world=lw_world, run_id="run_rd1")
    assert isinstance(info.value.__cause__, UserError)
    assert "DynamicToolset" in str(info.value.__cause__)


def test_sigkill_while_waiting_for_approval_then_approve_and_resume(tmp_path: Any) -> None:
    import time

    data, led = str(tmp_path / "data"), str(tmp_path / "ledger")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, TESTS, os.environ.get("PYTHONPATH", "")])}
    args = [sys.executable, os.path.join(TESTS, "pydantic_ai_approval_child.py"), data, led, "run_ap1"]
    waiting = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:  # until the run waits for the approval
            if os.path.exists(data):
                with lw.local_world(data) as world:
                    if "run_ap1" in world.list_runs() and \
                            lw.materialize_run_state(world, "run_ap1").status == "waiting":
                        break
            time.sleep(0.05)
        else:
            raise AssertionError("the run never waited for its approval")
    finally:
        waiting.send_signal(signal.SIGKILL)
        waiting.wait(30)
    assert waiting.returncode == -signal.SIGKILL
    assert ledger(led) == ["model1"]
    with lw.local_world(data) as world:
        lw.send_event(world, "run_ap1", "approval", {"approvals": {"r1": True}})
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"output": "done: refunded A-17", "requests": 1}
    # The first agent run's model request came from the log: one call before, one after.
    assert ledger(led) == ["model1", "model2", "refund"]


def test_run_stream_events_inside_a_workflow(lw_world: Any) -> None:
    counter = Counter()
    agent = weather_agent(counter, name="eventer")

    @lw.workflow(id="events")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        kinds, output = [], None
        async with agent.run_stream_events(input["q"]) as events:
            async for event in events:
                kinds.append(type(event).__name__)
                if type(event).__name__ == "AgentRunResultEvent":
                    output = event.result.output
        return {"output": output, "toolCalls": kinds.count("FunctionToolCallEvent")}

    res = lw.run_workflow(wf, {"q": "weather?"}, world=lw_world, run_id="run_ev1")
    assert res.output == {"output": "forecast: sunny in Oslo; sunny in Paris", "toolCalls": 2}
    assert len(unit_paths(lw_world, "run_ev1")) == 4
    assert lw.replay_run(lw_world, "run_ev1", wf).output == res.output
    assert counter.model == 2 and len(counter.tools) == 2


def test_a_tool_result_over_64_kib_goes_through_an_artifact(lw_world: Any) -> None:
    big = "".join(chr(97 + i % 26) for i in range(100_000))
    calls: list[int] = []

    def model_fn(messages: list, info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"read {len(returns[-1].content)} characters")])
        return ModelResponse(parts=[ToolCallPart("read_book", {}, tool_call_id="b1")])

    agent = Agent(FunctionModel(model_fn), name="reader", capabilities=[LittleWorkflowDurability()])

    @agent.tool_plain
    def read_book() -> str:
        calls.append(1)
        return big

    @lw.workflow(id="reader")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        result = await agent.run("read")
        return {"output": result.output, "last": len(result.all_messages()[-2].parts[0].content)}

    res = lw.run_workflow(wf, {}, world=lw_world, run_id="run_big1")
    assert res.output == {"output": "read 100000 characters", "last": 100_000}
    tool = [e for e in lw_world.list_events("run_big1")
            if e.type == "step.succeeded" and e.payload["stepPath"].endswith("/b1")]
    assert len(tool) == 1 and "outputRef" in tool[0].payload
    assert lw.replay_run(lw_world, "run_big1", wf).output == res.output and calls == [1]


class OutOfStock(Exception):
    """A user's tool error; caught by type in the workflow body."""


def test_a_failed_unit_served_from_the_log_raises_its_original_type(lw_world: Any) -> None:
    from pydantic_ai.exceptions import UnexpectedModelBehavior

    def model_fn(messages: list, info: AgentInfo) -> ModelResponse:
        if "model" in str(messages[0].parts[0].content):
            raise UnexpectedModelBehavior("the model said nonsense", body='{"why": "?"}')
        return ModelResponse(parts=[ToolCallPart("buy", {"item": "otter"}, tool_call_id="b1")])

    agent = Agent(FunctionModel(model_fn), name="shopper", capabilities=[LittleWorkflowDurability()])
    calls: list[str] = []

    @agent.tool_plain
    def buy(item: str) -> str:
        calls.append(item)
        raise OutOfStock(f"no {item} left")

    @lw.workflow(id="shop")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        caught = {}
        for prompt in ("tool", "model"):
            try:
                await agent.run(prompt)
            except (OutOfStock, UnexpectedModelBehavior) as e:
                # The body branches on the type: a resume must take the same branch.
                caught[prompt] = [type(e).__module__, type(e).__qualname__, str(e)]
        return caught

    res = lw.run_workflow(wf, {}, world=lw_world, run_id="run_types1")
    expected = {"tool": [__name__, "OutOfStock", "no otter left"],
                "model": ["pydantic_ai.exceptions", "UnexpectedModelBehavior",
                          str(UnexpectedModelBehavior("the model said nonsense", body='{"why": "?"}'))]}
    assert res.output == expected and calls == ["otter"]
    # The log keeps each type as data: name, module and qualified name.
    errors = [e.payload["error"] for e in lw_world.list_events("run_types1") if e.type == "step.failed"]
    assert [(r["type"], r["module"], r["qualname"]) for r in errors] == [
        ("OutOfStock", __name__, "OutOfStock"),
        ("UnexpectedModelBehavior", "pydantic_ai.exceptions", "UnexpectedModelBehavior")]
    # Served from the log, the same types reach the body: the same branches, same output.
    assert lw.replay_run(lw_world, "run_types1", wf).output == expected
    assert calls == ["otter"]


class PollingModel(FunctionModel):
    """A model whose provider works in the background (as OpenAI background mode does):
    its first response is suspended, and Pydantic AI waits `continuation_delay` before it
    asks again, through the agent graph's sleep, which the capability makes `ctx.sleep`."""

    def continuation_delay(self, response: ModelResponse) -> float | None:
        return 600.0 if response.state == "suspended" else None


def test_an_agent_graph_sleep_is_a_durable_timer_and_a_resume_waits_only_the_rest(tmp_path: Any) -> None:
    from little_workflow.testing import FakeClock

    t0 = 1_800_000_000.0
    clock = FakeClock(start=t0)
    requests: list[str] = []

    def model_fn(messages: list, info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        if isinstance(last, ModelResponse) and last.state == "suspended":
            requests.append("poll")
            return ModelResponse(parts=[TextPart("the report is ready")])
        requests.append("start")
        return ModelResponse(parts=[], state="suspended", provider_response_id="job-1")

    agent = Agent(PollingModel(model_fn), name="reporter", capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="report")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        return {"output": (await agent.run("write the report")).output}

    data = str(tmp_path / "data")
    with lw.local_world(data, clock=clock) as world:
        r = lw.run_workflow(wf, {}, world=world, run_id="run_poll1", suspend=True)
        assert r.status == "waiting" and requests == ["start"]
        assert r.waiting["kind"] == "sleep" and r.waiting["stepPath"].startswith(STEP_PREFIX + "/")
        assert r.waiting["wakeAt"] == lw.list_runs(world).runs[0].waiting["wakeAt"]
        scheduled = [e for e in world.list_events("run_poll1") if e.type == "timer.scheduled"]
        assert len(scheduled) == 1
        wake_at = scheduled[0].payload["wakeAt"]
    # A fresh process 590 s later: the wake time is the committed one, 10 s remain.
    clock.advance(590)
    with lw.local_world(data, clock=clock) as world:
        r = lw.run_workflow(wf, {}, world=world, run_id="run_poll1", suspend=True)
        assert r.status == "waiting" and r.waiting["wakeAt"] == wake_at and requests == ["start"]
    clock.advance(10)
    with lw.local_world(data, clock=clock) as world:
        r = lw.run_workflow(wf, {}, world=world, run_id="run_poll1", suspend=True)
        assert r.status == "completed" and r.output == {"output": "the report is ready"}
        # The committed first request was not sent again; one timer, fired once.
        assert requests == ["start", "poll"]
        types = [e.type for e in world.list_events("run_poll1")]
        assert types.count("timer.scheduled") == 1 and types.count("timer.fired") == 1
        assert lw.replay_run(world, "run_poll1", wf).output == r.output and requests == ["start", "poll"]


def test_the_operation_backend_is_built_once_per_agent_binding() -> None:
    # Pydantic AI asks for the backend on every model request (callable engines bind per
    # request); ours holds nothing per request, so one per bound capability serves them all.
    capability = LittleWorkflowDurability()
    agent = Agent(FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart("hi")])),
                  name="once", capabilities=[capability])
    assert agent.run_sync("go").output == "hi"
    first = capability.get_durable_operation_backend()
    assert capability.get_durable_operation_backend() is first
    renamed = LittleWorkflowDurability(name="other")
    assert renamed.get_durable_operation_backend() is not first
    import copy
    bound = copy.copy(capability)
    bound.name = "bound-elsewhere"
    assert bound.get_durable_operation_backend() is not first
    assert capability.get_durable_operation_backend() is first
