"""What the `little` CLI needs besides click: opening a World the way a command needs it
(read-only commands never create one), loading a workflow from a module or a file, the
rows of `little runs`, and one-line texts for errors a user can act on."""

from __future__ import annotations

import datetime as dt
import importlib
import importlib.util
import os
import re
import sys
import traceback
from typing import Any, Callable

from ..errors import (
    CatalogueNotBuiltError,
    LittleWorkflowError,
    StorageDamagedError,
    StorageError,
)
from ..world.ids import validate_run_id
from ..world.protocol import WorldLike


class CliError(LittleWorkflowError):
    """A user mistake the CLI reports as one line."""


#: Top-level packages of filesystem clients whose errors (no credentials, no such bucket,
#: no connection) are about the user's storage, not a bug: reported as one line.
STORAGE_CLIENTS = frozenset({"botocore", "aiobotocore", "boto3", "s3fs", "aiohttp", "gcsfs",
                             "adlfs", "azure", "google"})


def is_storage_client_error(e: BaseException) -> bool:
    return type(e).__module__.split(".")[0] in STORAGE_CLIENTS


class StepProgress:
    """The steps of a run that succeeded so far, in order, as `little run` shows them: fed
    every World call of the run (`tracing_world`) through `on_call`. A success comes
    through either door of the World: `append_event`, or `submit_event` (how the children
    of a parallel group hand theirs in, to share one commit)."""

    APPENDS = frozenset({"append_event", "submit_event"})

    def __init__(self) -> None:
        self.done: list[str] = []

    def on_call(self, name: str, args: tuple, kwargs: dict) -> None:
        if name in self.APPENDS and len(args) >= 3 and args[1] == "step.succeeded":
            self.done.append(str(args[2].get("stepPath")))


def is_damaged_events_db(e: StorageError) -> bool:
    """A local_world's events.db that SQLite finds damaged (not a missing or locked one)."""
    return isinstance(e, StorageDamagedError) and os.path.basename(e.path) == "events.db"


def open_world(data_dir: str | None, world_url: str | None, *, read_only: bool,
               run_id: str | None = None, note: Callable[[str], Any] = print,
               catalogue_only: bool = False) -> Any:
    """The World a command works on. A read-only command refuses a data dir or file URL
    that does not exist (instead of creating it); a `memory://` URL gets a one-line note
    that it dies with the process; a `file://` URL at a local_world data dir is refused
    with the `--data-dir` that opens it. `catalogue_only` (a read-only command that
    only lists runs): a local_world's catalogue alone, see `LocalCatalogueReader`."""

    if run_id:
        validate_run_id(run_id)  # a malformed id is the first thing to say
    missing = f"no run {run_id}: " if run_id else ""
    if world_url:
        if "://" not in world_url:  # a plain path: the virtual world `world="dir"` makes
            world_url = "file://" + os.path.abspath(world_url)
        scheme, _, rest = world_url.partition("://")
        if scheme == "memory":
            note(f"note: {world_url} is a memory world: it lives in this process only, "
                 "so nothing in it outlives this command (use --data-dir or a file:// URL to keep runs)")
        if scheme in ("file", "local"):
            path = os.path.abspath(rest or ".")
            if os.path.exists(os.path.join(path, "events", "events.db")):
                raise CliError(f"{path} is a local_world data dir (it has events/events.db), "
                               f"not a virtual world: open it with --data-dir {path}")
            if read_only and not os.path.isdir(path):
                raise CliError(f"{missing}no world at {path} (nothing has run there)")
        from ..world.virtual import virtual_world  # the World core: only where it is used

        try:
            return virtual_world(world_url)
        except (ValueError, ImportError, OSError) as e:
            raise CliError(f"cannot open world {world_url}: {e}") from None
        except Exception as e:
            if is_storage_client_error(e):
                raise CliError(f"{world_url}: {type(e).__name__}: {e}") from None
            raise
    root = os.path.abspath(data_dir or ".little-workflow")
    if os.path.isdir(os.path.join(root, "events")) and \
            not os.path.exists(os.path.join(root, "events", "events.db")):
        raise CliError(f"{root} is a virtual world (one file per event, as world={data_dir!r} "
                       f"or virtual_world() makes), not a local_world data dir: open it with "
                       f"--world {root}")
    if read_only and not os.path.exists(os.path.join(root, "events", "events.db")):
        why = "" if not os.path.isdir(root) else " (the directory has no events/events.db)"
        raise CliError(f"{missing}no data dir at {root}{why}; give the one you ran with, "
                       "e.g. --data-dir DIR")
    if read_only and catalogue_only:
        try:
            return LocalCatalogueReader(root)
        except CatalogueNotBuiltError:
            if not os.access(root, os.W_OK):
                raise
    from ..world.local import local_world  # the World core: only where it is used

    if read_only:
        # Readers write nothing, so a read-only mount or snapshot reads too.
        try:
            return local_world(root, read_only=True)
        except CatalogueNotBuiltError:
            if not os.access(root, os.W_OK):
                raise
            # A World written by an older version: its catalogue is built on first open.
    return local_world(root)


