"""The index of runs that need attention: `active/<runId>.json`, one small document per
unfinished run, so a worker's sweep reads one listing and then only those runs — its cost
grows with the active runs, not with every run ever made.

- The entry is written **before** `run.created` is appended, so a crash cannot leave an
  unfinished run the index does not name.
- It is removed **after** the terminal event (`run.completed`, `run.failed`,
  `run.cancelled`). A crash in between leaves a stale entry; the sweep removes it when it
  finds the run finished.
- An entry whose run has no log yet is left alone for `ORPHAN_GRACE_SECONDS` (its creator
  may be about to append `run.created`), then removed.
- A World whose catalogue commits a run's status in the transaction of its events
  (local_world: `catalogue.lists_unfinished`) needs no entry: the catalogue names every
  unfinished run, and a run's creation saves the entry's two fsyncs (file and folder).
  Entries such a World already has (written before) are still listed and removed.

Everything goes through World file methods, so it works on every backend and
`tracing_world` sees it.
"""

from __future__ import annotations

from ..world.clock import to_iso
from ..world.ids import RUN_ID_RE
from ..world.protocol import WorldLike
from ..world.vocabulary import RUN_ENDING_EVENTS

ACTIVE_DIR = "active"
SUFFIX = ".json"
#: How long an entry with no run log is kept before the sweep removes it (seconds,
#: as this worker has seen it: no host's clock is compared with another's).
ORPHAN_GRACE_SECONDS = 60.0
TERMINAL_EVENTS = RUN_ENDING_EVENTS


def entry_path(run_id: str) -> str:
    return f"{ACTIVE_DIR}/{run_id}{SUFFIX}"


def _catalogue_lists_unfinished(world: WorldLike) -> bool:
    return bool(getattr(world.catalogue, "lists_unfinished", False))


def mark_active(world: WorldLike, run_id: str, workflow_id: str) -> None:
    """Name the run in the index (before its `run.created` is appended)."""
    if _catalogue_lists_unfinished(world):
        return  # its catalogue row commits with run.created
    world.write_document(entry_path(run_id), {
        "runId": run_id, "workflowId": workflow_id, "indexedAt": to_iso(world.clock.now()),
    })


def mark_finished(world: WorldLike, run_id: str) -> None:
    """Drop the run from the index (after its terminal event). If the storage fails here
    (a `StorageError`, like any other write), the entry left behind is removed by the
    next sweep that finds the run finished — so the removal need not be durable: a
    power cut that brings the entry back costs one look at a finished run."""
    world.remove_file(entry_path(run_id), durable=False)


def active_run_ids(world: WorldLike) -> list[str]:
    """The runs the index names (one listing), and those the catalogue names unfinished
    where it names them all."""
    out = []
    for name in world.list_dir(ACTIVE_DIR):
        if name.endswith(SUFFIX) and RUN_ID_RE.fullmatch(name[: -len(SUFFIX)]):
            out.append(name[: -len(SUFFIX)])
    if _catalogue_lists_unfinished(world):
        out = sorted(set(out).union(world.catalogue.unfinished_run_ids()))
    return out
