"""Commands that act on a run from outside: `little send`, `little cancel`, `little fork`."""

from __future__ import annotations

import json

import click

import little_workflow as lw

from ..errors import fork_point_list
from ..world.protocol import WorldLike
from .options import UserError, world_options


@click.command()
@click.argument("run_id")
@click.argument("name")
@click.option("--payload", "payload_json", default="null", help="the event's payload, as JSON")
@click.option("--idempotency-key", default=None,
              help="the same key with the same payload again is a no-op (another payload: an error)")
@world_options
def send(run_id: str, name: str, payload_json: str, idempotency_key: str | None, world: WorldLike) -> None:
    """Send the event NAME to run RUN_ID (ctx.wait_for_event takes it)."""
    try:
        payload = json.loads(payload_json)
    except ValueError as e:
        raise UserError(f"--payload is not valid JSON: {e}") from None
    event = lw.send_event(world, run_id, name, payload, idempotency_key=idempotency_key)
    click.echo(f"sent {name} to {run_id} (event {event.sequence})")


@click.command()
@click.argument("run_id")
@click.option("--reason", default=None, help="why, recorded in run.cancelled (shown by little events and the UI)")
@world_options
def cancel(run_id: str, reason: str | None, world: WorldLike) -> None:
    """Cancel a run (a running one stops at its next step, sleep or wait)."""
    lw.cancel_run(world, run_id, reason=reason)
    status = lw.materialize_run_state(world, run_id).status
    if status == "cancelled":
        click.echo(f"{run_id} cancelled")
    else:  # another process runs it: it sees the request at its next boundary
        click.echo(f"{run_id}: cancel requested; it is {status} elsewhere and stops at its "
                   "next step, sleep or wait")


@click.command()
@click.argument("run_id")
@click.option("--from-step", default=None, metavar="PATH",
              help="the first step to run again (default: the first failed step)")
@click.option("--run-id", "new_run_id", default=None, help="the fork's run id")
@world_options
def fork(run_id: str, from_step: str | None, new_run_id: str | None, world: WorldLike) -> None:
    """Fork a run: a new run keeping the history before a step (run it with a worker)."""
    try:
        click.echo(lw.fork_run(world, run_id, from_step=from_step, new_run_id=new_run_id))
    except lw.ForkPointError as e:
        raise UserError(f"run {run_id}: {e.reason}; give --from-step PATH, one of: "
                        f"{fork_point_list(e.fork_points)}") from None
