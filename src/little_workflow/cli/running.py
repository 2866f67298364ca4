"""Commands that run workflows: `little run`, `little worker`, `little demo`."""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any, Callable

import click

import little_workflow as lw

from ..ops.cli_support import StepProgress, load_workflow, load_workflows
from ..world.ids import new_run_id
from ..world.protocol import WorldLike
from .formatting import dump_json, rich_console, stored_value
from .options import UserError, world_options


def interruptible() -> Any:
    # The runtime (asyncio, pydantic) is imported by the commands that run workflows,
    # not by every `little` command.
    from ..runtime.runner import interruptible as handler

    return handler()


def output_json(wf: Any, value: Any) -> Any:
    from ..runtime.values import output_json as encode

    return encode(wf, value)


@click.command()
@click.argument("target", metavar="MODULE:WORKFLOW")
@click.option("--input", "input_json", default=None, metavar="JSON",
              help="the input, as JSON (resuming --run-id: default the run's stored input)")
@click.option("--run-id", default=None, metavar="ID",
              help="run id, run_ then letters, digits, _ or - (default: a new run_<uuid>); "
                   "an existing run's id resumes it")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
@world_options
def run(target: str, input_json: str | None, run_id: str | None, as_json: bool,
        world: WorldLike) -> None:
    """Start (or resume) a run of MODULE:WORKFLOW (or path/to/file.py:WORKFLOW)."""
    wf = load_workflow(target)
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
    console = rich_console()
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
            dump_json({"runId": run_id, "status": "failed", "output": None, "workflowId": wf.id,
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
    # The output is what the workflow's return annotation types: shown as JSON.
    output = output_json(wf, result.output)
    if as_json:
        dump_json(result.model_copy(update={"output": output}).to_json_dict())
    else:
        click.echo(f"{result.run_id} {result.status}")
        click.echo(json.dumps(output, indent=2, ensure_ascii=False))


def _fork_hint(world: WorldLike, run_id: str) -> str:
    """How to run a failed run again: from its failed step, or — when it failed outside
    any step — from its last step (everything before it is kept)."""
    from ..runtime.fork import fork_points
    from ..runtime.state import RunLog

    log = RunLog.fold(run_id, world.list_events(run_id))
    if any(rec.status == "failed" for rec in log.steps.values()):
        return f"to run it again from the failed step: little fork {run_id}"
    points = list(fork_points(log))
    if not points:
        return "it failed before its first step: start a new run (little run ... --run-id NEW)"
    return (f"it failed outside any step; to run it again from its last step: "
            f"little fork {run_id} --from-step {shlex.quote(points[-1])}")


def _stored_input(world: WorldLike, events: list[Any]) -> tuple[Any] | None:
    """(the input a run was created with,), read back in full; None for no such run."""
    if not events or events[0].type != "run.created" or not isinstance(events[0].payload, dict):
        return None
    return (stored_value(world, events[0].payload.get("input")),)


def _run_traced(wf: Any, value: Any, run_id: str, world: WorldLike, console: Any,
                on_call: Callable[..., Any], seen: list[str], as_json: bool) -> Any:
    if as_json or not console.is_terminal:
        return lw.run_workflow(wf, value, world=lw.tracing_world(world, on_call), run_id=run_id)
    with console.status(f"running {wf.id}…") as status:
        def progress(name: str, args: tuple, kwargs: dict) -> None:
            on_call(name, args, kwargs)
            if seen:
                status.update(f"running {wf.id}: {len(seen)} steps done, last {seen[-1]}")

        return lw.run_workflow(wf, value, world=lw.tracing_world(world, progress), run_id=run_id)


@click.command()
@click.argument("targets", nargs=-1, required=True, metavar="MODULE[:WORKFLOW]...")
@click.option("--concurrency", default=8, show_default=True, type=click.IntRange(1, 1024),
              help="runs this worker executes at once")
@click.option("--until-idle", is_flag=True, help="return when nothing is due")
@click.option("--json", "as_json", is_flag=True,
              help="one JSON object per line on stdout per run started, completed, failed...")
@world_options
def worker(targets: tuple[str, ...], concurrency: int, until_idle: bool, as_json: bool,
           world: WorldLike) -> None:
    """Execute runs of these workflows as they become due (stop with Ctrl-C or SIGTERM:
    a first Ctrl-C waits for the runs in flight, a second stops at once)."""
    from ..ops.worker_report import WorkerReport

    workflows = [wf for t in targets for wf in load_workflows(t)]
    report = WorkerReport(world, as_json=as_json, say=lambda line: click.echo(line, err=True),
                          emit=click.echo)
    w = lw.Worker(report.traced(), workflows=workflows, concurrency=concurrency)
    click.echo(f"worker: {', '.join(sorted({wf.id for wf in workflows}))} "
               f"on {world.data_dir}", err=True)
    sys.exit(report.run(w, until_idle=until_idle))


@click.command()
@click.argument("name", required=False, default="kill-resume",
                type=click.Choice(["kill-resume", "approval"]))
@click.option("--data-dir", "demo_dir", default=None, metavar="DIR",
              help="the local_world data dir the demo runs in (default .little-workflow)")
def demo(name: str, demo_dir: str | None) -> None:
    """Run a demo. kill-resume (the default): kill a run with SIGKILL mid-flight, start it
    again, watch it continue. approval: a run drafts, sleeps, waits for an approval, is
    SIGKILLed while waiting, gets the approval from `little send`, a worker finishes it."""
    from ..demo import run_approval_demo, run_demo

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
