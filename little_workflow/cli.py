"""`little`: a thin shell over the public API. User mistakes print one line, exit 1."""

from __future__ import annotations

import functools
import json
import os
import shlex
import sys
from typing import Any, Callable

import click

import little_workflow as lw

from .errors import failure_text, fork_point_list
from .ops.cli_support import (
    StepProgress,
    error_text,
    format_duration,
    format_started,
    is_damaged_events_db,
    is_storage_client_error,
    load_workflow,
    load_workflows,
    open_world,
    plain_table,
    run_rows,
)
from .world.ids import new_run_id


def interruptible() -> Any:
    # The runtime (asyncio, pydantic) is imported by the commands that run workflows,
    # not by every `little` command.
    from .runtime.runner import interruptible as handler

    return handler()


def stored_value(world: Any, value: Any, ref: str | None = None) -> Any:
    from .runtime.values import stored_value as read_back

    return read_back(world, value, ref)


def output_json(wf: Any, value: Any) -> Any:
    from .runtime.values import output_json as encode

    return encode(wf, value)


class UserError(click.ClickException):
    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.message}", err=True)


def world_options(fn: Callable[..., Any] | None = None, *, read_only: bool = False,
                  on_damaged: Callable[..., Any] | None = None,
                  catalogue_only: bool = False) -> Any:
    """`--data-dir DIR` / `--world URL` for a command, which gets `world=`. A read-only
    command (`@world_options(read_only=True)`) never creates a data dir. A damaged
    events.db is refused when opened; `on_damaged(data_dir, error, **kwargs)` is called
    instead of the command where it can do better (verify: what can still be read)."""
    if fn is None:
        return functools.partial(world_options, read_only=read_only, on_damaged=on_damaged,
                                 catalogue_only=catalogue_only)

    @click.option("--data-dir", default=None, metavar="DIR",
                  help="local_world data dir (default $LITTLE_DATA_DIR, else .little-workflow)")
    @click.option("--world", "world_url", default=None, metavar="URL",
                  help="virtual_world: an fsspec URL (memory://wf, s3://bucket/wf) or a "
                       "path, as world=\"dir\" makes (default $LITTLE_WORLD)")
    @functools.wraps(fn)
    def wrapper(*args: Any, data_dir: str | None, world_url: str | None, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        parent = ctx.find_root().params
        data_dir = data_dir or parent.get("data_dir")
        world_url = world_url or parent.get("world_url")
        if data_dir and world_url:
            raise UserError("give --data-dir or --world, not both")
        if not data_dir and not world_url:
            data_dir, world_url = world_from_environment()
        ctx.meta["little.world_args"] = (["--data-dir", data_dir] if data_dir else
                                         ["--world", world_url] if world_url else [])
        try:
            # --repair rebuilds the catalogue: the one reading command that writes.
            world = open_world(data_dir, world_url, read_only=read_only and not kwargs.get("repair"),
                               run_id=kwargs.get("run_id"), catalogue_only=catalogue_only,
                               note=lambda line: click.echo(line, err=True))
        except lw.StorageError as e:
            if on_damaged is None or not is_damaged_events_db(e):
                raise
            return on_damaged(os.path.dirname(os.path.dirname(e.path)), e, **kwargs)
        try:
            return fn(*args, world=world, **kwargs)
        except Exception as e:
            if world_url and is_storage_client_error(e):
                raise UserError(f"{world_url}: {type(e).__name__}: {e}") from None
            raise
        finally:
            world.close()

    return wrapper


def world_from_environment() -> tuple[str | None, str | None]:
    """(data dir, world URL) from LITTLE_DATA_DIR / LITTLE_WORLD, when no option is given."""
    data_dir = os.environ.get("LITTLE_DATA_DIR") or None
    world_url = os.environ.get("LITTLE_WORLD") or None
    if data_dir and world_url:
        raise UserError("both LITTLE_DATA_DIR and LITTLE_WORLD are set: unset one, or give "
                        "--data-dir or --world")
    return data_dir, world_url


def _console() -> Any:
    from rich.console import Console

    return Console()


def _dump(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, default=str))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--data-dir", default=None, metavar="DIR", help="local_world data dir")
@click.option("--world", "world_url", default=None, metavar="URL", help="virtual_world URL")
@click.version_option(lw.__version__, prog_name="little")
def cli(data_dir: str | None, world_url: str | None) -> None:
    """little-workflow: run, inspect, replay and verify durable workflows.

    A run id is run_ followed by 1 to 80 letters, digits, _ or - (run_2024-06-01_a)."""


