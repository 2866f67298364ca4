"""A tool-using Pydantic AI agent in a workflow, run by a child process over a local_world
(tests/test_ext_pydantic_ai.py). FunctionModel only: no network.

python pydantic_ai_child.py DATA_DIR LEDGER RUN_ID KILL_AT
KILL_AT: none | replay | tool (SIGKILL inside tool call c1 while c2 is in flight too, after
the first model request committed) | model2 (inside the second model request, after both tools committed) |
parallel (inside tool call c2 once c1's step is committed). Every model request and
tool call appends a line to LEDGER; the run's output is printed as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import little_workflow as lw
from little_workflow.ext.pydantic_ai import LittleWorkflowDurability

DATA, LEDGER, RUN_ID, KILL_AT = sys.argv[1:5]


def note_count(line: str) -> int:
    with open(LEDGER) as f:
        return sum(1 for x in f if x.strip() == line)


def note(line: str) -> int:
    with open(LEDGER, "a") as f:
        f.write(line + "\n")
    with open(LEDGER) as f:
        return sum(1 for x in f if x.strip() == line)


def model_fn(messages: list, info: AgentInfo) -> ModelResponse:
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if returns:
        if note("model2") == 1 and KILL_AT == "model2":
            os.kill(os.getpid(), signal.SIGKILL)
        text = "; ".join(sorted(str(p.content) for p in returns))
        return ModelResponse(parts=[TextPart(f"forecast: {text}")])
    note("model1")
    return ModelResponse(parts=[ToolCallPart("weather", {"city": "Paris"}, tool_call_id="c1"),
                                ToolCallPart("weather", {"city": "Oslo"}, tool_call_id="c2")])


agent = Agent(FunctionModel(model_fn), name="forecaster", capabilities=[LittleWorkflowDurability()])


@agent.tool_plain
def weather(city: str) -> str:
    call = "c1" if city == "Paris" else "c2"
    first = note(f"tool-{call}") == 1
    if first and KILL_AT == "tool":
        # Both calls in flight, neither committed, whichever thread runs first: c2 waits
        # to be killed, c1 kills once c2 has started.
        if call == "c2":
            time.sleep(60)
        for _ in range(500):
            if note_count("tool-c2"):
                break
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)
    if first and KILL_AT == "parallel" and call == "c2":
        step = lw.current_step()
        for _ in range(500):  # until c1's result is committed
            done = [e for e in step.world.list_events(step.run_id) if e.type == "step.succeeded"
                    and e.payload["stepPath"].endswith("/c1")]
            if done:
                break
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)
    return f"sunny in {city}"


@lw.workflow(id="forecast")
async def forecast(ctx: lw.RunContext, input: dict) -> dict:
    result = await agent.run(input["question"])
    usage = result.usage
    return {"output": result.output, "runId": result.run_id,
            "usage": {"requests": usage.requests, "input": usage.input_tokens,
                      "output": usage.output_tokens}}


if __name__ == "__main__":
    with lw.local_world(DATA) as world:
        if KILL_AT == "replay":
            print(json.dumps(lw.replay_run(world, RUN_ID, forecast).output))
        else:
            res = lw.run_workflow(forecast, {"question": "weather?"}, world=world, run_id=RUN_ID)
            print(json.dumps(res.output))
