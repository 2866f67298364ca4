"""Pydantic AI's own durable-execution scenarios, ported from its DBOS suite
(`tests/test_dbos.py`: the `DBOSDurability` capability tests and the agent scenarios) and
the Temporal sibling (`tests/test_temporal.py`), run through `LittleWorkflowDurability` on
memory, local files and local_world. FunctionModel / TestModel only: no network.

Each test names the peer test it ports. Where our engine differs on purpose the test says
so (a runtime `FunctionToolset` runs inline as on DBOS; units run in the workflow's own
process, so deps need not serialise). Each scenario also checks what the peers check by
killing workers: the run's log serves everything on replay (`lw.replay_run` calls no model
and no tool again) and a second `run_workflow` with the run id returns the stored result.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import (  # noqa: E402
    Agent,
    CancellationToken,
    DeferredToolRequests,
    DeferredToolResults,
    ExternalToolset,
    FunctionToolset,
    ModelRetry,
    RunCancelled,
    Tool,
    ToolDefinition,
)
from pydantic_ai.capabilities import (  # noqa: E402
    Capability,
    DynamicCapability,
    ProcessEventStream,
    SelectModel,
    Toolset,
)
from pydantic_ai.exceptions import (  # noqa: E402
    ApprovalRequired,
    CallDeferred,
    ToolFailed,
    UsageLimitExceeded,
    UserError,
)
from pydantic_ai.messages import (  # noqa: E402
    AgentStreamEvent,
    FinalResultEvent,
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    PartStartEvent,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.models.test import TestModel  # noqa: E402
from pydantic_ai.settings import ModelSettings  # noqa: E402
from pydantic_ai.tools import RunContext as AgentContext  # noqa: E402
from pydantic_ai.toolsets._dynamic import DynamicToolset  # noqa: E402
from pydantic_ai.usage import UsageLimits  # noqa: E402

import little_workflow as lw  # noqa: E402
from little_workflow.ext.pydantic_ai import (  # noqa: E402
    STEP_PREFIX,
    LittleWorkflowDurability,
    wait_for_approvals,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pydantic_ai_continuation import (  # noqa: E402
    ScriptedContinuationModel,
    StreamSegment,
    scripted_response,
)


@pytest.fixture(params=["memory", "local-file", "local_world"])
def world(request: Any, tmp_path: Any) -> Any:
    from conftest import WorldMaker

    return WorldMaker(request.param, tmp_path, request)()


def units(world: Any, run_id: str) -> list[str]:
    """The capability's steps of a run, in the order they finished."""
    return [e.payload["stepPath"] for e in world.list_events(run_id)
            if e.type == "step.succeeded" and e.payload["stepPath"].startswith(STEP_PREFIX + "/")]


def run_twice(wf: Any, world: Any, run_id: str, input: Any = None) -> Any:
    """Run `wf`, then check what a recovered run must: the same run id returns the stored
    output, and a replay from the log reaches it again calling nothing."""
    first = lw.run_workflow(wf, input or {}, world=world, run_id=run_id)
    assert lw.run_workflow(wf, input or {}, world=world, run_id=run_id).output == first.output
    assert lw.replay_run(world, run_id, wf).output == first.output
    return first.output