def _load_workflow(target: str) -> Any:
    return load_workflow(target)


@cli.command()
@click.argument("target", metavar="MODULE:WORKFLOW")
@click.option("--input", "input_json", default=None, metavar="JSON",
              help="the input, as JSON (resuming --run-id: default the run's stored input)")
@click.option("--run-id", default=None, metavar="ID",
              help="run id, run_ then letters, digits, _ or - (default: a new run_<uuid>); "
                   "an existing run's id resumes it")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
@world_options
def run(target: str, input_json: str | None, run_id: str | None, as_json: bool,
        world: Any) -> None:
    """Start (or resume) a run of MODULE:WORKFLOW (or path/to/file.py:WORKFLOW)."""
    wf = _load_workflow(target)
    run_id = run_id or new_run_id()
    events = world.list_events(run_id)
    stored = _stored_input(world, events)
    if input_json is None:
        value = stored[0] if stored else None
    else:
        try:
            value = json.loads(input_json)
        except ValueError as e:
            raise UserError(f"--input is not valid JSON: {e}") from None
    before = lw.materialize_run_state(world, run_id).status if events else None
    console = _console()
    progress = StepProgress()
    seen = progress.done

    def on_call(name: str, args: tuple, kwargs: dict) -> None:
        if name == "append_event" and len(args) >= 3 and args[1] == "run.started":
            verb = "started" if before is None else "resuming"
            click.echo(f"{verb} run {run_id} (workflow {wf.id})", err=True)
        progress.on_call(name, args, kwargs)

    try:
        with interruptible():
            result = _run_traced(wf, value, run_id, world, console, on_call, seen, as_json)
    except KeyboardInterrupt:
        resume = ["little", "run", target, "--run-id", run_id]  # takes the stored input
        resume += click.get_current_context().meta.get("little.world_args", [])
        click.echo(f"interrupted: run {run_id} is unfinished; its completed steps are kept. "
                   "Resume it with:", err=True)
        click.echo("  " + shlex.join(resume), err=True)
        sys.exit(130)
    except lw.WorkflowMismatchError:
        raise
    except lw.InputMismatchError:
        shown = json.dumps(stored[0] if stored else None, ensure_ascii=False)
        shown = shown if len(shown) <= 300 else shown[:297] + "..."
        raise UserError(f"run {run_id} was created with input {shown}, not {input_json}: "
                        "leave out --input to resume it with its stored input, or give a new "
                        "--run-id for a new input") from None
    except lw.SchemaValidationError:
        if input_json is not None or stored:
            raise
        schema = json.dumps(wf.input_schema, ensure_ascii=False) if wf.input_schema else ""
        raise UserError(f"no --input given: workflow {wf.id!r} takes an input"
                        + (f" matching {schema}" if schema else "")
                        + "; give it as --input JSON") from None
    except lw.WorkflowFailedError as e:
        if as_json:
            _dump({"runId": run_id, "status": "failed", "output": None, "workflowId": wf.id,
                   "error": e.error})
        if e.traceback and not as_json:
            click.echo(e.traceback.rstrip("\n"), err=True)
        message = str(e)
        if before == "failed":
            message += (" — this is the stored result of an earlier attempt (a failed run is "
                        f"not run again); {_fork_hint(world, run_id)}")
        raise UserError(message) from None
    if before == "completed":
        click.echo(f"run {run_id} had already completed: this is its stored result "
                   "(nothing ran)", err=True)
    # The output is what the workflow's return annotation types (DESIGN §16): shown as JSON.
    output = output_json(wf, result.output)
    if as_json:
        _dump(result.model_copy(update={"output": output}).to_json_dict())
    else:
        click.echo(f"{result.run_id} {result.status}")
        click.echo(json.dumps(output, indent=2, ensure_ascii=False))


@cli.command()
@click.option("--status", "statuses", multiple=True,
              type=click.Choice(["created", "running", "waiting", "completed", "failed", "cancelled"]),
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
         cursor: str | None, every_page: bool, as_json: bool, world: Any) -> None:
    """List runs, newest first, a page at a time: id, status, workflow, started (UTC),
    duration."""
    age = None
    if since is not None:
        from .ops.gc import parse_age

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
        _dump(rows)
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


