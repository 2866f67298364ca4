"""Runs waiting for a person to approve tool calls: `lw.pending_approvals(world)` finds them
from the log alone (a wait whose `request` is a tool approval), `lw.approve_tool_call`
answers one call. No agent framework here: the Pydantic AI side is in
tests/test_ext_pydantic_ai.py."""

from __future__ import annotations

from typing import Any

import pytest

import little_workflow as lw

CALLS = [{"toolCallId": "d1", "toolName": "delete_file", "args": {"name": "a.txt"}},
         {"toolCallId": "d2", "toolName": "refund", "args": {"order": "A-17", "amount": 20}}]


@lw.workflow(id="asks")
async def asks(ctx: lw.RunContext, input: Any) -> Any:
    decision = await ctx.wait_for_event("approve", "approval",
                                        request={"kind": "tool-approval", "calls": CALLS})
    return decision


@lw.workflow(id="plain-wait")
async def plain_wait(ctx: lw.RunContext, input: Any) -> Any:
    return await ctx.wait_for_event("ok", "approval")


@pytest.fixture(params=["memory", "local_world"])
def world(request: Any, tmp_path: Any) -> Any:
    from conftest import private_memory

    if request.param == "memory":
        return lw.virtual_world(private_memory(), "/wf")
    return lw.local_world(str(tmp_path / "lw"))


def test_a_waiting_run_lists_each_call_it_asks_approval_for(world: Any) -> None:
    assert lw.pending_approvals(world) == []
    r = lw.run_workflow(asks, {}, world=world, run_id="run_ask1", suspend=True)
    assert r.status == "waiting"
    lw.run_workflow(plain_wait, {}, world=world, run_id="run_plain1", suspend=True)  # no request
    pending = lw.pending_approvals(world)
    assert [(p.run_id, p.workflow_id, p.step_path, p.event_name, p.tool_call_id, p.tool_name,
             p.args) for p in pending] == [
        ("run_ask1", "asks", "approve", "approval", "d1", "delete_file", {"name": "a.txt"}),
        ("run_ask1", "asks", "approve", "approval", "d2", "refund", {"order": "A-17", "amount": 20}),
    ]
    assert all(p.requested_at for p in pending)
    assert lw.pending_approvals(world, run_id="run_plain1") == []


def test_a_call_answered_is_no_longer_pending_even_before_the_run_resumes(world: Any) -> None:
    lw.run_workflow(asks, {}, world=world, run_id="run_ask2", suspend=True)
    lw.approve_tool_call(world, "run_ask2", "d1")
    assert [p.tool_call_id for p in lw.pending_approvals(world)] == ["d2"]
    lw.approve_tool_call(world, "run_ask2", "d2", approved=False, reason="not today")
    assert lw.pending_approvals(world) == []
    # The run takes the first decision sent: the wait's event payload.
    done = lw.run_workflow(asks, {}, world=world, run_id="run_ask2")
    assert done.output == {"approvals": {"d1": True}}


def test_answering_a_call_that_is_not_pending_names_the_run_and_the_call(world: Any) -> None:
    lw.run_workflow(asks, {}, world=world, run_id="run_ask3", suspend=True)
    with pytest.raises(lw.ApprovalNotPendingError) as info:
        lw.approve_tool_call(world, "run_ask3", "nope")
    assert info.value.run_id == "run_ask3" and info.value.tool_call_id == "nope"
    assert "run_ask3" in str(info.value) and "'nope'" in str(info.value) and "d1" in str(info.value)
    lw.approve_tool_call(world, "run_ask3", "d1")
    with pytest.raises(lw.ApprovalNotPendingError):
        lw.approve_tool_call(world, "run_ask3", "d1")  # answered already
    with pytest.raises(lw.RunNotFoundError):
        lw.approve_tool_call(world, "run_nobody", "d1")


def test_a_request_over_the_inline_limit_reads_back_whole(world: Any) -> None:
    big = "x" * (70 * 1024)

    @lw.workflow(id="asks-big")
    async def asks_big(ctx: lw.RunContext, input: Any) -> Any:
        return await ctx.wait_for_event("approve", "approval", request={
            "kind": "tool-approval",
            "calls": [{"toolCallId": "b1", "toolName": "write", "args": {"text": big}}]})

    lw.run_workflow(asks_big, {}, world=world, run_id="run_big", suspend=True)
    (pending,) = lw.pending_approvals(world)
    assert pending.args == {"text": big}


def test_a_finished_run_asks_for_nothing(world: Any) -> None:
    lw.run_workflow(asks, {}, world=world, run_id="run_ask4", suspend=True)
    lw.send_event(world, "run_ask4", "approval", {"approvals": {"d1": True, "d2": True}})
    assert lw.run_workflow(asks, {}, world=world, run_id="run_ask4").status == "completed"
    assert lw.pending_approvals(world) == []
