"""What this process folded of each run since it wrote its summary (`SummaryTracker`),
and the progress a large World's catalogue build reports."""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from .summary import (
    FINISHED_STATUSES,
    PROGRESS_FROM,
    SummaryChange,
    SummaryDoc,
    apply_change,
    changes_status,
)


def progress_printer(total: int) -> Callable[[int], None] | None:
    """The default progress of a catalogue build: a line on stderr every 10 % for a large
    World, nothing for a small one."""
    if total < PROGRESS_FROM:
        return None
    step = max(total // 10, 1)
    print(f"little-workflow: building the run catalogue of {total} runs "
          "(once, for a World written before it existed)", file=sys.stderr, flush=True)

    def report(done: int) -> None:
        if done % step == 0 or done == total:
            print(f"  catalogue: {done}/{total} runs", file=sys.stderr, flush=True)

    return report



# --- what this process folded of each run ----------------------------------------------------

#: In-memory summaries kept per World storage (runs in flight), at most this many.
CACHE_LIMIT = 4096


@dataclass
class CachedSummary:
    summary: SummaryDoc | None  # None: not known here; folded from the log when written
    written: int | None  # `sequence` of the summary this process last wrote (or saw)
    through: int  # every event up to this one is folded into `summary`
    dirty: bool = False  # a status change not written yet
    #: File catalogues (file_catalogue.py): the document as this process last wrote (or
    #: read) it; and for the status change at `intended_for`, the `pending` mark written
    #: over it and the index folders given entries before the event was published.
    stored: SummaryDoc | None = None
    pending: dict[str, Any] | None = None
    intended: frozenset[str] = frozenset()
    intended_for: int | None = None


class SummaryTracker:
    """What this process has folded of each run since it last wrote the run's summary,
    so that an event that changes only the step count costs no storage write (it rides
    with the next status change) and a status change costs one write, no log read.

    Events this process did not see (another process appended, or this one started
    after them) show as a gap in `through`: the next write then folds the run's log
    instead — the log stays the truth. Bounded: an entry dropped costs one fold later."""

    def __init__(self) -> None:
        self._runs: dict[str, CachedSummary] = {}
        self._lock = threading.Lock()

    def get(self, run_id: str) -> CachedSummary | None:
        return self._runs.get(run_id)

    def _fresh(self, run_id: str, through: int) -> CachedSummary:
        c = CachedSummary(None, None, through)
        with self._lock:
            self._runs.pop(run_id, None)
            if len(self._runs) >= CACHE_LIMIT:
                self._runs.pop(next(iter(self._runs)))
            self._runs[run_id] = c
        return c

    def expect(self, run_id: str, sequence: int, stored: SummaryDoc | None,
               pending: dict[str, Any] | None, intended: Iterable[str] = ()) -> None:
        """Before event `sequence` is published: the document as it was, the `pending`
        mark written over it (None: none) and the folders given entries for it."""
        c = self._runs.get(run_id)
        if c is None or c.through != sequence - 1:
            c = self._fresh(run_id, sequence - 1)
        c.stored, c.pending, c.intended, c.intended_for = stored, pending, frozenset(intended), sequence

    def note(self, run_id: str, sequence: int, change: SummaryChange | None) -> bool:
        """Fold one published event in; True when a status change waits to be written."""
        c = self._runs.get(run_id)
        if c is None or c.through != sequence - 1:
            if change is None or not changes_status(change):
                return False  # a later status change folds what was not seen here
            c = self._fresh(run_id, sequence - 1)
        c.through = sequence
        if change is not None:
            if change.kind in ("created", "owner") and sequence == 1:
                c.summary = apply_change(None, run_id, sequence, change)
            elif c.summary is not None:
                c.summary = apply_change(c.summary, run_id, sequence, change)
            if changes_status(change):
                c.dirty = True
        return c.dirty

    def pending(self, run_id: str) -> CachedSummary | None:
        c = self._runs.get(run_id)
        return c if c is not None and c.dirty else None

    def pending_runs(self) -> list[str]:
        return [run_id for run_id, c in list(self._runs.items()) if c.dirty]

    def resolve(self, run_id: str, c: CachedSummary, old: SummaryDoc | None,
                fold_log: Callable[[], SummaryDoc | None]
                ) -> tuple[SummaryDoc | None, SummaryDoc | None]:
        """The summary to write, given the stored one (`old`), and the stored one its
        index entries follow (None: rewrite them all). None to write when the stored
        one is as new already: a summary only moves forward."""
        if old is not None and int(old.get("sequence") or 0) >= c.through:
            self.forget(run_id)
            return None, old
        if c.summary is None or (old.get("sequence") if old is not None else None) != c.written:
            c.summary = fold_log()  # lagging, or written by another process: the log decides
            old = None
        if c.summary is None:
            self.forget(run_id)
        return c.summary, old

    def written(self, run_id: str, c: CachedSummary, stored: SummaryDoc | None = None) -> None:
        """The summary folded through `c.through` is stored (`stored`: as the document
        now reads, for file catalogues)."""
        assert c.summary is not None
        c.written, c.dirty, c.stored = c.summary["sequence"], False, stored
        c.pending, c.intended, c.intended_for = None, frozenset(), None
        if c.summary["status"] in FINISHED_STATUSES:
            self.forget(run_id)

    def forget(self, run_id: str) -> None:
        with self._lock:
            self._runs.pop(run_id, None)