def _fork_hint(world: Any, run_id: str) -> str:
    """How to run a failed run again: from its failed step, or — when it failed outside
    any step — from its last step (everything before it is kept)."""
    from .runtime.fork import fork_points
    from .runtime.state import RunLog

    log = RunLog.fold(run_id, world.list_events(run_id))
    if any(rec.status == "failed" for rec in log.steps.values()):
        return f"to run it again from the failed step: little fork {run_id}"
    points = list(fork_points(log))
    if not points:
        return "it failed before its first step: start a new run (little run ... --run-id NEW)"
    return (f"it failed outside any step; to run it again from its last step: "
            f"little fork {run_id} --from-step {shlex.quote(points[-1])}")


def _stored_input(world: Any, events: list[Any]) -> tuple[Any] | None:
    """(the input a run was created with,), read back in full; None for no such run."""
    if not events or events[0].type != "run.created" or not isinstance(events[0].payload, dict):
        return None
    return (stored_value(world, events[0].payload.get("input")),)


def _run_traced(wf: Any, value: Any, run_id: str, world: Any, console: Any,
                on_call: Callable[..., Any], seen: list[str], as_json: bool) -> Any:
    if as_json or not console.is_terminal:
        return lw.run_workflow(wf, value, world=lw.tracing_world(world, on_call), run_id=run_id)
    with console.status(f"running {wf.id}…") as status:
        def progress(name: str, args: tuple, kwargs: dict) -> None:
            on_call(name, args, kwargs)
            if seen:
                status.update(f"running {wf.id}: {len(seen)} steps done, last {seen[-1]}")

        return lw.run_workflow(wf, value, world=lw.tracing_world(world, progress), run_id=run_id)


def _waits_for(waiting: dict[str, Any] | None, needs_version: str | None = None) -> str:
    if needs_version:  # what it waits for first: code of its version (DESIGN §15)
        return f"code of version {needs_version} (a resume was refused)"
    if not waiting:
        return ""
    if waiting.get("kind") == "sleep":
        return f"{waiting['stepPath']}: until {waiting.get('wakeAt')}"
    deadline = f" (until {waiting['deadline']})" if waiting.get("deadline") else ""
    return f"{waiting['stepPath']}: event {waiting.get('name')!r}{deadline}"


@cli.command()
@click.argument("run_id")
@click.argument("name")
@click.option("--payload", "payload_json", default="null", help="the event's payload, as JSON")
@click.option("--idempotency-key", default=None,
              help="the same key with the same payload again is a no-op (another payload: an error)")
@world_options
def send(run_id: str, name: str, payload_json: str, idempotency_key: str | None, world: Any) -> None:
    """Send the event NAME to run RUN_ID (ctx.wait_for_event takes it)."""
    try:
        payload = json.loads(payload_json)
    except ValueError as e:
        raise UserError(f"--payload is not valid JSON: {e}") from None
    event = lw.send_event(world, run_id, name, payload, idempotency_key=idempotency_key)
    click.echo(f"sent {name} to {run_id} (event {event.sequence})")


@cli.command()
@click.argument("run_id")
@click.option("--reason", default=None, help="why, recorded in run.cancelled (shown by little events and the UI)")
@world_options
def cancel(run_id: str, reason: str | None, world: Any) -> None:
    """Cancel a run (a running one stops at its next step, sleep or wait)."""
    lw.cancel_run(world, run_id, reason=reason)
    status = lw.materialize_run_state(world, run_id).status
    if status == "cancelled":
        click.echo(f"{run_id} cancelled")
    else:  # another process runs it: it sees the request at its next boundary
        click.echo(f"{run_id}: cancel requested; it is {status} elsewhere and stops at its "
                   "next step, sleep or wait")


@cli.command()
@click.argument("run_id")
@click.option("--from-step", default=None, metavar="PATH",
              help="the first step to run again (default: the first failed step)")
@click.option("--run-id", "new_run_id", default=None, help="the fork's run id")
@world_options
def fork(run_id: str, from_step: str | None, new_run_id: str | None, world: Any) -> None:
    """Fork a run: a new run keeping the history before a step (run it with a worker)."""
    try:
        click.echo(lw.fork_run(world, run_id, from_step=from_step, new_run_id=new_run_id))
    except lw.ForkPointError as e:
        raise UserError(f"run {run_id}: {e.reason}; give --from-step PATH, one of: "
                        f"{fork_point_list(e.fork_points)}") from None


def _load_workflows(target: str) -> list[Any]:
    return load_workflows(target)