class LocalCatalogueReader:
    """What `little runs` needs of a local_world — its run catalogue, its clock — read
    straight from events.db (read-only), without the World: opening a World loads
    fsspec and the World core, several times what listing a page costs."""

    def __init__(self, root: str):
        from ..world.clock import SYSTEM_CLOCK
        from ..world.event_stores import SqliteEventStore

        db_path = os.path.join(root, "events", "events.db")
        self.data_dir = root
        self.clock = SYSTEM_CLOCK
        self.events = SqliteEventStore(db_path, read_only=True)
        if self.events.catalogue_needs_build:
            self.events.close()
            raise CatalogueNotBuiltError(db_path)
        self.catalogue = self.events.catalogue
        self._world: Any = None

    def world(self) -> Any:
        """The read-only World itself, opened on first use: for a row that needs more
        than the catalogue (an integration's owner run: `ops/owners.py`)."""
        if self._world is None:
            from ..world.local import local_world

            self._world = local_world(self.data_dir, read_only=True)
        return self._world

    def close(self) -> None:
        if self._world is not None:
            self._world.close()
        self.events.close()


# --- loading a workflow -------------------------------------------------------------------

def _import_failure(what: str, e: BaseException) -> CliError:
    where = ""
    if isinstance(e, SyntaxError):
        text = f"SyntaxError: {e.msg} ({os.path.basename(e.filename or '?')}, line {e.lineno})"
    else:
        frames = traceback.extract_tb(e.__traceback__)
        user = [f for f in frames if "importlib" not in f.filename]
        if user:
            where = f" ({os.path.basename(user[-1].filename)}, line {user[-1].lineno})"
        text = f"{type(e).__name__}: {e}{where}"
    return CliError(f"cannot import {what}: {text}")


