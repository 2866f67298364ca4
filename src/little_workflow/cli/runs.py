"""`little runs`: the run catalogue, a page at a time."""

from __future__ import annotations

from typing import Any

import click

import little_workflow as lw

from ..errors import failure_text
from ..ops.cli_support import format_duration, format_started, plain_table, run_rows
from ..world.protocol import WorldLike
from ..world.vocabulary import RUN_STATUSES
from .formatting import dump_json
from .options import UserError, world_options


@click.command()
@click.option("--status", "statuses", multiple=True,
              type=click.Choice([s for s in RUN_STATUSES if s != "unknown"]),
              help="only runs with this status (repeatable)")
@click.option("--workflow", "workflow_id", default=None, metavar="ID", help="only runs of this workflow")
@click.option("--since", default=None, metavar="AGE", help="only runs created within AGE, e.g. 2h, 7d")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 10_000),
              help="runs per page")
@click.option("--cursor", default=None, metavar="CURSOR", help="the page after this cursor")
@click.option("--all", "every_page", is_flag=True, help="every page, not only the first")
@click.option("--json", "as_json", is_flag=True, help="print the runs as JSON (one object per run)")
@world_options(read_only=True, catalogue_only=True)
def runs(statuses: tuple[str, ...], workflow_id: str | None, since: str | None, limit: int,
         cursor: str | None, every_page: bool, as_json: bool, world: WorldLike) -> None:
    """List runs, newest first, a page at a time: id, status, workflow, started (UTC),
    duration."""
    age = None
    if since is not None:
        from ..ops.gc import parse_age

        try:
            age = parse_age(since)
        except ValueError as e:
            raise UserError(f"--since: {e}") from None
    try:
        rows, next_cursor = run_rows(world, statuses=statuses, workflow_id=workflow_id,
                                     since=age, limit=limit, cursor=cursor, every_page=every_page)
    except lw.CatalogueQueryError as e:
        if e.argument != "cursor":
            raise
        raise UserError(f"--cursor {cursor}: not a cursor little runs printed for this World "
                        "(copy it from the line 'more runs: add --cursor ...')") from None
    more = (f"more runs: add --cursor {next_cursor} for the next page, or --all"
            if next_cursor else None)
    if as_json:
        dump_json(rows)
        if more:
            click.echo(more, err=True)
        return
    if not rows:
        asked = [f"status {' or '.join(statuses)}" if statuses else "",
                 f"workflow {workflow_id!r}" if workflow_id else "",
                 f"created within {since}" if since else ""]
        which = " and ".join(a for a in asked if a)
        click.echo(f"no runs{' with ' + which if which else ''} in {world.data_dir}")
        return
    header = ["run id", "status", "workflow", "started (UTC)", "duration", "steps", "waits for"]
    table = [[r["runId"], r["status"] + (" (no live holder)" if r.get("noLiveHolder") else ""),
              r["workflowId"] or "-", format_started(r["startedAt"]),
              format_duration(r["durationSeconds"]), str(r["steps"]),
              _thread(r["thread"]) if "thread" in r else
              _waits_for(r.get("waiting"), r.get("needsVersion"))] for r in rows]
    if any(r.get("error") for r in rows):  # what a failed run failed with, in short
        header.append("error")
        for line, r in zip(table, rows, strict=True):
            error = r.get("error")
            text = failure_text(r["runId"], error) if isinstance(error, dict) else str(error or "")
            text = (text.splitlines() or [""])[0]
            line.append(text if len(text) <= 100 else text[:99] + "…")
    click.echo(plain_table(header, table))
    if more:
        click.echo(more)


def _thread(thread: dict[str, Any]) -> str:
    """A LangGraph thread's row says what it holds (it never waits: it is not a run)."""
    count = thread["checkpoints"]
    last = f", last node {thread['lastNode']}" if thread.get("lastNode") else ""
    return f"thread {thread['threadId']}: {count} checkpoint{'s' if count != 1 else ''}{last}"


def _waits_for(waiting: dict[str, Any] | None, needs_version: str | None = None) -> str:
    if needs_version:  # what it waits for first: code of its version (runs are pinned)
        return f"code of version {needs_version} (a resume was refused)"
    if not waiting:
        return ""
    if waiting.get("kind") == "sleep":
        return f"{waiting['stepPath']}: until {waiting.get('wakeAt')}"
    deadline = f" (until {waiting['deadline']})" if waiting.get("deadline") else ""
    return f"{waiting['stepPath']}: event {waiting.get('name')!r}{deadline}"