@cli.command()
@click.argument("targets", nargs=-1, required=True, metavar="MODULE[:WORKFLOW]...")
@click.option("--concurrency", default=8, show_default=True, type=click.IntRange(1, 1024),
              help="runs this worker executes at once")
@click.option("--until-idle", is_flag=True, help="return when nothing is due")
@click.option("--json", "as_json", is_flag=True,
              help="one JSON object per line on stdout per run started, completed, failed...")
@world_options
def worker(targets: tuple[str, ...], concurrency: int, until_idle: bool, as_json: bool,
           world: Any) -> None:
    """Execute runs of these workflows as they become due (stop with Ctrl-C or SIGTERM:
    a first Ctrl-C waits for the runs in flight, a second stops at once)."""
    from .ops.worker_report import WorkerReport

    workflows = [wf for t in targets for wf in _load_workflows(t)]
    report = WorkerReport(world, as_json=as_json, say=lambda line: click.echo(line, err=True),
                          emit=click.echo)
    w = lw.Worker(report.traced(), workflows=workflows, concurrency=concurrency)
    click.echo(f"worker: {', '.join(sorted({wf.id for wf in workflows}))} "
               f"on {world.data_dir}", err=True)
    sys.exit(report.run(w, until_idle=until_idle))


def _require_run(world: Any, run_id: str) -> list[Any]:
    events = world.list_events(run_id)
    if not events:
        raise UserError(f"no run {run_id} in {world.data_dir}")
    return events


@cli.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="print the events as JSON, as stored")
@click.option("--follow", "-f", is_flag=True, help="print events as they are appended, until the run ends")
@world_options(read_only=True)
def events(run_id: str, as_json: bool, follow: bool, world: Any) -> None:
    """Show a run's event log."""
    evs = _require_run(world, run_id)
    if follow:
        from .ops.follow import follow_events

        follow_events(world, run_id, as_json=as_json, say=click.echo)
        return
    if as_json:
        _dump([e.to_json_dict() for e in evs])
        return
    from rich.table import Table

    table = Table("seq", "type", "step / detail", "created")
    for e in evs:
        p = e.payload if isinstance(e.payload, dict) else {}
        detail = str(p.get("stepPath") or p.get("name") or p.get("workflowId") or "")
        if e.type.endswith(".failed") and p.get("error"):
            detail = (detail + ": " if detail else "") + error_text(p["error"])
        table.add_row(str(e.sequence), e.type, detail, e.created_at)
    _console().print(table)
    failed = [e for e in evs if e.type == "run.failed" and isinstance(e.payload, dict)]
    if failed:  # in full, whatever the table had room for, after where it failed
        payload = failed[-1].payload
        if isinstance(payload.get("traceback"), str):
            click.echo(payload["traceback"].rstrip("\n"))
        error = stored_value(world, payload.get("error"))  # a long message read back
        click.echo(f"run failed: {failure_text(run_id, error or {})}")


@cli.command("inspect")
@click.argument("run_id")
@click.option("--html", "html_file", required=True, metavar="FILE", help="the page to write")
@world_options(read_only=True)
def inspect_run(run_id: str, html_file: str, world: Any) -> None:
    """Write one self-contained HTML page for a run: header, timeline, event table."""
    from .ops.inspect import render_run_html

    _require_run(world, run_id)
    with open(html_file, "w", encoding="utf-8") as f:
        f.write(render_run_html(world, run_id))
    click.echo(f"wrote {html_file}")


@cli.command()
@click.argument("targets", nargs=-1, metavar="[MODULE[:WORKFLOW]]...")
@click.option("--port", default=8765, show_default=True, help="port on 127.0.0.1 (0: any free one)")
@world_options
def ui(targets: tuple[str, ...], port: int, world: Any) -> None:
    """Serve the runs list and live run pages on http://127.0.0.1:PORT until Ctrl-C.

    The pages can cancel, send events, approve or deny tool calls, fork and resume runs:
    each action carries the token in the printed URL (open that URL). Resuming runs the
    workflows of MODULE[:WORKFLOW] (as `little worker` does); without them, the page says
    which code it needs."""
    from .ops.ui import serve

    workflows = [wf for target in targets for wf in _load_workflows(target)]
    serve(world, port=port, workflows=workflows, say=click.echo)