def _import_file(path_text: str) -> Any:
    path = os.path.abspath(path_text)
    if not os.path.isfile(path):
        raise CliError(f"no such file: {path_text}")
    name = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0]) or "workflows"
    folder = os.path.dirname(path)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # its sibling modules import as they would in a script
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CliError(f"cannot import {path_text}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        sys.modules.pop(name, None)
        raise _import_failure(path_text, e) from None
    return module


def _import_cli_libraries() -> None:
    # Before the user's folder goes on sys.path: a user file named rich.py or click.py
    # must not stand in for the CLI's own libraries when they are first imported.
    import rich.console  # noqa: F401
    import rich.status  # noqa: F401
    import rich.table  # noqa: F401


def import_target_module(module_name: str) -> Any:
    """A module named on the command line (`pkg.mod`, with the current directory on
    sys.path, or `path/to/file.py`); any failure to import it is one CliError line."""
    _import_cli_libraries()
    if module_name.endswith(".py") or "/" in module_name or os.sep in module_name:
        return _import_file(module_name)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise CliError(f"cannot import module {module_name!r}: {e}") from None
    except Exception as e:
        raise _import_failure(f"module {module_name!r}", e) from None


def load_workflows(target: str) -> list[Any]:
    """`MODULE:ATTR` as in `load_workflow`, or a bare MODULE: every workflow it defines."""
    from ..runtime.workflow import Workflow

    if ":" in target:
        return [load_workflow(target)]
    found = [v for v in vars(import_target_module(target)).values() if isinstance(v, Workflow)]
    if not found:
        raise CliError(f"module {target!r} defines no workflow")
    return found


def load_workflow(target: str) -> Any:
    """`MODULE:ATTR` (MODULE imported with the current directory on sys.path, as uvicorn
    does) or `path/to/file.py:ATTR`."""
    from ..runtime.workflow import Workflow

    module_name, sep, attr = target.rpartition(":")
    if not sep or not module_name or not attr:
        raise CliError(f"expected MODULE:WORKFLOW or FILE.py:WORKFLOW, got {target!r}")
    module = import_target_module(module_name)
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CliError(f"module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not isinstance(obj, Workflow):
        raise CliError(f"{target} is not a workflow (decorate it with @little_workflow.workflow)")
    return obj


# --- little runs --------------------------------------------------------------------------

def _parse_time(text: str | None) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text) if text else None
    except ValueError:
        return None


def run_row(summary: Any) -> dict[str, Any]:
    """One row of `little runs` (and `--json`) from a catalogue `RunSummary`."""
    duration = (summary.updated_at - summary.created_at).total_seconds()
    doc = summary.to_json_dict()
    return {"runId": summary.run_id, "workflowId": summary.workflow_id, "status": summary.status,
            "startedAt": doc["createdAt"], "durationSeconds": duration, "steps": summary.steps,
            "updatedAt": doc["updatedAt"], "waiting": summary.waiting, "error": summary.error,
            "parentRunId": summary.parent_run_id, "needsVersion": summary.needs_version}


def has_no_live_holder(world: WorldLike, run_id: str) -> bool:
    """A `running` run that no process executes (its process was killed: a worker or
    `little run` resumes it), where the World can tell: local_world's lock directories.
    Elsewhere (leases on an object store, in-process locks) it says nothing."""
    from ..world.ids import run_lock_name
    from ..world.locks import directory_lock_holder

    locks_dir = os.path.join(str(getattr(world, "data_dir", "")), "locks")
    if not (isinstance(world, LocalCatalogueReader) or getattr(world, "kind", None) == "local"):
        return False
    return directory_lock_holder(locks_dir, run_lock_name(run_id)) in ("none", "dead")


def run_rows(world: WorldLike, *, statuses: tuple[str, ...] = (), workflow_id: str | None = None,
             since: float | None = None, limit: int = 50, cursor: str | None = None,
             every_page: bool = False) -> tuple[list[dict[str, Any]], str | None]:
    """Rows of `little runs`, newest first, one catalogue page (or every page) at a time,
    and the cursor of the next page (None at the end). `since`: seconds back from the
    World's clock."""
    from ..world.catalogue import list_runs
    from .owners import DESCRIBERS, describe_owner

    after = None
    if since is not None:
        try:
            after = dt.datetime.fromtimestamp(world.clock.now() - since, dt.timezone.utc)
        except (ValueError, OverflowError):
            after = None  # before year 1: every run is younger
    rows: list[dict[str, Any]] = []
    while True:
        page = list_runs(world, status=list(statuses) or None, workflow_id=workflow_id,
                         created_after=after, limit=limit, cursor=cursor)
        for r in page.runs:
            row = run_row(r)
            thread = describe_owner(world.world() if isinstance(world, LocalCatalogueReader) else world,
                                    r.workflow_id, r.run_id) if r.workflow_id in DESCRIBERS else None
            if thread is not None:
                row["thread"] = thread
            rows.append(row)
        for row in rows:
            if row["status"] == "running" and "noLiveHolder" not in row:
                row["noLiveHolder"] = has_no_live_holder(world, row["runId"])
        cursor = page.next_cursor
        if cursor is None or not every_page:
            return rows, cursor


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.2f}s" if seconds < 10 else f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours < 48 else f"{hours // 24}d{hours % 24:02d}h"


def format_started(iso: str | None) -> str:
    t = _parse_time(iso)
    return t.strftime("%Y-%m-%d %H:%M:%S") if t else "-"


def plain_table(header: list[str], rows: list[list[str]]) -> str:
    """Columns as wide as their widest cell: nothing is cut or wrapped, so every run id
    can be copied whole."""
    widths = [max(len(x) for x in col) for col in zip(header, *rows, strict=False)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in [header, *rows]]
    return "\n".join(lines)


def error_text(error: Any) -> str:
    """`Type: message` of an error record as events store it."""
    if not isinstance(error, dict):
        return str(error)
    kind, message = error.get("type"), error.get("message")
    return f"{kind}: {message}" if kind else str(message)