def echo(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    for message in reversed(messages):
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                return ModelResponse(parts=[TextPart(f"Echo: {part.content}")])
    return ModelResponse(parts=[TextPart("no prompt")])


class Calls:
    """Counts model requests and tool calls, to show a replay makes none."""

    def __init__(self) -> None:
        self.model = 0
        self.tools: list[str] = []

    def counted(self, fn: Any) -> Any:
        def model_fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            self.model += 1
            return fn(messages, info)
        return model_fn


# ---- the capability on its own ------------------------------------------------------


def test_simple_agent(world: Any) -> None:
    """test_dbos_durability_simple_agent, test_durability_simple_agent_run_in_workflow"""
    calls = Calls()
    agent = Agent(FunctionModel(calls.counted(echo)), name="durability_simple",
                  capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="simple")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        return (await agent.run("Hello")).output

    assert run_twice(wf, world, "run_simple") == "Echo: Hello" and calls.model == 1


def test_outside_a_workflow_the_capability_is_transparent(world: Any) -> None:
    """test_dbos_durability_outside_workflow, test_durability_outside_workflow_is_transparent"""
    agent = Agent(FunctionModel(echo), name="durability_outside",
                  capabilities=[LittleWorkflowDurability()])
    assert agent.run_sync("Hello outside").output == "Echo: Hello outside"
    assert world.list_runs() == []


def test_model_requests_become_steps(world: Any) -> None:
    """test_dbos_durability_step_verification"""
    agent = Agent(FunctionModel(echo), name="durability_steps",
                  capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="steps")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        return (await agent.run("verify steps")).output

    run_twice(wf, world, "run_steps")
    assert units(world, "run_steps") == [f"{STEP_PREFIX}/durability_steps-1/1/model"]


def test_agent_with_tools(world: Any) -> None:
    """test_durability_agent_with_tools_in_workflow (Temporal)"""
    tools: list[str] = []

    def get_weather(city: str) -> str:
        tools.append(city)
        return "sunny"

    agent = Agent(TestModel(), name="durability_tools", tools=[get_weather],
                  capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="tools")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        return (await agent.run("weather?")).output

    assert run_twice(wf, world, "run_tools") == '{"get_weather":"sunny"}'
    assert len(tools) == 1
    paths = units(world, "run_tools")
    assert paths[0] == f"{STEP_PREFIX}/durability_tools-1/1/model"
    assert paths[1].startswith(f"{STEP_PREFIX}/durability_tools-1/1/get_weather/")


def test_a_cancellation_token_is_refused_in_a_workflow_and_works_outside(world: Any) -> None:
    """test_dbos_durability_rejects_cancellation_token_in_workflow"""
    agent = Agent(FunctionModel(echo), name="durability_cancel_token",
                  capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="token")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        return (await agent.run("Hello", cancellation_token=CancellationToken())).output

    with pytest.raises(lw.WorkflowFailedError) as info:
        lw.run_workflow(wf, {}, world=world, run_id="run_token")
    assert isinstance(info.value.__cause__, UserError)
    assert "`cancellation_token` cannot be used with little-workflow" in str(info.value.__cause__)
    assert agent.run_sync("Hello", cancellation_token=CancellationToken()).output == "Echo: Hello"


def test_an_agent_needs_a_name_and_a_model() -> None:
    """test_dbos_durability_requires_agent_name, ..._requires_model,
    ..._explicit_name_overrides_agent_name_and_supports_unnamed_agent"""
    with pytest.raises(UserError, match="unique `name`"):
        Agent(FunctionModel(echo), capabilities=[LittleWorkflowDurability()])
    with pytest.raises(UserError, match="needs to have a `model`"):
        Agent(name="needs_model", capabilities=[LittleWorkflowDurability()])
    named = Agent(FunctionModel(echo), name="agent-name",
                  capabilities=[LittleWorkflowDurability(name="custom")])
    unnamed = Agent(FunctionModel(echo), capabilities=[LittleWorkflowDurability(name="unnamed-custom")])
    assert LittleWorkflowDurability.from_agent(named).name == "custom"  # type: ignore[union-attr]
    assert LittleWorkflowDurability.from_agent(unnamed).name == "unnamed-custom"  # type: ignore[union-attr]


# ---- models -------------------------------------------------------------------------


def alt_model_fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    return ModelResponse(parts=[TextPart("alt-response")])


ALT = FunctionModel(alt_model_fn, model_name="alt")


def test_a_registered_model_is_selected_by_key_or_instance(world: Any) -> None:
    """test_dbos_durability_runtime_registered_model, test_durability_runtime_registered_model_is_used"""
    agent = Agent(FunctionModel(echo), name="durability_registered",
                  capabilities=[LittleWorkflowDurability(models={"alt": ALT})])

    @lw.workflow(id="registered")
    async def wf(ctx: lw.RunContext, input: Any) -> list[str]:
        by_key = await agent.run("hello", model="alt")
        by_instance = await agent.run("hello", model=ALT)
        return [by_key.output, by_instance.output]

    assert run_twice(wf, world, "run_registered") == ["alt-response", "alt-response"]
    assert units(world, "run_registered") == [
        f"{STEP_PREFIX}/durability_registered-1/1/model.alt",
        f"{STEP_PREFIX}/durability_registered-2/1/model.alt"]


def test_a_per_step_model_selector_uses_the_selected_model(world: Any) -> None:
    """test_dbos_durability_per_step_model_selector_uses_selected_model, ..._preserves_alias"""
    by_instance = Agent("primary", name="selector_instance", capabilities=[
        SelectModel(lambda ctx: ALT),
        LittleWorkflowDurability(models={"primary": FunctionModel(echo), "alt": ALT})])
    by_alias = Agent("primary", name="selector_alias", capabilities=[
        SelectModel(lambda ctx: "alt"),
        LittleWorkflowDurability(models={"primary": FunctionModel(echo), "alt": ALT})])

    @lw.workflow(id="selector")
    async def wf(ctx: lw.RunContext, input: Any) -> list[str]:
        return [(await by_instance.run("hello")).output, (await by_alias.run("hello")).output]

    assert run_twice(wf, world, "run_selector") == ["alt-response", "alt-response"]


def test_an_overridden_registered_model_crosses_the_step(world: Any) -> None:
    """test_dbos_durability_override_registered_model"""
    agent = Agent(FunctionModel(echo), name="durability_override",
                  capabilities=[LittleWorkflowDurability(models={"alt": ALT})])

    @lw.workflow(id="override-model")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        with agent.override(model="alt"):
            return (await agent.run("hello")).output

    assert run_twice(wf, world, "run_override_model") == "alt-response"


def test_an_unregistered_model_instance_is_refused_before_any_step(world: Any) -> None:
    """test_dbos_durability_unregistered_model_instance_errors,
    test_durability_unregistered_model_instance_errors"""
    agent = Agent(FunctionModel(echo), name="durability_unregistered",
                  capabilities=[LittleWorkflowDurability()])
    stranger = FunctionModel(alt_model_fn, model_name="stranger")

    @lw.workflow(id="unregistered")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        return (await agent.run("hello", model=stranger)).output

    with pytest.raises(lw.WorkflowFailedError) as info:
        lw.run_workflow(wf, {}, world=world, run_id="run_unregistered")
    assert isinstance(info.value.__cause__, UserError)
    assert "was not registered with `LittleWorkflowDurability`" in str(info.value.__cause__)
    assert units(world, "run_unregistered") == []


def test_a_string_default_model(world: Any) -> None:
    """test_dbos_durability_string_default_model"""
    agent = Agent("test", name="durability_string_default",
                  capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="string-default")
    async def wf(ctx: lw.RunContext, input: Any) -> list[str]:
        return [(await agent.run("hello")).output, (await agent.run("hello", model="test")).output]

    assert run_twice(wf, world, "run_string_default") == ["success (no tool calls)"] * 2


class CustomModelSettings(ModelSettings, total=False):
    custom_setting: str


def test_custom_model_settings(world: Any) -> None:
    """test_custom_model_settings"""
    def return_settings(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(str(info.model_settings))])

    settings = CustomModelSettings(max_tokens=123, custom_setting="custom_value")
    agent = Agent(FunctionModel(return_settings, settings=settings), name="settings_agent",
                  capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="settings")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        return (await agent.run("Give me those settings")).output

    assert run_twice(wf, world, "run_settings") == \
        "{'max_tokens': 123, 'custom_setting': 'custom_value'}"