@cli.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="print the materialized state as JSON")
@world_options(read_only=True)
def replay(run_id: str, as_json: bool, world: Any) -> None:
    """Fold a run's events into its state (status, steps, output)."""
    _require_run(world, run_id)
    state = lw.materialize_run_state(world, run_id)
    if as_json:
        _dump(state.to_json_dict())
        return
    from rich.table import Table

    click.echo(f"run {state.run_id}  workflow {state.workflow_id}  status {state.status}")
    table = Table("step", "status", "attempts", "output")
    for path, s in state.steps.items():
        out = error_text(s.error) if s.status == "failed" else json.dumps(s.output, ensure_ascii=False)
        table.add_row(path, s.status, str(s.attempts), out if len(out) < 60 else out[:57] + "…")
    _console().print(table)
    if state.error:
        click.echo("error: " + error_text(state.error))
    else:
        click.echo("output: " + json.dumps(state.output, ensure_ascii=False))


@cli.command("replay-check")
@click.argument("target", metavar="MODULE:WORKFLOW")
@click.argument("run_ids", nargs=-1, metavar="[RUN_ID]...")
@world_options(read_only=True)
def replay_check(target: str, run_ids: tuple[str, ...], world: Any) -> None:
    """Check this code against stored runs (default: every run of the workflow): each is
    re-executed against its log calling no step (lw.replay_run). Exit 1 if one diverges.
    (`little replay RUN_ID` shows a run's stored state instead.)"""
    wf = _load_workflow(target)
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
        _require_run(world, run_id)
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


def _workflow_of(world: Any, run_id: str) -> str | None:
    """The workflow of a listed run; None when it has no event (deleted since it was
    listed). Raises when its log does not read."""
    try:
        first = world.read_event(run_id, 1).payload
    except lw.EventLogCorruptError:
        if not world.list_events(run_id):
            return None  # gone, not damaged
        raise
    return first.get("workflowId") if isinstance(first, dict) else None


@cli.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="print the artifact manifests as JSON")
@click.option("--show", default=None, metavar="ARTIFACT",
              help="print this artifact's content (its name, step/name, the step's path "
                   "when it has one artifact, or its artifact:// ref)")
@world_options(read_only=True)
def artifacts(run_id: str, as_json: bool, show: str | None, world: Any) -> None:
    """List a run's artifacts, or print one's content (--show)."""
    lw.world.ids.validate_run_id(run_id)
    manifests = world.list_artifacts(run_id)
    if not manifests:
        _require_run(world, run_id)
    if show is not None:
        _show_artifact(world, run_id, manifests, show)
        return
    if as_json:
        _dump([m.to_json_dict() for m in manifests])
        return
    from rich.table import Table

    table = Table("artifact", "step", "name", "encoding", "bytes")
    for m in manifests:
        table.add_row(m.artifact_ref, m.step_path, m.name, m.encoding, str(m.size_bytes))
    _console().print(table)


def _show_artifact(world: Any, run_id: str, manifests: list[Any], wanted: str) -> None:
    found = [m for m in manifests if wanted in (m.artifact_ref, m.artifact_id, m.name,
                                               f"{m.step_path}/{m.name}")]
    if not found:  # a step's path: its one artifact (a large output is `<step>/output`)
        found = [m for m in manifests if m.step_path == wanted]
    if len(found) != 1:
        names = ", ".join(sorted({f"{m.step_path}/{m.name}" for m in manifests})) or "none"
        what = "no artifact" if not found else "more than one artifact named"
        raise UserError(f"run {run_id} has {what} {wanted!r}; its artifacts: {names}")
    value = world.read_artifact(found[0].artifact_ref)
    if isinstance(value, bytes):
        sys.stdout.buffer.write(value)  # as stored: pipe it to a file or a viewer
        sys.stdout.buffer.flush()
    elif isinstance(value, str):
        click.echo(value)
    else:
        _dump(value)


def _verify_damaged(data_dir: str, error: Any, as_json: bool, repair: bool = False) -> None:
    # --repair rebuilds the catalogue from the logs: nothing to rebuild into a damaged file.
    from .ops.salvage import salvage_events

    report = salvage_events(data_dir, error.problem)
    if as_json:
        _dump(report.to_json_dict())
    else:
        click.echo(f"{report.db_path} is damaged: {report.damage}")
        read = sum(report.readable.values())
        click.echo(f"readable: {len(report.readable)} runs whole ({read} events)")
        if report.unreadable:
            click.echo(f"unreadable: {len(report.unreadable)} runs: "
                       + ", ".join(sorted(report.unreadable)))
        click.echo("nothing is written to it any more: restore it from a backup or move it away")
    sys.exit(1)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
