"""Tool calls waiting for a person: `little approvals` lists them, `little approve` answers
one (`lw.pending_approvals`, `lw.approve_tool_call`)."""

from __future__ import annotations

import json

import click

import little_workflow as lw

from ..ops.cli_support import format_started, plain_table
from ..world.protocol import WorldLike
from .formatting import dump_json
from .options import UserError, world_options


@click.command()
@click.option("--run-id", default=None, metavar="ID", help="only the calls run ID waits for")
@click.option("--json", "as_json", is_flag=True, help="print the calls as JSON (one object per call)")
@world_options(read_only=True)
def approvals(run_id: str | None, as_json: bool, world: WorldLike) -> None:
    """List the tool calls runs wait for a person to approve: run, workflow, tool, call id,
    arguments, asked at (UTC). Answer one with `little approve RUN CALL_ID [--deny]`."""
    pending = lw.pending_approvals(world, run_id=run_id)
    if as_json:
        dump_json([{"runId": p.run_id, "workflowId": p.workflow_id, "stepPath": p.step_path,
                    "eventName": p.event_name, "toolCallId": p.tool_call_id,
                    "toolName": p.tool_name, "args": p.args, "requestedAt": p.requested_at}
                   for p in pending])
        return
    if not pending:
        where = f"run {run_id}" if run_id else str(world.data_dir)
        click.echo(f"no tool calls wait for approval in {where}")
        return
    rows = []
    for p in pending:
        args = json.dumps(p.args, ensure_ascii=False, default=str)
        rows.append([p.run_id, p.workflow_id or "-", p.tool_name, p.tool_call_id,
                     args if len(args) <= 100 else args[:99] + "…",
                     format_started(p.requested_at)])
    click.echo(plain_table(["run id", "workflow", "tool", "call id", "arguments",
                            "asked at (UTC)"], rows))
    click.echo("answer one: little approve RUN CALL_ID (or --deny [--reason TEXT]); "
               "--json shows the arguments whole")


@click.command()
@click.argument("run_id")
@click.argument("call_id")
@click.option("--deny", is_flag=True, help="deny the call instead of approving it")
@click.option("--reason", default=None, help="with --deny: why, passed to the agent as the tool's result")
@world_options
def approve(run_id: str, call_id: str, deny: bool, reason: str | None, world: WorldLike) -> None:
    """Approve (or --deny) tool call CALL_ID that run RUN_ID waits for: sends the event its
    wait takes; the run goes on when it is resumed (a worker, or `little run ... --run-id`)."""
    if reason is not None and not deny:
        raise UserError("--reason goes with --deny (an approved call needs no reason)")
    event = lw.approve_tool_call(world, run_id, call_id, approved=not deny, reason=reason)
    click.echo(f"{'denied' if deny else 'approved'} tool call {call_id} of {run_id} "
               f"(event {event.sequence})")
