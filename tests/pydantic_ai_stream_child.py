"""An agent whose events go to the run stream "agent" (`LittleWorkflowDurability(stream=)`),
run to its end by a process of its own over a local_world (tests/test_ext_pydantic_ai_streams.py):

python pydantic_ai_stream_child.py DATA_DIR RUN_ID GATE

The agent asks for the weather of two cities (one model request, two tool calls), then
streams its answer in five chunks; after the first chunk it waits until the file GATE
exists (where the test kills the process). Prints the run's output as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

import little_workflow as lw
from little_workflow.ext.pydantic_ai import LittleWorkflowDurability

CHUNKS = ["sunny", " in", " Paris", " and", " Oslo"]


def answered(messages: list[Any]) -> bool:
    return any(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)


def model_fn(messages: list[Any], info: AgentInfo) -> ModelResponse:
    if answered(messages):
        return ModelResponse(parts=[TextPart("".join(CHUNKS))])
    return ModelResponse(parts=[ToolCallPart("weather", {"city": "Paris"}, tool_call_id="c1"),
                                ToolCallPart("weather", {"city": "Oslo"}, tool_call_id="c2")])


async def stream_fn(messages: list[Any], info: AgentInfo) -> Any:
    if answered(messages):
        for i, chunk in enumerate(CHUNKS):
            yield chunk
            while i == 0 and not os.path.exists(os.environ["LW_TEST_GATE"]):
                await asyncio.sleep(0.02)
        return
    for i, city in enumerate(["Paris", "Oslo"]):
        yield {i: DeltaToolCall(name="weather", json_args=json.dumps({"city": city}),
                                tool_call_id=f"c{i + 1}")}


agent = Agent(FunctionModel(model_fn, stream_function=stream_fn), name="gated",
              capabilities=[LittleWorkflowDurability(stream="agent")])


@agent.tool_plain
def weather(city: str) -> str:
    return f"sunny in {city}"


@lw.workflow(id="gated-agent")
async def gated(ctx: lw.RunContext, input: dict[str, Any]) -> dict[str, Any]:
    return {"output": (await agent.run(input["q"])).output}


if __name__ == "__main__":
    data, run_id, gate = sys.argv[1:4]
    os.environ["LW_TEST_GATE"] = gate
    with lw.local_world(data) as world:
        result = lw.run_workflow(gated, {"q": "weather?"}, world=world, run_id=run_id)
    print(json.dumps(result.output))
