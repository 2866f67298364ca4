"""Tool calls waiting for a person to approve them, found from the log alone.

A run asks by waiting for an event with a request (`ctx.wait_for_event(path, name,
request={"kind": "tool-approval", "calls": [{"toolCallId", "toolName", "args"}]})`, as the
Pydantic AI capability's `wait_for_approvals` does). A call is pending while that wait is
open (not completed, not timed out) and no event of that name which a wait of the run will
still take names it in its `{"approvals": {toolCallId: decision}}`. So an answer counts as
soon as it is sent, before the run resumes, and nothing here knows any agent framework.

`pending_approvals` reads only the runs the catalogue lists as waiting (a sleep or a wait),
one log each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ApprovalNotPendingError, RunNotFoundError
from ..world.catalogue import list_runs
from ..world.ids import validate_run_id
from ..world.models import Event
from ..world.protocol import WorldLike
from .signals import send_event
from .state import TERMINAL_STATUSES, RunLog
from .values import stored_value

#: The `kind` of a wait's request that asks for tool calls to be approved.
TOOL_APPROVAL = "tool-approval"


@dataclass(frozen=True)
class PendingApproval:
    """One tool call a run waits for a person to approve or deny."""

    run_id: str
    workflow_id: str | None
    #: The wait's step path, and the event name that answers it (`lw.send_event`).
    step_path: str
    event_name: str
    tool_call_id: str
    tool_name: str
    args: Any
    #: When the run began to wait (the wait's `createdAt`, ISO-8601 UTC).
    requested_at: str


def pending_approvals(world: WorldLike, *, run_id: str | None = None) -> list[PendingApproval]:
    """Every tool call waiting for approval: in all waiting runs (newest run first), or in
    run `run_id` (RunNotFoundError when there is no such run)."""
    if run_id is not None:
        validate_run_id(run_id)
        return _pending_in(world, run_id, world.list_events(run_id), missing_is_error=True)
    out: list[PendingApproval] = []
    cursor = None
    while True:
        page = list_runs(world, status="waiting", limit=200, cursor=cursor)
        for summary in page.runs:
            out.extend(_pending_in(world, summary.run_id, world.list_events(summary.run_id)))
        cursor = page.next_cursor
        if cursor is None or not page.runs:
            return out


def approve_tool_call(world: WorldLike, run_id: str, tool_call_id: str, *, approved: bool = True,
                      reason: str | None = None) -> Event:
    """Answer one pending call: sends the event its wait takes,
    `{"approvals": {tool_call_id: true | false | reason}}` (a denial carries `reason` when
    given). ApprovalNotPendingError when the run waits for no such call."""
    pending = pending_approvals(world, run_id=run_id)
    found = next((p for p in pending if p.tool_call_id == tool_call_id), None)
    if found is None:
        raise ApprovalNotPendingError(run_id, tool_call_id, [p.tool_call_id for p in pending])
    decision: bool | str = True if approved else (reason or False)
    return send_event(world, run_id, found.event_name, {"approvals": {tool_call_id: decision}})


def _pending_in(world: WorldLike, run_id: str, events: list[Event], *,
                missing_is_error: bool = False) -> list[PendingApproval]:
    log = RunLog.fold(run_id, events)
    if log.created is None:
        if missing_is_error:
            raise RunNotFoundError(run_id, f" in {world.data_dir}")
        return []
    if log.status in TERMINAL_STATUSES:
        return []
    asked = {str(e.payload.get("stepPath")): e for e in events
             if e.type == "wait.started" and isinstance(e.payload, dict) and "request" in e.payload}
    out = []
    for path, started in asked.items():
        wait = log.waits.get(path)
        if wait is not None and (wait.get("completed") or wait.get("timedOutAt") is not None):
            continue
        request = stored_value(world, started.payload["request"])
        if not isinstance(request, dict) or request.get("kind") != TOOL_APPROVAL:
            continue
        name = str(started.payload.get("name"))
        answered = _answered(world, log, name)
        for call in request.get("calls") or []:
            call_id = str(call.get("toolCallId"))
            if call_id in answered:
                continue
            out.append(PendingApproval(
                run_id=run_id, workflow_id=log.created.get("workflowId"), step_path=path,
                event_name=name, tool_call_id=call_id, tool_name=str(call.get("toolName")),
                args=call.get("args"), requested_at=started.created_at))
    return out


def _answered(world: WorldLike, log: RunLog, name: str) -> set[str]:
    """The call ids named by events `name` that no wait took yet (a wait of the run takes
    each of them in turn)."""
    out: set[str] = set()
    for sequence, signal_name, payload in log.signals:
        if signal_name != name or sequence in log.taken:
            continue
        value = stored_value(world, payload)
        approvals = value.get("approvals") if isinstance(value, dict) else None
        if isinstance(approvals, dict):
            out.update(str(k) for k in approvals)
    return out
