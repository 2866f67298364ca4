"""`little schedules`: the World's schedules (name, workflow, cron, timezone, next tick,
last run); `little schedules add MODULE:WORKFLOW NAME --cron ...` and `little schedules
remove NAME` for the shell."""

from __future__ import annotations

import json
from typing import Any

import click

import little_workflow as lw

from ..ops.cli_support import load_workflow, plain_table
from .formatting import dump_json
from .options import UserError, world_options


@click.group(invoke_without_command=True)
@click.pass_context
def schedules(ctx: click.Context) -> None:
    """List the schedules (as `little schedules list`), add or remove one. Workers given
    a schedule's workflow start its ticks."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_command)


@schedules.command("list")
@click.option("--json", "as_json", is_flag=True, help="print the schedules as JSON")
@world_options(read_only=True)
def list_command(as_json: bool, world: Any) -> None:
    """Each schedule: name, workflow, cron, timezone, next tick, last run."""
    found = lw.list_schedules(world)
    if as_json:
        dump_json([_row(s) for s in found])
        return
    if not found:
        click.echo(f"no schedules in {world.data_dir}")
        return
    header = ["name", "workflow", "cron", "timezone", "next tick", "last run"]
    click.echo(plain_table(header, [
        [s.name, s.workflow_id, s.cron, s.timezone,
         s.next_tick.isoformat() if s.next_tick else "-", s.last_run_id or "-"]
        for s in found]))


@schedules.command("add")
@click.argument("target", metavar="MODULE:WORKFLOW")
@click.argument("name")
@click.option("--cron", required=True, help="a cron expression, e.g. '0 3 * * *'")
@click.option("--timezone", default="UTC", show_default=True, help="an IANA timezone name")
@click.option("--input", "input_json", default="null", metavar="JSON", help="each run's input")
@click.option("--catch-up", type=click.Choice(["none", "latest", "all"]), default="latest",
              show_default=True, help="what a worker that was down does with missed ticks")
@click.option("--queue", "queue_name", default=None, metavar="Q",
              help="enqueue each tick's run on queue Q (declared first)")
@world_options
def add_command(target: str, name: str, cron: str, timezone: str, input_json: str,
                catch_up: str, queue_name: str | None, world: Any) -> None:
    """Add the schedule NAME (replacing one of that name) for MODULE:WORKFLOW."""
    wf = load_workflow(target)
    try:
        value = json.loads(input_json)
    except ValueError as e:
        raise UserError(f"--input is not valid JSON: {e}") from None
    s = lw.add_schedule(world, name, wf, cron=cron, timezone=timezone, input=value,
                        queue=queue_name,
                        catch_up=catch_up)  # type: ignore[arg-type]  # click.Choice checked it
    click.echo(f"schedule {s.name}: {s.workflow_id} at {s.cron!r} ({s.timezone}), "
               f"next tick {s.next_tick.isoformat() if s.next_tick else '-'}")


@schedules.command("remove")
@click.argument("name")
@world_options
def remove_command(name: str, world: Any) -> None:
    """Remove the schedule NAME (runs it started are left alone)."""
    if not lw.remove_schedule(world, name):
        raise UserError(f"no schedule {name!r} in {world.data_dir}")
    click.echo(f"removed schedule {name}")


def _row(s: lw.Schedule) -> dict[str, Any]:
    return {"name": s.name, "workflowId": s.workflow_id, "cron": s.cron, "timezone": s.timezone,
            "input": s.input, "queue": s.queue, "catchUp": s.catch_up,
            "nextTick": s.next_tick.isoformat() if s.next_tick else None,
            "lastRun": s.last_run_id}