def test_multiple_agents_in_one_workflow(world: Any) -> None:
    """test_multiple_agents"""
    first = Agent(FunctionModel(echo), name="first_agent", capabilities=[LittleWorkflowDurability()])
    second = Agent(TestModel(custom_output_text="second"), name="second_agent",
                   capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="multiple")
    async def wf(ctx: lw.RunContext, input: Any) -> list[str]:
        return [(await first.run("one")).output, (await second.run("two")).output]

    assert run_twice(wf, world, "run_multiple") == ["Echo: one", "second"]
    assert units(world, "run_multiple") == [f"{STEP_PREFIX}/first_agent-1/1/model",
                                            f"{STEP_PREFIX}/second_agent-1/1/model"]


def test_an_explicit_run_id_is_kept(world: Any) -> None:
    """test_dbos_agent_explicit_run_id"""
    agent = Agent(TestModel(custom_output_text="ok"), name="run_id_agent",
                  capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="explicit-run-id")
    async def wf(ctx: lw.RunContext, input: Any) -> list[Any]:
        result = await agent.run("Hello", run_id="run-from-lw")
        return [result.run_id, sorted({m.run_id for m in result.all_messages()})]

    assert run_twice(wf, world, "run_explicit") == ["run-from-lw", ["run-from-lw"]]
    assert units(world, "run_explicit") == [f"{STEP_PREFIX}/run-from-lw/1/model"]


# ---- tools --------------------------------------------------------------------------


def test_a_tool_asking_for_a_retry(world: Any) -> None:
    """test_dbos_agent_with_model_retry, test_temporal_agent_with_model_retry"""
    attempts: list[str] = []

    def model_fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # A tool's ModelRetry comes back as a tool return marked as a retry.
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns and not returns[-1].retry:
            return ModelResponse(parts=[TextPart(f"The weather in Mexico City is {returns[-1].content}.")])
        retried = len(returns)
        city = "Mexico City" if retried else "CDMX"
        return ModelResponse(parts=[ToolCallPart("get_weather_in_city", {"city": city},
                                                 tool_call_id=f"w{retried}")])

    agent = Agent(FunctionModel(model_fn), name="model_retry_agent",
                  capabilities=[LittleWorkflowDurability()])

    @agent.tool_plain
    def get_weather_in_city(city: str) -> str:
        attempts.append(city)
        if city != "Mexico City":
            raise ModelRetry("Did you mean Mexico City?")
        return "sunny"

    @lw.workflow(id="model-retry")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        return (await agent.run("What is the weather in CDMX?")).output

    assert run_twice(wf, world, "run_model_retry") == "The weather in Mexico City is sunny."
    assert attempts == ["CDMX", "Mexico City"]


def test_a_failed_tool_is_reported_to_the_model(world: Any) -> None:
    """test_dbos_agent_with_tool_failed"""
    agent = Agent(TestModel(call_tools=["failing_tool"]), name="tool_failed_agent",
                  capabilities=[LittleWorkflowDurability()])

    @agent.tool_plain
    def failing_tool() -> str:
        raise ToolFailed("Disk full")

    @lw.workflow(id="tool-failed")
    async def wf(ctx: lw.RunContext, input: Any) -> list[list[str]]:
        result = await agent.run("Call the failing tool")
        return [[p.tool_name, str(p.content), str(p.outcome)] for m in result.all_messages()
                for p in m.parts if isinstance(p, ToolReturnPart)]

    assert run_twice(wf, world, "run_tool_failed") == [["failing_tool", "Disk full", "failed"]]


def test_a_sequential_tool(world: Any) -> None:
    """test_complex_agent_run_sequential_tool (the sequential tool; FunctionModel, no MCP)"""
    order: list[str] = []

    def model_fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(", ".join(str(p.content) for p in returns))])
        return ModelResponse(parts=[ToolCallPart("capital", {"country": "Mexico"}, tool_call_id="c1"),
                                    ToolCallPart("weather", {"city": "Mexico City"}, tool_call_id="c2")])

    agent = Agent(FunctionModel(model_fn), name="seq_agent", capabilities=[LittleWorkflowDurability()])

    @agent.tool_plain(sequential=True)
    def capital(country: str) -> str:
        order.append("capital")
        return "Mexico City"

    @agent.tool_plain
    def weather(city: str) -> str:
        order.append("weather")
        return "Sunny"

    @lw.workflow(id="sequential")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        return (await agent.run("capital and weather")).output

    assert run_twice(wf, world, "run_sequential") == "Mexico City, Sunny"
    assert sorted(order) == ["capital", "weather"]


