"""Queue commands (DESIGN §17): `little queues` (each queue's limits, depth, running and
recent rate) and `little enqueue` (a run on a queue, started by workers)."""

from __future__ import annotations

import json
from typing import Any

import click

import little_workflow as lw

from ..ops.cli_support import load_workflow
from .options import UserError, world_options


def _limit(value: Any) -> str:
    return "-" if value is None else str(value)


def _rate_limit(rate: Any) -> str:
    return "-" if rate is None else f"{rate.limit}/{rate.period:g}s"


@click.command()
@click.option("--json", "as_json", is_flag=True, help="one JSON object per queue")
@world_options(read_only=True)
def queues(as_json: bool, world: Any) -> None:
    """Declared queues: limits, depth (runs waiting to start), running, and recent rate
    (starts in the last minute)."""
    found = lw.list_queues(world)
    if as_json:
        for q in found:
            click.echo(json.dumps({
                "name": q.name, "concurrency": q.concurrency,
                "per_key_concurrency": q.per_key_concurrency,
                "rate_limit": (None if q.rate_limit is None else
                               {"limit": q.rate_limit.limit, "period": q.rate_limit.period}),
                "depth": q.depth, "running": q.running, "recent_rate": q.recent_rate},
                ensure_ascii=False))
        return
    if not found:
        click.echo("no queues (lw.declare_queue declares one)")
        return
    rows = [("QUEUE", "CONCURRENCY", "PER KEY", "RATE LIMIT", "DEPTH", "RUNNING", "STARTS/MIN")]
    rows += [(q.name, _limit(q.concurrency), _limit(q.per_key_concurrency),
              _rate_limit(q.rate_limit), str(q.depth), str(q.running), f"{q.recent_rate:g}")
             for q in found]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())


@click.command()
@click.argument("target", metavar="MODULE:WORKFLOW")
@click.option("--input", "input_json", default="null", metavar="JSON", help="the input, as JSON")
@click.option("--queue", "queue_name", required=True, metavar="Q", help="a declared queue")
@click.option("--key", default=None, metavar="K", help="the partition (per-key concurrency, debounce)")
@click.option("--priority", default=0, show_default=True, type=int, help="lower starts first")
@click.option("--dedup-id", default=None, metavar="D",
              help="while a run with this id is unfinished on the queue, print its id instead")
@click.option("--run-id", default=None, metavar="ID", help="the run's id (default: a new run_<uuid>)")
@world_options
def enqueue(target: str, input_json: str, queue_name: str, key: str | None, priority: int,
            dedup_id: str | None, run_id: str | None, world: Any) -> None:
    """Put a run of MODULE:WORKFLOW on queue Q; a worker (`little worker`) starts it within
    the queue's limits. Prints the run id."""
    wf = load_workflow(target)
    try:
        value = json.loads(input_json)
    except ValueError as e:
        raise UserError(f"--input is not valid JSON: {e}") from None
    try:
        handle = lw.enqueue(world, wf, value, queue=queue_name, key=key, priority=priority,
                            dedup_id=dedup_id, run_id=run_id)
    except (TypeError, ValueError) as e:
        raise UserError(str(e)) from None
    click.echo(handle.run_id)
