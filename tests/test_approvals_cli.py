"""`little approvals` lists the tool calls runs wait for a person to approve; `little approve
RUN CALL_ID [--deny]` answers one. Driven as a user would: runs suspended in this process on
a local_world, the commands in a subprocess on the same data dir, the run resumed here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest
from checkout import SRC

import little_workflow as lw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CALLS = [{"toolCallId": "d1", "toolName": "delete_file", "args": {"name": "a.txt"}},
         {"toolCallId": "r1", "toolName": "refund", "args": {"order": "A-17", "amount": 20}}]


@lw.workflow(id="asks")
async def asks(ctx: lw.RunContext, input: Any) -> Any:
    return await ctx.wait_for_event("approve", "approval",
                                    request={"kind": "tool-approval", "calls": CALLS})


def little(*args: str, cwd: Any) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "little_workflow.cli", *args], cwd=str(cwd),
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": SRC})


def one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    assert r.returncode not in (0, None), r.stdout
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def data_dir(tmp_path: Any) -> str:
    return str(tmp_path / "lw")


def suspend(data_dir: str, wf: Any, run_id: str) -> str:
    world = lw.local_world(data_dir)
    try:
        return lw.run_workflow(wf, {}, world=world, run_id=run_id, suspend=True).status
    finally:
        world.close()


def test_approvals_lists_each_waiting_call_with_its_tool_arguments_and_call_id(
        data_dir: str, tmp_path: Any) -> None:
    one_line_error(little("approvals", "--data-dir", data_dir, cwd=tmp_path), "no data dir")
    lw.local_world(data_dir).close()
    r = little("approvals", "--data-dir", data_dir, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "no tool calls wait for approval" in r.stdout
    assert suspend(data_dir, asks, "run_ask1") == "waiting"

    r = little("approvals", "--data-dir", data_dir, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["run", "id", "workflow", "tool", "call", "id", "arguments",
                                "asked", "at", "(UTC)"]
    d1 = next(line for line in lines if " d1 " in line)
    assert d1.split()[:4] == ["run_ask1", "asks", "delete_file", "d1"]
    assert '{"name": "a.txt"}' in d1
    r1 = next(line for line in lines if " r1 " in line)
    assert '"order": "A-17"' in r1 and '"amount": 20' in r1  # the log stores keys sorted
    assert "little approve RUN CALL_ID" in r.stdout

    r = little("approvals", "--data-dir", data_dir, "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(x["runId"], x["workflowId"], x["stepPath"], x["eventName"], x["toolCallId"],
             x["toolName"], x["args"]) for x in rows] == [
        ("run_ask1", "asks", "approve", "approval", "d1", "delete_file", {"name": "a.txt"}),
        ("run_ask1", "asks", "approve", "approval", "r1", "refund", {"order": "A-17", "amount": 20})]
    assert all(x["requestedAt"] for x in rows)

    r = little("approvals", "--data-dir", data_dir, "--run-id", "run_ask1", "--json", cwd=tmp_path)
    assert [x["toolCallId"] for x in json.loads(r.stdout)] == ["d1", "r1"]


def test_approve_and_deny_answer_one_call_each_and_the_run_takes_the_decisions(
        data_dir: str, tmp_path: Any) -> None:
    assert suspend(data_dir, asks, "run_ask2") == "waiting"
    r = little("approve", "run_ask2", "r1", "--data-dir", data_dir, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "approved" in r.stdout and "r1" in r.stdout and "run_ask2" in r.stdout
    r = little("approvals", "--data-dir", data_dir, "--json", cwd=tmp_path)
    assert [x["toolCallId"] for x in json.loads(r.stdout)] == ["d1"]

    r = little("approve", "run_ask2", "d1", "--deny", "--reason", "keep a.txt",
               "--data-dir", data_dir, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "denied" in r.stdout and "d1" in r.stdout
    r = little("approvals", "--data-dir", data_dir, cwd=tmp_path)
    assert "no tool calls wait for approval" in r.stdout

    world = lw.local_world(data_dir)
    try:
        done = lw.run_workflow(asks, {}, world=world, run_id="run_ask2")
        assert done.output == {"approvals": {"r1": True}}  # the wait takes the first answer
        events = [e.payload for e in world.list_events("run_ask2") if e.type == "signal.received"]
    finally:
        world.close()
    assert [p.get("payload") for p in events] == [{"approvals": {"r1": True}},
                                                  {"approvals": {"d1": "keep a.txt"}}]


def test_approve_mistakes_are_one_line_naming_the_run_and_the_call(
        data_dir: str, tmp_path: Any) -> None:
    assert suspend(data_dir, asks, "run_ask3") == "waiting"
    one_line_error(little("approve", "run_ask3", "nope", "--data-dir", data_dir, cwd=tmp_path),
                   "run_ask3", "'nope'", "d1")
    one_line_error(little("approve", "run_nobody", "d1", "--data-dir", data_dir, cwd=tmp_path),
                   "run_nobody")
    one_line_error(little("approve", "run_ask3", "d1", "--reason", "why",
                          "--data-dir", data_dir, cwd=tmp_path), "--reason", "--deny")
    one_line_error(little("approve", "not-a-run-id", "d1", "--data-dir", data_dir, cwd=tmp_path),
                   "not-a-run-id")
    assert little("approve", "run_ask3", "d1", "--data-dir", data_dir, cwd=tmp_path).returncode == 0
    one_line_error(little("approve", "run_ask3", "d1", "--data-dir", data_dir, cwd=tmp_path),
                   "run_ask3", "'d1'", "r1")
    one_line_error(little("approvals", "--run-id", "run_nobody", "--data-dir", data_dir,
                          cwd=tmp_path), "run_nobody")


def test_a_pydantic_ai_agent_waits_for_little_approve(data_dir: str, tmp_path: Any) -> None:
    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from little_workflow.ext.pydantic_ai import LittleWorkflowDurability, wait_for_approvals

    deleted: list[str] = []

    def model_fn(messages: list, info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if returns:
            return ModelResponse(parts=[TextPart(f"result: {returns[0].content}")])
        return ModelResponse(parts=[ToolCallPart("delete_file", {"name": "a.txt"},
                                                 tool_call_id="call-7")])

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

    assert suspend(data_dir, wf, "run_jan1") == "waiting"
    r = little("approvals", "--data-dir", data_dir, cwd=tmp_path)
    line = next(x for x in r.stdout.splitlines() if "call-7" in x)
    assert line.split()[:4] == ["run_jan1", "janitor", "delete_file", "call-7"]
    assert little("approve", "run_jan1", "call-7", "--data-dir", data_dir,
                  cwd=tmp_path).returncode == 0
    world = lw.local_world(data_dir)
    try:
        done = lw.run_workflow(wf, {}, world=world, run_id="run_jan1")
    finally:
        world.close()
    assert deleted == ["a.txt"] and done.output == {"output": "result: deleted a.txt"}
