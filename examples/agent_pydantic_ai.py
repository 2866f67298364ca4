"""A tool-using Pydantic AI agent made durable by LittleWorkflowDurability: the process is
SIGKILLed in the middle of the agent run, started again with the same run id, and the
agent carries on without calling any committed model request or tool call again.

Offline: the model is a FunctionModel, a scripted stand-in for an LLM. Needs the
`pydantic-ai` extra. Run: python examples/agent_pydantic_ai.py [DATA_DIR]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import little_workflow as lw
from little_workflow.ext.pydantic_ai import LittleWorkflowDurability

LEDGER = os.environ.get("AGENT_LEDGER", os.devnull)


def record(call: str) -> int:
    """Note a call in the ledger; how many times it has been made so far."""
    with open(LEDGER, "a") as f:
        f.write(call + "\n")
    with open(LEDGER) as f:
        return sum(1 for line in f if line.strip() == call)


def support_model(messages: list, info: AgentInfo) -> ModelResponse:
    """Look the order up, then check stock, then answer (what an LLM would decide)."""
    done = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    record(f"model request {len(done) + 1}")
    if not done:
        return ModelResponse(parts=[ToolCallPart("lookup_order", {"order_id": "A-17"}, tool_call_id="t1")])
    if len(done) == 1:
        return ModelResponse(parts=[ToolCallPart("check_stock", {"sku": "kettle"}, tool_call_id="t2")])
    return ModelResponse(parts=[TextPart(f"Your {done[0].content}; {done[1].content}.")])


agent = Agent(FunctionModel(support_model), name="support", capabilities=[LittleWorkflowDurability()])


@agent.tool_plain
def lookup_order(order_id: str) -> str:
    record("tool lookup_order")
    return f"order {order_id} is a kettle"


@agent.tool_plain
def check_stock(sku: str) -> str:
    if record("tool check_stock") == 1 and os.environ.get("KILL_IN_TOOL"):
        os.kill(os.getpid(), signal.SIGKILL)  # the crash: mid tool call
    return f"{sku}s are back in stock on Friday"


@lw.workflow(id="support")
async def support(ctx: lw.RunContext, input: dict) -> dict:
    result = await agent.run(input["question"])
    return {"answer": result.output, "modelRequests": result.usage.requests}


def run_in_child(data_dir: str, kill: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "AGENT_LEDGER": LEDGER_PATH, "KILL_IN_TOOL": "1" if kill else ""}
    return subprocess.run([sys.executable, __file__, "--child", data_dir], env=env,
                          capture_output=True, text=True)


def main(data_dir: str) -> None:
    killed = run_in_child(data_dir, kill=True)
    print("first process:", "killed by SIGKILL" if killed.returncode == -signal.SIGKILL
          else f"exit {killed.returncode}")
    with open(LEDGER_PATH) as f:
        before = [line.strip() for line in f]
    print("calls before the crash:", before)
    resumed = run_in_child(data_dir, kill=False)
    print(resumed.stdout.strip())
    with open(LEDGER_PATH) as f:
        after = [line.strip() for line in f][len(before):]
    print("calls after resuming:", after)
    again = sorted(set(before) & set(after) - {"tool check_stock"})
    print("committed calls made again:", ", ".join(again) if again else "none")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        with lw.local_world(sys.argv[2]) as world:
            res = lw.run_workflow(support, {"question": "Where is my kettle?"}, world=world,
                                  run_id="run_support_1")
            print(res.status, res.output)
    else:
        data = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="agent-")
        LEDGER_PATH = os.path.join(data, "calls.log")
        os.makedirs(data, exist_ok=True)
        open(LEDGER_PATH, "w").close()
        main(os.path.join(data, "world"))
