"""An agent whose tool needs approval, in a workflow that waits for it in-process
(no suspend), run by a child process (tests/test_ext_pydantic_ai.py).

python pydantic_ai_approval_child.py DATA_DIR LEDGER RUN_ID
"""

from __future__ import annotations

import json
import sys

from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import little_workflow as lw
from little_workflow.ext.pydantic_ai import LittleWorkflowDurability, wait_for_approvals

DATA, LEDGER, RUN_ID = sys.argv[1:4]


def note(line: str) -> None:
    with open(LEDGER, "a") as f:
        f.write(line + "\n")


def model_fn(messages: list, info: AgentInfo) -> ModelResponse:
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    note(f"model{len(returns) + 1}")
    if returns:
        return ModelResponse(parts=[TextPart(f"done: {returns[-1].content}")])
    return ModelResponse(parts=[ToolCallPart("refund", {"order": "A-17"}, tool_call_id="r1")])


agent = Agent(FunctionModel(model_fn), name="refunds", output_type=[str, DeferredToolRequests],
              capabilities=[LittleWorkflowDurability()])


@agent.tool_plain(requires_approval=True)
def refund(order: str) -> str:
    note("refund")
    return f"refunded {order}"


@lw.workflow(id="refunds")
async def refunds(ctx: lw.RunContext, input: dict) -> dict:
    result = await agent.run("refund A-17")
    decisions = await wait_for_approvals(ctx, "approve", result.output)
    result = await agent.run(message_history=result.all_messages(), deferred_tool_results=decisions)
    return {"output": result.output, "requests": result.usage.requests}


if __name__ == "__main__":
    with lw.local_world(DATA) as world:
        print(json.dumps(lw.run_workflow(refunds, {}, world=world, run_id=RUN_ID).output))