@click.option("--repair", is_flag=True,
              help="first rebuild the run catalogue from the logs (after a crash, or for a World "
                   "written by an older version)")
@world_options(read_only=True, on_damaged=_verify_damaged)
def verify(as_json: bool, repair: bool, world: Any) -> None:
    """Re-hash every artifact and check every run's log (exit 1 on any problem)."""
    if repair:
        from .world.verify import rebuild_catalogue

        folded = rebuild_catalogue(world)
        if not as_json:
            click.echo(f"rebuilt the catalogue summaries of {folded} runs from their logs")
    from .world.verify import verify_world

    report = verify_world(world)
    if as_json:
        _dump(report.to_json_dict())
    else:
        click.echo(f"checked {report.runs_checked} runs, {report.events_checked} events, "
                   f"{report.artifacts_checked} artifacts")
        for where, problems in report.problems.items():
            for p in problems:
                click.echo(f"{where}: {p}")
        if report.catalogue_stale:
            click.echo(f"catalogue: {len(report.catalogue_stale)} run summaries lag behind their "
                       "logs (little verify --repair brings them up to date): "
                       + " ".join(report.catalogue_stale[:10]))
        click.echo("ok" if report.ok else f"{sum(map(len, report.problems.values()))} problems")
    if not report.ok:
        sys.exit(1)


class AgeType(click.ParamType):
    name = "AGE"

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        from .ops.gc import parse_age

        try:
            return parse_age(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)


@cli.command("gc")
@click.option("--older-than", required=True, type=AgeType(),
              help="delete runs whose last event is older than this, e.g. 30d, 12h, 2w")
@click.option("--status", "statuses", multiple=True,
              type=click.Choice(["completed", "failed", "cancelled"]),
              help="only runs with this status (repeatable; default: all three)")
@click.option("--dry-run", is_flag=True, help="delete nothing; show what would go")
@world_options
def gc_command(older_than: float, statuses: tuple[str, ...], dry_run: bool, world: Any) -> None:
    """Delete old finished runs with their events, artifacts, scratch and kept plans."""
    report = lw.gc(world, older_than=older_than, dry_run=dry_run,
                   statuses=statuses or ("completed", "failed", "cancelled"))
    verb = "would delete" if dry_run else "deleted"
    for run_id in report.run_ids:
        click.echo(f"{verb} {run_id}")
    for run_id, why in sorted(report.skipped.items()):
        click.echo(f"skipped {run_id}: {why}")
    click.echo(f"{verb} {len(report.run_ids)} runs, "
               f"{'would free' if dry_run else 'freed'} {report.bytes_freed} bytes")


@cli.command()
@click.argument("name", required=False, default="kill-resume",
                type=click.Choice(["kill-resume", "approval"]))
@click.option("--data-dir", "demo_dir", default=None, metavar="DIR",
              help="the local_world data dir the demo runs in (default .little-workflow)")
def demo(name: str, demo_dir: str | None) -> None:
    """Run a demo. kill-resume (the default): kill a run with SIGKILL mid-flight, start it
    again, watch it continue. approval: a run drafts, sleeps, waits for an approval, is
    SIGKILLed while waiting, gets the approval from `little send`, a worker finishes it."""
    from .demo import run_approval_demo, run_demo

    root = click.get_current_context().find_root().params
    if root.get("world_url"):
        raise UserError("the demo runs on the embedded local_world; use --data-dir")
    data_dir = demo_dir or root.get("data_dir") or ".little-workflow"
    if name == "approval":
        try:
            outcome = run_approval_demo(data_dir, say=click.echo)
        except RuntimeError as e:
            raise UserError(f"the approval demo failed: {e}") from None
        if outcome["draftCalls"] != 1 or outcome["status"] != "completed":
            raise UserError(f"the approval demo did not end as it should: {outcome}")
        return
    outcome = run_demo(data_dir, say=click.echo)
    if outcome["recalled"]:
        raise UserError(f"completed steps were called again: {outcome['recalled']}")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        cli.main(args=args or ["--help"], prog_name="little", standalone_mode=False)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except click.exceptions.Abort:  # click's word for Ctrl-C
        click.echo("interrupted", err=True)
        sys.exit(130)
    except click.UsageError as e:
        where = e.ctx.command_path if e.ctx is not None else "little"
        click.echo(f"error: {e.format_message()} (see '{where} --help')", err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except lw.LittleWorkflowError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    except (json.JSONDecodeError, OSError) as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
