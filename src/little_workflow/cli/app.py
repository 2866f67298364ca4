"""The `little` command group and its entry point: user mistakes print one line and
exit non-zero, never a traceback."""

from __future__ import annotations

import json
import sys

import click

import little_workflow as lw

from .approvals import approvals, approve
from .control import cancel, fork, send
from .queues import enqueue, queues
from .reading import artifacts, events, inspect_run, replay, ui
from .running import demo, run, worker
from .runs import runs
from .schedules import schedules
from .upkeep import gc_command, replay_check, verify
from .watching import start, stream


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--data-dir", default=None, metavar="DIR", help="local_world data dir")
@click.option("--world", "world_url", default=None, metavar="URL", help="virtual_world URL")
@click.version_option(lw.__version__, prog_name="little")
def cli(data_dir: str | None, world_url: str | None) -> None:
    """little-workflow: run, inspect, replay and verify durable workflows.

    A run id is run_ followed by 1 to 80 letters, digits, _ or - (run_2024-06-01_a)."""


for command in (run, worker, demo, runs, send, cancel, fork, events, replay, artifacts,
                inspect_run, ui, verify, replay_check, gc_command, approvals, approve, start,
                stream, queues, enqueue, schedules):
    cli.add_command(command)


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
