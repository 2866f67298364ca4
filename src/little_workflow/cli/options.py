"""What every `little` command shares: `--data-dir` / `--world` (the World a command
gets), the one-line user error, and the run a command names."""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

import click

import little_workflow as lw

from ..ops.cli_support import (
    is_damaged_events_db,
    is_storage_client_error,
    open_world,
)
from ..world.protocol import WorldLike


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


def require_run(world: WorldLike, run_id: str) -> list[Any]:
    events = world.list_events(run_id)
    if not events:
        raise UserError(f"no run {run_id} in {world.data_dir}")
    return events


class AgeType(click.ParamType):
    name = "AGE"

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        from ..ops.gc import parse_age

        try:
            return parse_age(str(value))
        except ValueError as e:
            self.fail(str(e), param, ctx)
