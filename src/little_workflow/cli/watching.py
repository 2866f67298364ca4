"""Commands that watch runs from outside: `little start` (create a run for a worker, and
with --wait block on its handle until it ends) and `little stream` (follow a run's
durable stream)."""

from __future__ import annotations

import json

import click

import little_workflow as lw

from ..ops.cli_support import load_workflow
from ..world.protocol import WorldLike
from .formatting import dump_json
from .options import UserError, world_options


@click.command()
@click.argument("target", metavar="MODULE:WORKFLOW")
@click.option("--input", "input_json", default=None, metavar="JSON", help="the input, as JSON")
@click.option("--run-id", default=None, metavar="ID",
              help="run id, run_ then letters, digits, _ or - (default: a new run_<uuid>); "
                   "an existing run's id with its own input starts nothing new")
@click.option("--wait", is_flag=True,
              help="wait for the run to end (executed by a worker, any process) and print "
                   "its result")
@click.option("--timeout", default=None, type=click.FloatRange(min=0), metavar="SECONDS",
              help="with --wait: give up waiting after this long (the run goes on)")
@click.option("--json", "as_json", is_flag=True, help="with --wait: print the result as JSON")
@click.option("--queue", "queue_name", default=None, metavar="Q",
              help="put the run on queue Q: a worker starts it within the queue's limits "
                   "(little enqueue has the queue's other options)")
@world_options
def start(target: str, input_json: str | None, run_id: str | None, wait: bool,
          timeout: float | None, as_json: bool, queue_name: str | None, world: WorldLike) -> None:
    """Create a run of MODULE:WORKFLOW without executing it: a worker (`little worker`)
    executes it. Prints the run id; with --wait, blocks until the run ends and prints
    its result. A waiting handle re-reads the run every 0.25 s for other processes'
    appends."""
    if (timeout is not None or as_json) and not wait:
        raise UserError("--timeout and --json go with --wait")
    wf = load_workflow(target)
    try:
        value = None if input_json is None else json.loads(input_json)
    except ValueError as e:
        raise UserError(f"--input is not valid JSON: {e}") from None
    try:
        if queue_name is not None:
            handle = lw.enqueue(world, wf, value, queue=queue_name, run_id=run_id)
        else:
            handle = lw.start_workflow(wf, value, world=world, run_id=run_id, handle=True)
    except lw.InputMismatchError:
        raise UserError(f"run {run_id} exists with another input: give a new --run-id "
                        "for a new input") from None
    if not wait:
        click.echo(handle.run_id)
        return
    if not as_json:
        click.echo(f"started run {handle.run_id} (workflow {wf.id}): waiting for a worker to "
                   "execute it", err=True)
    try:
        output = handle.result(timeout=timeout)
    except TimeoutError as e:
        raise UserError(f"{e}; it goes on: `little start --wait` with --run-id "
                        f"{handle.run_id} waits again") from None
    except lw.WorkflowFailedError as e:
        if as_json:
            dump_json({"runId": handle.run_id, "status": "failed", "output": None,
                       "workflowId": wf.id, "error": e.error})
        raise UserError(str(e)) from None
    from ..runtime.values import output_json

    shown = output_json(wf, output)  # typed like the workflow's output, shown as JSON
    if as_json:
        dump_json({"runId": handle.run_id, "status": "completed", "output": shown,
                   "workflowId": wf.id})
    else:
        click.echo(f"{handle.run_id} completed")
        click.echo(json.dumps(shown, indent=2, ensure_ascii=False))


@click.command()
@click.argument("run_id")
@click.argument("key")
@click.option("--after", default=0, show_default=True, type=click.IntRange(min=0),
              metavar="N", help="skip the first N values")
@click.option("--follow/--no-follow", default=True, show_default=True,
              help="wait for new values until the stream is closed or the run ends")
@world_options(read_only=True)
def stream(run_id: str, key: str, after: int, follow: bool, world: WorldLike) -> None:
    """Print the values of a run's durable stream KEY, one JSON line each, in order, as
    they are written (by any process), until the stream is closed or the run ends. A
    follower re-reads the run every 0.25 s for other processes' writes."""
    try:
        values = lw.read_stream(world, run_id, key, after=after, follow=follow)
    except ValueError as e:
        raise UserError(str(e)) from None
    for value in values:
        click.echo(json.dumps(value, ensure_ascii=False), nl=True)
