"""Retention: delete finished runs older than a cutoff.

A run is deleted with everything it owns — its events, the artifacts whose manifest
names it (manifest and blob), and `runs/<runId>/` (scratch, step folders, kept plans).
Each deletion writes a tombstone first and removes it last (`world.run_deletion`), under
the run's lock: a crash leaves every run whole or marked, and the next gc — or the next
read of that run id — finishes the marked ones.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

from ..errors import LittleWorkflowError, RunLockedError
from ..world import run_deletion
from ..world.protocol import WorldLike
from ..world.vocabulary import FINISHED_STATUSES
from ..world.vocabulary import RUN_ENDINGS as TERMINAL_STATUS

_AGE_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass
class GcReport:
    """What a gc pass deleted (or, with `dry_run`, would delete)."""

    run_ids: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    dry_run: bool = False
    #: Old finished runs left alone, and why (their lock is held, their log is unreadable).
    skipped: dict[str, str] = field(default_factory=dict)
    #: Catalogue summaries met whose run has no log any more (dropped unless `dry_run`).
    catalogue_ghosts: list[str] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        return {"runIds": self.run_ids, "bytesFreed": self.bytes_freed,
                "dryRun": self.dry_run, "skipped": self.skipped,
                "catalogueGhosts": self.catalogue_ghosts}


def parse_age(text: str) -> float:
    """`30d`, `12h`, `90m`, `45s`, `2w` → seconds; ValueError for anything else."""
    m = _AGE_RE.fullmatch(text or "")
    if m is None:
        raise ValueError(f"{text!r} is not an age: a number and a unit s, m, h, d or w, e.g. 30d")
    return float(m.group(1)) * _UNIT_SECONDS[m.group(2)]


def gc(
    world: WorldLike,
    *,
    older_than: timedelta | float,
    statuses: Iterable[str] = FINISHED_STATUSES,
    dry_run: bool = False,
) -> GcReport:
    """Delete runs whose status is in `statuses` and whose last event is older than
    `older_than` (a timedelta or seconds, on `world.clock`), with their events,
    artifacts, scratch and kept plans. Never a created, running or waiting run, nor one
    whose lock is held. Deletions a crash left half done are finished first.
    `dry_run=True` changes nothing and reports what would go and the bytes it holds."""
    seconds = _seconds(older_than)
    wanted = _statuses(statuses)
    cutoff = _now(world) - seconds
    report = GcReport(dry_run=dry_run)

    marked = run_deletion.marked_runs(world)
    for run_id in marked:
        _delete(world, run_id, None, report)

    candidates = []
    for run_id in _old_finished_runs(world, wanted, cutoff):
        if run_id in marked:
            continue
        try:
            events = world.list_events(run_id)
            if not events:
                _drop_ghost(world, run_id, report)
                continue
            status = next((TERMINAL_STATUS[e.type] for e in events if e.type in TERMINAL_STATUS),
                          None)
            if status is None or status not in wanted:
                continue  # created, running and waiting runs are never deleted
            last = datetime.fromisoformat(events[-1].created_at).timestamp()
        except (LittleWorkflowError, ValueError) as e:
            report.skipped[run_id] = f"its log cannot be read: {e}"
            continue
        if last <= cutoff:
            candidates.append(run_id)
    if candidates:
        owned = run_deletion.artifacts_by_run(world)
        for run_id in candidates:
            _delete(world, run_id, owned.get(run_id, []), report)
    report.run_ids.sort()
    return report


def _old_finished_runs(world: WorldLike, wanted: frozenset[str], cutoff: float) -> list[str]:
    """Runs the catalogue names as finished with a status in `wanted` and created no
    later than the cutoff (a run's last event is never older than its creation), oldest
    first: the cost grows with the old runs, not with every run. The caller checks each
    against its log, which stays the truth."""
    from ..world.catalogue import list_runs

    before = datetime.fromtimestamp(cutoff, timezone.utc) + timedelta(microseconds=1)
    found: list[str] = []
    cursor = None
    while True:
        page = list_runs(world, status=sorted(wanted), created_before=before, limit=500,
                         cursor=cursor)
        found += [r.run_id for r in page.runs if r.updated_at.timestamp() <= cutoff]
        if page.next_cursor is None:
            return found[::-1]
        cursor = page.next_cursor


def _drop_ghost(world: WorldLike, run_id: str, report: GcReport) -> None:
    """A summary the catalogue lists whose run has no log (its deletion was cut, or a
    late summary write landed after it): dropped, under the run's lock so that a run
    created again under its id meanwhile keeps its own."""
    report.catalogue_ghosts.append(run_id)
    if report.dry_run:
        return
    try:
        with world.run_lock(run_id):
            if not world.list_events(run_id):
                world.catalogue.forget(run_id)
    except RunLockedError:
        report.catalogue_ghosts.remove(run_id)
        report.skipped[run_id] = "its lock is held (it is in use)"


def _delete(world: WorldLike, run_id: str, artifact_ids: list[str] | None, report: GcReport) -> None:
    """Delete one run (artifact_ids None: it is already marked) or, dry, size it."""
    if report.dry_run:
        report.run_ids.append(run_id)
        report.bytes_freed += _size(world, run_id, artifact_ids)
        return
    try:
        with world.run_lock(run_id):
            if artifact_ids is not None:
                run_deletion.mark_for_deletion(world, run_id, artifact_ids)
            freed = world.finish_deletion(run_id)
    except RunLockedError:
        report.skipped[run_id] = "its lock is held (it is in use)"
        return
    report.run_ids.append(run_id)
    report.bytes_freed += freed


def _size(world: WorldLike, run_id: str, artifact_ids: list[str] | None) -> int:
    """The bytes deleting a run would free (as finish_deletion counts them)."""
    if artifact_ids is None:
        doc = world.read_document(run_deletion.tombstone_path(run_id)) or {}
        artifact_ids = list(doc.get("artifactIds") or [])
    total = world.log_size(run_id)
    total += run_deletion.tree_size(world, f"runs/{run_id}")
    for aid in artifact_ids:
        total += run_deletion.tree_size(world, f"artifacts/{aid}.json")
        total += run_deletion.tree_size(world, f"artifacts/blobs/{aid}.bin")
    return total


def _seconds(older_than: Any) -> float:
    if isinstance(older_than, timedelta):
        value = older_than.total_seconds()
    elif isinstance(older_than, (int, float)) and not isinstance(older_than, bool):
        value = float(older_than)
    else:
        raise TypeError(f"older_than is a timedelta or a number of seconds, not {older_than!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"older_than must be a finite age of 0 or more, not {older_than!r}")
    return value


def _statuses(statuses: Iterable[str]) -> frozenset[str]:
    if isinstance(statuses, str):
        statuses = (statuses,)
    wanted = frozenset(statuses)
    unfinished = sorted(s for s in wanted if s not in FINISHED_STATUSES)
    if unfinished or not wanted:
        raise ValueError(f"gc deletes only finished runs: statuses are among "
                         f"{', '.join(FINISHED_STATUSES)}, not {unfinished or 'none'}")
    return wanted


def _now(world: WorldLike) -> float:
    clock = getattr(world, "clock", None)
    return float(clock.now()) if clock is not None else time.time()
