"""Commands that read one run: `little events`, `little replay`, `little artifacts`,
`little inspect`, and `little ui` over them all."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

import little_workflow as lw

from ..errors import failure_text
from ..ops.cli_support import error_text
from ..world.protocol import WorldLike
from .formatting import dump_json, rich_console, stored_value
from .options import UserError, require_run, world_options


def stream_label(event_type: str, payload: dict[str, Any]) -> str | None:
    if not event_type.startswith("stream."):
        return None
    from ..runtime.streams import record_label

    return record_label(event_type, payload)


@click.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="print the events as JSON, as stored")
@click.option("--follow", "-f", is_flag=True, help="print events as they are appended, until the run ends")
@world_options(read_only=True)
def events(run_id: str, as_json: bool, follow: bool, world: WorldLike) -> None:
    """Show a run's event log."""
    evs = require_run(world, run_id)
    if follow:
        from ..ops.follow import follow_events

        follow_events(world, run_id, as_json=as_json, say=click.echo)
        return
    if as_json:
        dump_json([e.to_json_dict() for e in evs])
        return
    from rich.table import Table

    table = Table("seq", "type", "step / detail", "created")
    for e in evs:
        p = e.payload if isinstance(e.payload, dict) else {}
        detail = str(p.get("stepPath") or p.get("name") or p.get("workflowId")
                     or stream_label(e.type, p) or "")
        if e.type.endswith(".failed") and p.get("error"):
            detail = (detail + ": " if detail else "") + error_text(p["error"])
        table.add_row(str(e.sequence), e.type, detail, e.created_at)
    rich_console().print(table)
    failed = [e for e in evs if e.type == "run.failed" and isinstance(e.payload, dict)]
    if failed:  # in full, whatever the table had room for, after where it failed
        payload = failed[-1].payload
        if isinstance(payload.get("traceback"), str):
            click.echo(payload["traceback"].rstrip("\n"))
        error = stored_value(world, payload.get("error"))  # a long message read back
        click.echo(f"run failed: {failure_text(run_id, error or {})}")


@click.command("inspect")
@click.argument("run_id")
@click.option("--html", "html_file", required=True, metavar="FILE", help="the page to write")
@world_options(read_only=True)
def inspect_run(run_id: str, html_file: str, world: WorldLike) -> None:
    """Write one self-contained HTML page for a run: header, timeline, event table."""
    from ..ops.inspect import render_run_html

    require_run(world, run_id)
    with open(html_file, "w", encoding="utf-8") as f:
        f.write(render_run_html(world, run_id))
    click.echo(f"wrote {html_file}")


@click.command()
@click.argument("targets", nargs=-1, metavar="[MODULE[:WORKFLOW]]...")
@click.option("--port", default=8765, show_default=True, help="port on 127.0.0.1 (0: any free one)")
@world_options
def ui(targets: tuple[str, ...], port: int, world: WorldLike) -> None:
    """Serve the runs list and live run pages on http://127.0.0.1:PORT until Ctrl-C.

    The pages can cancel, send events, approve or deny tool calls, fork and resume runs:
    each action carries the token in the printed URL (open that URL). Resuming runs the
    workflows of MODULE[:WORKFLOW] (as `little worker` does); without them, the page says
    which code it needs."""
    from ..ops.cli_support import load_workflows
    from ..ops.ui import serve

    workflows = [wf for target in targets for wf in load_workflows(target)]
    serve(world, port=port, workflows=workflows, say=click.echo)


@click.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="print the materialized state as JSON")
@world_options(read_only=True)
def replay(run_id: str, as_json: bool, world: WorldLike) -> None:
    """Fold a run's events into its state (status, steps, output)."""
    require_run(world, run_id)
    state = lw.materialize_run_state(world, run_id)
    if as_json:
        dump_json(state.to_json_dict())
        return
    from rich.table import Table

    click.echo(f"run {state.run_id}  workflow {state.workflow_id}  status {state.status}")
    table = Table("step", "status", "attempts", "output")
    for path, s in state.steps.items():
        out = error_text(s.error) if s.status == "failed" else json.dumps(s.output, ensure_ascii=False)
        table.add_row(path, s.status, str(s.attempts), out if len(out) < 60 else out[:57] + "…")
    rich_console().print(table)
    if state.error:
        click.echo("error: " + error_text(state.error))
    else:
        click.echo("output: " + json.dumps(state.output, ensure_ascii=False))



@click.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="print the artifact manifests as JSON")
@click.option("--show", default=None, metavar="ARTIFACT",
              help="print this artifact's content (its name, step/name, the step's path "
                   "when it has one artifact, or its artifact:// ref)")
@world_options(read_only=True)
def artifacts(run_id: str, as_json: bool, show: str | None, world: WorldLike) -> None:
    """List a run's artifacts, or print one's content (--show)."""
    lw.world.ids.validate_run_id(run_id)
    manifests = world.list_artifacts(run_id)
    if not manifests:
        require_run(world, run_id)
    if show is not None:
        _show_artifact(world, run_id, manifests, show)
        return
    if as_json:
        dump_json([m.to_json_dict() for m in manifests])
        return
    from rich.table import Table

    table = Table("artifact", "step", "name", "encoding", "bytes")
    for m in manifests:
        table.add_row(m.artifact_ref, m.step_path, m.name, m.encoding, str(m.size_bytes))
    rich_console().print(table)


def _show_artifact(world: WorldLike, run_id: str, manifests: list[Any], wanted: str) -> None:
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
        dump_json(value)
