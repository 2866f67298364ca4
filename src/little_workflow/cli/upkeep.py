"""Checking and keeping a World: `little verify`, `little replay-check`, `little gc`."""

from __future__ import annotations

import sys
from typing import Any

import click

import little_workflow as lw

from ..ops.cli_support import load_workflow
from ..world.protocol import WorldLike
from ..world.vocabulary import FINISHED_STATUSES
from .formatting import dump_json
from .options import AgeType, UserError, require_run, world_options


@click.command("replay-check")
@click.argument("target", metavar="MODULE:WORKFLOW")
@click.argument("run_ids", nargs=-1, metavar="[RUN_ID]...")
@world_options(read_only=True)
def replay_check(target: str, run_ids: tuple[str, ...], world: WorldLike) -> None:
    """Check this code against stored runs (default: every run of the workflow): each is
    re-executed against its log calling no step (lw.replay_run). Exit 1 if one diverges.
    (`little replay RUN_ID` shows a run's stored state instead.)"""
    wf = load_workflow(target)
    unreadable: dict[str, str] = {}
    if not run_ids:
        mine = []
        for r in world.list_runs():
            try:
                workflow_id = _workflow_of(world, r)
            except lw.LittleWorkflowError as e:
                unreadable[r] = str(e)  # maybe of this workflow: the check is incomplete
                continue
            if workflow_id == wf.id:
                mine.append(r)
        run_ids = tuple(mine)
        for run_id, problem in unreadable.items():
            click.echo(f"{run_id}: cannot be checked, its log does not read: {problem}")
        if not run_ids and not unreadable:
            raise UserError(f"no run of workflow {wf.id!r} in {world.data_dir}")
    diverged = 0
    for run_id in run_ids:
        require_run(world, run_id)
        try:
            result = lw.replay_run(world, run_id, wf)
        except lw.ReplayDivergenceError as e:
            diverged += 1
            where = f" at step {e.step_path!r}" if e.step_path else ""
            click.echo(f"{run_id}: diverges{where}: {e.detail}")
            continue
        click.echo(f"{run_id}: ok ({result.status})")
    if diverged:
        click.echo(f"runs diverging from this code: {diverged} of {len(run_ids)}", err=True)
    if unreadable:
        click.echo(f"runs that cannot be checked: {len(unreadable)} (`little verify` says "
                   "more)", err=True)
    if diverged or unreadable:
        sys.exit(1)


def _workflow_of(world: WorldLike, run_id: str) -> str | None:
    """The workflow of a listed run; None when it has no event (deleted since it was
    listed). Raises when its log does not read."""
    try:
        first = world.read_event(run_id, 1).payload
    except lw.EventLogCorruptError:
        if not world.list_events(run_id):
            return None  # gone, not damaged
        raise
    return first.get("workflowId") if isinstance(first, dict) else None


def _verify_damaged(data_dir: str, error: Any, as_json: bool, repair: bool = False) -> None:
    # --repair rebuilds the catalogue from the logs: nothing to rebuild into a damaged file.
    from ..ops.salvage import salvage_events

    report = salvage_events(data_dir, error.problem)
    if as_json:
        dump_json(report.to_json_dict())
    else:
        click.echo(f"{report.db_path} is damaged: {report.damage}")
        read = sum(report.readable.values())
        click.echo(f"readable: {len(report.readable)} runs whole ({read} events)")
        if report.unreadable:
            click.echo(f"unreadable: {len(report.unreadable)} runs: "
                       + ", ".join(sorted(report.unreadable)))
        click.echo("nothing is written to it any more: restore it from a backup or move it away")
    sys.exit(1)


@click.command()
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
@click.option("--repair", is_flag=True,
              help="first rebuild the run catalogue from the logs (after a crash, or for a World "
                   "written by an older version)")
@world_options(read_only=True, on_damaged=_verify_damaged)
def verify(as_json: bool, repair: bool, world: WorldLike) -> None:
    """Re-hash every artifact and check every run's log (exit 1 on any problem)."""
    if repair:
        from ..world.verify import rebuild_catalogue

        folded = rebuild_catalogue(world)
        if not as_json:
            click.echo(f"rebuilt the catalogue summaries of {folded} runs from their logs")
    from ..world.verify import verify_world

    report = verify_world(world)
    if as_json:
        dump_json(report.to_json_dict())
    else:
        click.echo(f"checked {report.runs_checked} runs, {report.events_checked} events, "
                   f"{report.artifacts_checked} artifacts")
        for where, problems in report.problems.items():
            for p in problems:
                click.echo(f"{where}: {p}")
        _echo_catalogue(report)
        click.echo("ok" if report.ok else f"{sum(map(len, report.problems.values()))} problems")
    if not report.ok:
        sys.exit(1)


def _echo_catalogue(report: Any) -> None:
    """Where the run catalogue disagrees with the logs, each kind on its line."""
    def line(found: list[str], what: str) -> None:
        if found:
            more = f" (and {len(found) - 10} more)" if len(found) > 10 else ""
            click.echo(f"catalogue: {len(found)} {what}: " + " ".join(found[:10]) + more)

    line(report.catalogue_stale, "run summaries lag behind their logs")
    line(report.catalogue_missing, "runs have no summary")
    line(report.catalogue_ghosts, "summaries name a run whose log is gone")
    if report.catalogue_wrong_entries:
        click.echo(f"catalogue: {len(report.catalogue_wrong_entries)} index entries are wrong:")
        for entry in report.catalogue_wrong_entries[:10]:
            click.echo(f"  {entry}")
    if not report.catalogue_agrees:
        click.echo("catalogue: little verify --repair brings it in line with the logs "
                   "(the logs are whole: nothing is lost)")


@click.command("gc")
@click.option("--older-than", required=True, type=AgeType(),
              help="delete runs whose last event is older than this, e.g. 30d, 12h, 2w")
@click.option("--status", "statuses", multiple=True,
              type=click.Choice(FINISHED_STATUSES),
              help="only runs with this status (repeatable; default: all three)")
@click.option("--dry-run", is_flag=True, help="delete nothing; show what would go")
@world_options
def gc_command(older_than: float, statuses: tuple[str, ...], dry_run: bool, world: WorldLike) -> None:
    """Delete old finished runs with their events, artifacts, scratch and kept plans."""
    report = lw.gc(world, older_than=older_than, dry_run=dry_run,
                   statuses=statuses or FINISHED_STATUSES)
    verb = "would delete" if dry_run else "deleted"
    for run_id in report.run_ids:
        click.echo(f"{verb} {run_id}")
    for run_id, why in sorted(report.skipped.items()):
        click.echo(f"skipped {run_id}: {why}")
    for run_id in report.catalogue_ghosts:
        click.echo(f"{'would drop' if dry_run else 'dropped'} the catalogue summary of {run_id} "
                   "(its log is gone)")
    click.echo(f"{verb} {len(report.run_ids)} runs, "
               f"{'would free' if dry_run else 'freed'} {report.bytes_freed} bytes")