def runtime_tool() -> str:
    return "tool-result"


def call_then_answer(tool: str) -> FunctionModel:
    def model_fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"done: {returns[-1].content}")])
        return ModelResponse(parts=[ToolCallPart(tool, {}, tool_call_id="call-1")])
    return FunctionModel(model_fn)


def test_a_runtime_function_toolset_runs_inline(world: Any) -> None:
    """test_dbos_durability_allows_runtime_function_toolset,
    test_dbos_agent_run_in_workflow_with_runtime_function_toolset (as DBOS: inline; Temporal
    refuses it, test_temporal_agent_run_in_workflow_with_executing_toolsets)"""
    agent = Agent(call_then_answer("runtime_tool"), name="runtime_fn",
                  capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="runtime-fn")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        toolset = FunctionToolset(tools=[runtime_tool], id="runtime_fn")
        return (await agent.run("Call the runtime tool.", toolsets=[toolset])).output

    assert run_twice(wf, world, "run_runtime_fn") == "done: tool-result"
    assert units(world, "run_runtime_fn") == [f"{STEP_PREFIX}/runtime_fn-1/1/model",
                                              f"{STEP_PREFIX}/runtime_fn-1/2/model"]


def test_a_runtime_external_toolset_defers_its_calls(world: Any) -> None:
    """test_dbos_agent_run_in_workflow_with_runtime_external_toolset,
    test_temporal_agent_run_in_workflow_with_runtime_external_toolset"""
    def request_external(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("external", {"query": "runtime"}, tool_call_id="call-1")])

    agent = Agent(FunctionModel(request_external), name="runtime_external",
                  output_type=[str, DeferredToolRequests], capabilities=[LittleWorkflowDurability()])
    external = ExternalToolset(tool_defs=[ToolDefinition(
        name="external", parameters_json_schema={
            "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]})],
        id="external")

    @lw.workflow(id="runtime-external")
    async def wf(ctx: lw.RunContext, input: Any) -> list[Any]:
        result = await agent.run("Call the runtime external tool.", toolsets=[external])
        assert isinstance(result.output, DeferredToolRequests)
        return [[c.tool_name, c.args_as_dict(), c.tool_call_id] for c in result.output.calls]

    assert run_twice(wf, world, "run_runtime_external") == [["external", {"query": "runtime"}, "call-1"]]


def test_a_runtime_dynamic_toolset_and_a_per_run_capability_toolset_are_refused(world: Any) -> None:
    """test_dbos_durability_rejects_runtime_dynamic_toolset_sync,
    test_dbos_durability_rejects_per_run_capability_toolset"""
    agent = Agent(FunctionModel(echo), name="runtime_dynamic",
                  capabilities=[LittleWorkflowDurability()])

    def factory(ctx: AgentContext[Any]) -> FunctionToolset:
        return FunctionToolset()

    @lw.workflow(id="runtime-dynamic")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        toolset = DynamicToolset(factory, id="runtime_dynamic")
        if input["how"] == "toolsets":
            return (await agent.run("Hello", toolsets=[toolset])).output
        return (await agent.run("Hello", capabilities=[Toolset(toolset)])).output

    for how in ("toolsets", "capability"):
        with pytest.raises(lw.WorkflowFailedError) as info:
            lw.run_workflow(wf, {"how": how}, world=world, run_id=f"run_dyn_{how}")
        assert isinstance(info.value.__cause__, UserError)
        assert "DynamicToolset 'runtime_dynamic' cannot be added at runtime with little-workflow" \
            in str(info.value.__cause__)


def test_override_tools_in_a_workflow_is_refused(world: Any) -> None:
    """test_dbos_agent_override_tools_in_workflow: DBOS runs overriding tools inline; here,
    as on Temporal, the agent's own function toolset is a registered step source, and an
    override replacing it under the same id is a UserError naming it"""
    agent = Agent(TestModel(), name="override_tools", capabilities=[LittleWorkflowDurability()])

    def extra() -> str:
        return "extra"

    @lw.workflow(id="override-tools")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        with agent.override(tools=[extra]):
            return (await agent.run("hi")).output

    with pytest.raises(lw.WorkflowFailedError) as info:
        lw.run_workflow(wf, {}, world=world, run_id="run_override_tools")
    assert isinstance(info.value.__cause__, UserError)
    assert "same `id`" in str(info.value.__cause__)


def test_override_deps_in_a_workflow(world: Any) -> None:
    """test_dbos_agent_override_deps_in_workflow"""
    agent = Agent(TestModel(), name="override_deps", deps_type=str,
                  capabilities=[LittleWorkflowDurability()])

    @agent.tool
    def whose(ctx: AgentContext[str]) -> str:
        return ctx.deps

    @lw.workflow(id="override-deps")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        with agent.override(deps="overridden"):
            return (await agent.run("whose?", deps="given")).output

    assert run_twice(wf, world, "run_override_deps") == '{"whose":"overridden"}'


@dataclass
class UnpicklableDeps:
    lock: Any


def test_deps_that_cannot_be_serialised(world: Any) -> None:
    """test_dbos_agent_with_unserializable_deps_type: DBOS pickles deps into its workflow
    and fails; units run in the workflow's own process here, so deps are used as they are"""
    import threading

    agent = Agent(TestModel(), name="unserializable_deps", deps_type=UnpicklableDeps,
                  capabilities=[LittleWorkflowDurability()])

    @agent.tool
    def locked(ctx: AgentContext[UnpicklableDeps]) -> bool:
        return not ctx.deps.lock.locked()

    @lw.workflow(id="deps")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        return (await agent.run("lock?", deps=UnpicklableDeps(threading.Lock()))).output

    assert run_twice(wf, world, "run_deps") == '{"locked":true}'


@dataclass
class ToggleableDeps:
    active: Literal["weather", "datetime"]

    def toggle(self) -> None:
        self.active = "datetime" if self.active == "weather" else "weather"


def test_a_dynamic_toolset_follows_the_deps(world: Any) -> None:
    """test_dynamic_toolset (DBOS), test_dynamic_toolset_in_workflow (Temporal)"""
    weather = FunctionToolset()

    @weather.tool_plain
    def temperature_celsius(city: str) -> float:
        return 21.0

    @weather.tool_plain
    def temperature_fahrenheit(city: str) -> float:
        return 69.8

    datetime_toolset = FunctionToolset()

    @datetime_toolset.tool_plain
    def now() -> str:
        return "2026-01-01T00:00:00Z"

    def toggleable(ctx: AgentContext[ToggleableDeps]) -> FunctionToolset:
        return weather if ctx.deps.active == "weather" else datetime_toolset

    def toggle(ctx: AgentContext[ToggleableDeps]) -> None:
        ctx.deps.toggle()

    # Given to the agent when it is built: a toolset added afterwards (`@agent.toolset`) is
    # a run-time toolset, which a durable run refuses for dynamic ones.
    agent = Agent(TestModel(), name="dynamic_agent", deps_type=ToggleableDeps,
                  tools=[toggle], toolsets=[DynamicToolset(toggleable, id="toggleable")],
                  capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="dynamic")
    async def wf(ctx: lw.RunContext, input: Any) -> list[str]:
        deps = ToggleableDeps("weather")
        first = await agent.run("Toggle the toolset", deps=deps)
        second = await agent.run("Toggle the toolset", deps=deps)
        return [first.output, second.output]

    assert run_twice(wf, world, "run_dynamic") == [
        '{"toggle":null,"temperature_celsius":21.0,"temperature_fahrenheit":69.8}',
        '{"toggle":null,"now":"2026-01-01T00:00:00Z"}']
    assert any("/tools.toggleable" in p for p in units(world, "run_dynamic"))


def test_a_dynamic_capability_tool_runs_in_a_step(world: Any) -> None:
    """test_dbos_durability_dynamic_capability_tool_runs_in_step"""
    calls: list[str] = []

    def dynamic_tool() -> str:
        calls.append("called")
        return "dynamic result"

    def factory(ctx: AgentContext[Any]) -> Capability[Any]:
        return Capability(tools=[dynamic_tool])

    agent = Agent(TestModel(), name="dynamic_capability",
                  capabilities=[DynamicCapability(factory, id="dyn"), LittleWorkflowDurability()])

    @lw.workflow(id="dynamic-capability")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        return (await agent.run("Call the tool")).output

    assert run_twice(wf, world, "run_dyn_cap") == '{"dynamic_tool":"dynamic result"}'
    assert calls == ["called"]
    paths = units(world, "run_dyn_cap")
    assert f"{STEP_PREFIX}/dynamic_capability-1/1/tools.dyn" in paths
    assert any(p.startswith(f"{STEP_PREFIX}/dynamic_capability-1/1/dynamic_tool/") for p in paths)


def test_human_in_the_loop_tools(world: Any) -> None:
    """test_dbos_agent_with_hitl_tool, test_temporal_agent_with_hitl_tool: a tool that
    needs approval and one whose result comes from outside (CallDeferred); the workflow
    loops until the agent answers, waiting durably for each decision"""
    done: list[str] = []

    def model_fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(
                "; ".join(f"{p.tool_name}: {p.content}" for p in returns))])
        return ModelResponse(parts=[ToolCallPart("delete_file", {"path": ".env"}, tool_call_id="d1"),
                                    ToolCallPart("create_file", {"path": "test.txt"}, tool_call_id="c1")])

    agent = Agent(FunctionModel(model_fn), name="hitl_agent", output_type=[str, DeferredToolRequests],
                  capabilities=[LittleWorkflowDurability()])

    @agent.tool
    def create_file(ctx: AgentContext[None], path: str) -> None:
        raise CallDeferred

    @agent.tool
    def delete_file(ctx: AgentContext[None], path: str) -> bool:
        if not ctx.tool_call_approved:
            raise ApprovalRequired
        done.append(path)
        return True

    @lw.workflow(id="hitl")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        messages: list[ModelMessage] = [ModelRequest.user_text_prompt(input["prompt"])]
        results: DeferredToolResults | None = None
        turn = 0
        while True:
            result = await agent.run(message_history=messages, deferred_tool_results=results)
            messages = result.all_messages()
            if not isinstance(result.output, DeferredToolRequests):
                return result.output
            turn += 1
            results = await wait_for_approvals(ctx, f"approve-{turn}", result.output) \
                or DeferredToolResults()
            outside = await ctx.wait_for_event(f"calls-{turn}", "deferred-results")
            results.calls.update(outside or {})

    prompt = {"prompt": "Delete the file `.env` and create `test.txt`"}
    first = lw.run_workflow(wf, prompt, world=world, run_id="run_hitl", suspend=True)
    assert first.status == "waiting"
    assert [(p.tool_call_id, p.tool_name, p.args) for p in lw.pending_approvals(world)] == [
        ("d1", "delete_file", {"path": ".env"})]
    lw.approve_tool_call(world, "run_hitl", "d1")
    assert lw.run_workflow(wf, prompt, world=world, run_id="run_hitl", suspend=True).status == "waiting"
    lw.send_event(world, "run_hitl", "deferred-results", {"c1": "Success"})
    done_run = lw.run_workflow(wf, prompt, world=world, run_id="run_hitl", suspend=True)
    assert done_run.status == "completed"
    assert done_run.output == "delete_file: True; create_file: Success" and done == [".env"]
    assert lw.replay_run(world, "run_hitl", wf).output == done_run.output and done == [".env"]


# ---- streams and events ---------------------------------------------------------------


async def echo_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    for message in reversed(messages):
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                yield f"Echo: {part.content}"
                return
    yield "no prompt"


def in_a_step() -> bool:
    try:
        lw.current_step()
    except lw.NotInStepError:
        return False
    return True


def test_process_event_stream_gets_the_model_events_in_workflow_code(world: Any) -> None:
    """test_dbos_durability_streaming_in_workflow"""
    seen: list[tuple[str, bool]] = []

    async def handler(ctx: AgentContext[object], stream: AsyncIterable[AgentStreamEvent]) -> None:
        async for event in stream:
            seen.append((type(event).__name__, in_a_step()))

    agent = Agent(FunctionModel(echo, stream_function=echo_stream), name="durability_streaming",
                  capabilities=[ProcessEventStream(handler), LittleWorkflowDurability()])

    @lw.workflow(id="streaming")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        return (await agent.run("Hello streaming")).output

    assert run_twice(wf, world, "run_streaming") == "Echo: Hello streaming"
    model_events = [in_step for name, in_step in seen if name in ("PartStartEvent", "PartDeltaEvent")]
    assert model_events and not any(model_events)
    assert units(world, "run_streaming") == [f"{STEP_PREFIX}/durability_streaming-1/1/model.stream"]


def test_run_stream_and_run_stream_events_in_a_workflow(world: Any) -> None:
    """test_dbos_durability_buffers_caller_streams, test_dbos_agent_run_stream_in_workflow,
    test_dbos_agent_run_stream_events_in_workflow — with their chunk-by-chunk deltas, as
    outside a workflow (Pydantic AI 2.68 records a streamed request as its final response,
    which DBOSDurability streams back as one part, `['hello world']`; the step here keeps
    the events the model streamed: ext/pydantic_ai_streams.py)"""
    agent = Agent(TestModel(custom_output_text="hello world"), name="durability_buffered",
                  capabilities=[LittleWorkflowDurability()])

    async def streamed() -> list[Any]:
        async with agent.run_stream("Hello") as stream:
            chunks = [chunk async for chunk in stream.stream_text(debounce_by=None)]
            output = await stream.get_output()
        async with agent.run_stream_events("Hello") as event_stream:
            kinds = [type(event).__name__ async for event in event_stream]
        return [chunks, output, kinds]

    outside = asyncio.run(streamed())
    assert outside[0] == ["hello ", "hello world"] and outside[2].count("PartDeltaEvent") == 2

    @lw.workflow(id="buffered")
    async def wf(ctx: lw.RunContext, input: Any) -> list[Any]:
        return await streamed()

    assert run_twice(wf, world, "run_buffered") == outside
    assert units(world, "run_buffered") == [f"{STEP_PREFIX}/durability_buffered-1/1/model.stream",
                                            f"{STEP_PREFIX}/durability_buffered-2/1/model.stream"]


def test_iter_in_a_workflow(world: Any) -> None:
    """test_dbos_agent_iter_in_workflow"""
    agent = Agent(TestModel(custom_output_text="iterated"), name="durability_iter",
                  capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="iter")
    async def wf(ctx: lw.RunContext, input: Any) -> list[Any]:
        nodes = []
        async with agent.iter("Hello") as run:
            async for node in run:
                nodes.append(type(node).__name__)
        assert run.result is not None
        return [run.result.output, nodes]

    output, nodes = run_twice(wf, world, "run_iter")
    assert output == "iterated" and "ModelRequestNode" in nodes and nodes[-1] == "End"


def test_an_event_stream_handler_runs_in_steps(world: Any) -> None:
    """test_dbos_durability_event_stream_handler, test_dbos_agent_run_in_workflow_with_event_stream_handler"""
    seen: list[tuple[AgentStreamEvent, bool]] = []

    async def handler(ctx: AgentContext[object], stream: AsyncIterable[AgentStreamEvent]) -> None:
        async for event in stream:
            seen.append((event, in_a_step()))

    async def handled_tool() -> str:
        return "handled"

    agent = Agent(TestModel(), name="durability_handler", tools=[handled_tool],
                  capabilities=[LittleWorkflowDurability(event_stream_handler=handler)])

    @lw.workflow(id="handler")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        return (await agent.run("Hello")).output

    lw.run_workflow(wf, {}, world=world, run_id="run_handler")
    events = [event for event, _ in seen]
    assert seen and all(in_step for _, in_step in seen)
    assert sum(isinstance(e, FunctionToolCallEvent) for e in events) == 1
    assert sum(isinstance(e, FunctionToolResultEvent) for e in events) == 1
    assert any(isinstance(e, PartStartEvent) for e in events)
    assert any(isinstance(e, FinalResultEvent) for e in events)
    assert any(p.endswith(".event") for p in units(world, "run_handler"))
    handled = len(seen)
    assert lw.replay_run(world, "run_handler", wf).output == \
        lw.materialize_run_state(world, "run_handler").output
    assert len(seen) == handled  # served from the log: the handler is not called again


def test_an_event_stream_handler_outside_a_workflow() -> None:
    """test_dbos_durability_event_stream_handler_outside_workflow"""
    events: list[AgentStreamEvent] = []

    async def handler(ctx: AgentContext[object], stream: AsyncIterable[AgentStreamEvent]) -> None:
        async for event in stream:
            events.append(event)

    agent = Agent(TestModel(custom_output_text="done"), name="outside_handler",
                  capabilities=[LittleWorkflowDurability(event_stream_handler=handler)])
    agent.run_sync("Hello")
    assert any(isinstance(e, PartStartEvent) for e in events)


# ---- continuation chains (a model that suspends its turn) ------------------------------


def test_a_continuation_chain_takes_one_step_per_segment(world: Any) -> None:
    """test_dbos_durability_continuation_chain_in_workflow"""
    model = ScriptedContinuationModel(responses=[
        scripted_response(texts=["The answer "], state="suspended", provider_response_id="cont1",
                          input_tokens=5, output_tokens=2),
        scripted_response(texts=["is 42."], provider_response_id="cont2", input_tokens=3,
                          output_tokens=4)])
    agent = Agent(model, name="durability_continuation", capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="continuation")
    async def wf(ctx: lw.RunContext, input: Any) -> list[Any]:
        result = await agent.run("go")
        response = result.all_messages()[-1]
        assert isinstance(response, ModelResponse)
        return [result.output, response.state,
                [p.content for p in response.parts if isinstance(p, TextPart)],
                [result.usage.requests, result.usage.input_tokens, result.usage.output_tokens]]

    assert run_twice(wf, world, "run_cont") == [
        "The answer is 42.", "complete", ["The answer ", "is 42."], [1, 8, 6]]
    assert model.request_calls == 2
    assert units(world, "run_cont") == [f"{STEP_PREFIX}/durability_continuation-1/1/model",
                                        f"{STEP_PREFIX}/durability_continuation-1/1/model-2"]


def test_a_usage_limit_between_segments_cancels_the_suspended_job_in_a_step(world: Any) -> None:
    """test_dbos_durability_continuation_usage_limit_cancels_suspended"""
    model = ScriptedContinuationModel(responses=[
        scripted_response(texts=["still going "], state="suspended", provider_response_id="cont1",
                          input_tokens=10, output_tokens=5),
        scripted_response(texts=["keeps going "], state="suspended", provider_response_id="cont2",
                          input_tokens=100, output_tokens=50)])
    agent = Agent(model, name="durability_usage_limit", capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="usage-limit")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        try:
            await agent.run("go", usage_limits=UsageLimits(total_tokens_limit=20))
        except UsageLimitExceeded as e:
            return f"limit: {e}"
        return "no limit"

    output = run_twice(wf, world, "run_limit")
    assert output.startswith("limit:") and "total_tokens_limit" in output
    assert model.request_calls == 2
    assert [c.provider_response_id for c in model.cancelled] == ["cont2"]
    assert f"{STEP_PREFIX}/durability_usage_limit-1/1/model.cancel" in units(world, "run_limit")


def test_a_streamed_continuation_chain(world: Any) -> None:
    """test_dbos_durability_streaming_continuation_chain_in_workflow (part indices, not deltas)"""
    model = ScriptedContinuationModel(segments=[
        StreamSegment(texts=["The answer "], state="suspended", provider_response_id="cont1",
                      input_tokens=5, output_tokens=2),
        StreamSegment(texts=["is 42."], state="complete", provider_response_id="cont2",
                      input_tokens=3, output_tokens=4)])
    received: list[AgentStreamEvent] = []

    async def handler(ctx: AgentContext[object], stream: AsyncIterable[AgentStreamEvent]) -> None:
        async for event in stream:
            received.append(event)

    agent = Agent(model, name="durability_cont_stream",
                  capabilities=[ProcessEventStream(handler), LittleWorkflowDurability()])

    @lw.workflow(id="cont-stream")
    async def wf(ctx: lw.RunContext, input: Any) -> list[Any]:
        result = await agent.run("go")
        return [result.output, [result.usage.requests, result.usage.input_tokens,
                                result.usage.output_tokens]]

    assert lw.run_workflow(wf, {}, world=world, run_id="run_cont_stream").output == [
        "The answer is 42.", [1, 8, 6]]
    # Both segments' parts reach the handler in workflow code (each as one part: the
    # peer's delta-by-delta indices need the deltas, which 2.68 does not record).
    assert sorted({e.index for e in received if isinstance(e, PartStartEvent)}) == [0, 1]
    assert model.request_stream_calls == 2
    assert units(world, "run_cont_stream") == [
        f"{STEP_PREFIX}/durability_cont_stream-1/1/model.stream",
        f"{STEP_PREFIX}/durability_cont_stream-1/1/model.stream-2"]
    assert lw.replay_run(world, "run_cont_stream", wf).output == ["The answer is 42.", [1, 8, 6]]
    assert model.request_stream_calls == 2


def test_a_continuation_resumed_from_history(world: Any) -> None:
    """test_dbos_durability_continuation_resume_from_history"""
    model = ScriptedContinuationModel(responses=[
        scripted_response(texts=["is 42."], provider_response_id="cont2", input_tokens=3,
                          output_tokens=4)])
    agent = Agent(model, name="durability_cont_resume", capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="cont-resume")
    async def wf(ctx: lw.RunContext, input: Any) -> list[Any]:
        history: list[ModelMessage] = [
            ModelRequest(parts=[UserPromptPart(content="go")]),
            scripted_response(texts=["The answer "], state="suspended", provider_response_id="cont1",
                              input_tokens=5, output_tokens=2)]
        result = await agent.run(message_history=history)
        response = result.all_messages()[-1]
        assert isinstance(response, ModelResponse)
        return [result.output, response.state, result.usage.requests]

    assert run_twice(wf, world, "run_cont_resume") == ["The answer is 42.", "complete", 1]
    assert model.request_calls == 1


def test_tool_metadata_opts_a_tool_out_of_its_step(world: Any) -> None:
    """test_durability_tool_metadata_disables_activity (Temporal's `{'temporal': False}`)"""
    seen: list[bool] = []

    def slow_tool() -> str:
        seen.append(in_a_step())
        return "slow"

    agent = Agent(call_then_answer("slow_tool"), name="meta_disable",
                  tools=[Tool(slow_tool, metadata={"little_workflow": False})],
                  capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="meta-disable")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        return (await agent.run("go")).output

    assert lw.run_workflow(wf, {}, world=world, run_id="run_meta").output == "done: slow"
    assert seen == [False]
    assert units(world, "run_meta") == [f"{STEP_PREFIX}/meta_disable-1/1/model",
                                        f"{STEP_PREFIX}/meta_disable-1/2/model"]


async def cancels(ctx: AgentContext[object]) -> str:
    ctx.cancel()
    # cancel() returns; the cancellation lands at the next await point.
    return "completed before the cancellation took effect"


def test_a_cancel_inside_a_tool_step_is_refused(world: Any) -> None:
    """test_dbos_step_wrapped_tool_rejects_cancel_in_workflow: a step's recorded result is
    served on recovery without running the tool, so a cancel made inside it would not
    happen again; here function tools are steps too (DBOS runs them inline), so both a
    function tool and a dynamic toolset's tool are refused. Outside a workflow it cancels."""
    for label, where in (("function", {"tools": [cancels]}),
                         ("dynamic", {"toolsets": [DynamicToolset(
                             lambda ctx: FunctionToolset([cancels]), id="cancel_dynamic")]})):
        agent = Agent(TestModel(), deps_type=object, name=f"cancel_{label}",
                      capabilities=[LittleWorkflowDurability()], **where)

        @lw.workflow(id=f"cancel-{label}")
        async def wf(ctx: lw.RunContext, input: Any, agent: Any = agent) -> str:
            return (await agent.run("run")).output

        with pytest.raises(lw.WorkflowFailedError) as info:
            lw.run_workflow(wf, {}, world=world, run_id=f"run_cancel_{label}")
        assert isinstance(info.value.__cause__, UserError)
        assert "cancellation would silently not happen again" in str(info.value.__cause__)
        with pytest.raises(RunCancelled):
            agent.run_sync("run")


def test_a_cancel_inside_an_inline_tool_cancels_the_agent_run(world: Any) -> None:
    """test_dbos_plain_tool_cancel_works_in_workflow: a tool run inline in the workflow body
    (here `metadata={"little_workflow": False}`, as DBOS runs plain function tools) may
    cancel: the body runs again on recovery, so does the cancel."""
    agent = Agent(TestModel(), deps_type=object, name="cancel_plain",
                  tools=[Tool(cancels, metadata={"little_workflow": False})],
                  capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="cancel-plain")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        return (await agent.run("run")).output

    with pytest.raises(lw.WorkflowFailedError) as info:
        lw.run_workflow(wf, {}, world=world, run_id="run_cancel_plain")
    assert isinstance(info.value.__cause__, RunCancelled)
    assert lw.materialize_run_state(world, "run_cancel_plain").status == "failed"


def test_overriding_the_model_in_a_workflow_is_refused(world: Any) -> None:
    """test_dbos_agent_override_model_in_workflow: a model instance set by `override` inside
    a workflow cannot be rebuilt from the log; a UserError names it, before any step."""
    agent = Agent(TestModel(), name="override_model", capabilities=[LittleWorkflowDurability()])

    @lw.workflow(id="override-model")
    async def wf(ctx: lw.RunContext, input: Any) -> str:
        with agent.override(model=FunctionModel(echo)):
            return (await agent.run("hi")).output

    with pytest.raises(lw.WorkflowFailedError) as info:
        lw.run_workflow(wf, {}, world=world, run_id="run_override_model")
    assert isinstance(info.value.__cause__, UserError)
    assert "was not registered with `LittleWorkflowDurability`" in str(info.value.__cause__)
    assert units(world, "run_override_model") == []
