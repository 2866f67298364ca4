"""The run catalogue of file and object-store Worlds: one summary document per run and
key indexes whose names sort newest first, so that a page of runs costs O(limit).

Layout under the data dir (every file small JSON, or empty):

    catalogue/runs/<runId>.json                             the summary document
    catalogue/by-created/<entry>                            every run
    catalogue/by-status/<status>/<entry>                    runs in that status
    catalogue/by-workflow/<wf>/<entry>                      runs of a workflow
    catalogue/by-workflow-status/<wf>/<status>/<entry>      runs of a workflow in a status
    catalogue/by-parent/<parentRunId>/<entry>               sub-runs of a run
    catalogue/built.json                                    every run has its summary

`<wf>` = sha256(workflowId)[:24]; `<entry>` = `dddd/ddd/ddd/<key>`, the key's first ten
digits as bucket folders (`BUCKETS`); `<key>` = 16 digits of (10¹⁶−1 − createdAt in µs),
`_`, the run id — so every level sorts newest first, and an object store lists a page of
an index from a start key in one request (elsewhere a page lists the newest buckets one
at a time).

The log is the truth, the document follows the log, and an entry is only a hint that
readers check against the document. No lock is shared by the writers of one run (its
executor, a holder that lost its lease, a reader settling it, a repair), so the order
of the writes is what keeps the catalogue honest. A status change of run R at event S,
whose summary is X with status x:

  W1  before S is published: R's document is rewritten as it was, marked
      `pending: {sequence: S, status: x}`; then X's entries are added (a new run's
      entries in every index; it has no document yet).
  W2  S is published.
  W3  once S is durable: the document is read and — unless it is at S or later already:
      a summary only moves forward — becomes X.
  W4  the entries of the statuses the replaced document had (its status, its pending
      one) that X does not have are removed.
  W5  if the document W3 replaced was not the one this writer marked in W1, another
      writer came in between and may have removed an entry of x: X's entries again.
  W6  the log after S is read: a status change there may have lost its document to
      this one, so it is folded in and written the same way.

A reader never trusts an entry:

  R1  an entry without a document: the run is settled if its log has event 1 (a cut
      at its creation), else skipped (a creation on its way, or a deleted run).
  R2  a document marked `pending` S: the run is settled if event S exists (a cut
      between W2 and W3), else the document is shown as it is (S never landed).
  R3  an entry under a status its document has neither as status nor as pending one:
      it is stale — removed, and the run settled if its log moved past the document.

Settling a run folds its whole log (on local disk after syncing the run's folder, so no
summary gets ahead of a durable log) and writes that fold by W3–W6, adding its entries
before the document as well. So a process killed anywhere in W1–W6 leaves a state the
next listing that meets the run heals (R1–R3), as do the worker's sweep (it settles a
finished run the active index still names) and `little verify --repair` (`rebuild`).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import json
import logging
import time
import uuid
from collections import deque
from typing import Any, Callable, Iterable, Iterator, cast

from ..ids import RUN_ID_RE, sha256_hex
from ..publish import Publisher
from .query import RunQuery, key_position, order_key
from .summary import (
    MAX_US,
    STATUSES,
    SummaryChange,
    SummaryDoc,
    apply_change,
    changes_status,
    created_us,
    fold_envelopes,
    parse_time,
    summary_change,
    summary_json,
    summary_lags,
)
from .tracker import CachedSummary, SummaryTracker, progress_printer

log = logging.getLogger("little_workflow.catalogue")

CATALOGUE_DIR = "catalogue"
MARKER = f"{CATALOGUE_DIR}/built.json"
#: The marker's content: a World whose marker differs (none, or an older layout) is built.
MARKER_DOC = b'{"version": 3}'
#: The folders above an index entry, as digit ranges of its order key: buckets of
#: ~11.6 days, ~16.7 minutes and 1 second of created_at, named so that every level sorts
#: newest first. Where a store cannot list from a key, a page lists the newest folders
#: one at a time until it has its runs — it reads O(limit + a bucket), not the index.
BUCKETS = ((0, 4), (4, 7), (7, 10))
#: A repair removes an entry that names no run only once its run would be this old
#: (seconds of createdAt, on the World's clock): a younger one may be a creation whose
#: entries are written (W1) and whose first event is not yet.
ORPHAN_GRACE_SECONDS = 3600.0
#: W6 follows at most this many later status changes; the rest is left to their writers.
MAX_CATCH_UPS = 8
#: Failed catalogue writes kept on the catalogue (`write_errors`), newest last.
WRITE_ERRORS_KEPT = 20
#: Index folders whose entries name a run whatever its status, and those by status.
RUN_INDEXES = ("by-created", "by-workflow", "by-parent")


def workflow_folder(workflow_id: str) -> str:
    return sha256_hex(workflow_id)[:24]


def entry_path(key: str) -> str:
    """Where an order key lives inside an index folder: its buckets, then itself."""
    return "/".join(key[lo:hi] for lo, hi in BUCKETS) + "/" + key


def without_pending(doc: SummaryDoc) -> SummaryDoc:
    summary: SummaryDoc = {**doc}
    summary.pop("pending", None)
    return summary


def pending_of(doc: SummaryDoc | None) -> dict[str, Any] | None:
    """A document's `pending` mark, if it announces a change after its sequence."""
    mark = doc.get("pending") if doc is not None else None
    if isinstance(mark, dict) and isinstance(mark.get("sequence"), int) \
            and mark["sequence"] > int(doc.get("sequence") or 0):  # type: ignore[union-attr]
        return mark
    return None


def mark_statuses(doc: SummaryDoc | None) -> set[str]:
    """The statuses a document's `pending` mark (and the marks it replaced) announced."""
    mark = doc.get("pending") if doc is not None else None
    if not isinstance(mark, dict):
        return set()
    found = [mark.get("status"), *(mark.get("was") or [])]
    return {s for s in found if isinstance(s, str) and s in STATUSES}


def young_mark(doc: SummaryDoc, now: float) -> bool:
    """A `pending` mark that may still be a change on its way (a mark a cut left before
    its event is published looks the same until it is old)."""
    mark = doc.get("pending")
    if not isinstance(mark, dict) or not isinstance(mark.get("at"), str):
        return False
    try:
        made = parse_time(mark["at"]).timestamp()
    except ValueError:
        return False
    return made > now - ORPHAN_GRACE_SECONDS


def sequence_of(doc: SummaryDoc | None) -> int:
    return int(doc.get("sequence") or 0) if doc is not None else 0


class FileCatalogue:
    """`world.catalogue` of a file or object-store World (the module docstring is its
    protocol). `store` is the World's FileEventStore (`read_after`, `read_one`,
    `run_dir`, `run_ids`)."""

    def __init__(self, publisher: Any, root: str, store: Any):
        self.publisher = publisher
        self.root = root
        self.store = store
        self.tracker = SummaryTracker()
        # A publisher with its own sync() has writes a power cut can take back.
        self.waits_for_durable = type(publisher).sync is not Publisher.sync
        #: Catalogue writes that failed (the storage refused them), newest last: the
        #: summaries they leave behind are healed by the next listing, sweep or repair.
        self.write_errors: deque[BaseException] = deque(maxlen=WRITE_ERRORS_KEPT)

    def path(self, *parts: str) -> str:
        return "/".join((self.root, CATALOGUE_DIR, *parts))

    def doc_path(self, run_id: str) -> str:
        return self.path("runs", f"{run_id}.json")

    # ---- which entries a summary needs ----

    def status_folders(self, summary: SummaryDoc, status: str | None = None) -> list[str]:
        status = status or summary["status"]
        folders = [self.path("by-status", status)]
        workflow_id = summary.get("workflowId")
        if workflow_id is not None:
            folders.append(self.path("by-workflow-status", workflow_folder(workflow_id), status))
        return folders

    def run_folders(self, summary: SummaryDoc) -> list[str]:
        """The index folders naming a run whatever its status."""
        folders = [self.path("by-created")]
        workflow_id = summary.get("workflowId")
        if workflow_id is not None:
            folders.append(self.path("by-workflow", workflow_folder(workflow_id)))
        parent = summary.get("parentRunId")
        if isinstance(parent, str) and RUN_ID_RE.fullmatch(parent):
            folders.append(self.path("by-parent", parent))
        return folders

    def needed_entries(self, summary: SummaryDoc) -> set[tuple[str, str]]:
        key = order_key(created_us(summary), summary["runId"])
        return {(f, key) for f in self.status_folders(summary) + self.run_folders(summary)}

    def marked_entries(self, doc: SummaryDoc, now: float) -> set[tuple[str, str]]:
        """Entries a young `pending` mark of `doc` justifies (a change on its way)."""
        if pending_of(doc) is None or not young_mark(doc, now):
            return set()
        key = order_key(created_us(doc), doc["runId"])
        return {(f, key) for status in mark_statuses(doc) for f in self.status_folders(doc, status)}

    # ---- W1: before a status change is published ----

    def intend(self, run_id: str, sequence: int, change: SummaryChange | None) -> None:
        """Called before event `sequence` of `run_id` is published (under the run's
        append lock): mark the document and add the entries the change will need."""
        if change is None or not changes_status(change):
            return
        try:
            self._intend(run_id, sequence, change)
        except OSError as e:
            # The change goes on without its marks: its summary is written after the
            # event, as before (a cut in between is then healed by a repair).
            self._record(run_id, "before the event", e)

    def _intend(self, run_id: str, sequence: int, change: SummaryChange) -> None:
        c = self.tracker.get(run_id)
        known = c is not None and c.through == sequence - 1
        if change.kind in ("created", "owner") and sequence == 1:
            stored, mark_base, fold_base = None, None, None
        else:
            stored = c.stored if known and c is not None and c.stored is not None \
                else self.read_doc(run_id)
            if stored is None:
                self.tracker.expect(run_id, sequence, None, None)
                return  # nothing known to mark: the write after the event folds the log
            fold_base = c.summary if known and c is not None and c.summary is not None \
                else without_pending(stored)
            # The document to mark: this process's fold up to the event before (the
            # newest there is) unless a status change of it still waits to be durable
            # (local disk): then the document as last written, backed by a durable log.
            mark_base = c.summary if known and c is not None and c.summary is not None \
                and not c.dirty else without_pending(stored)
        new = apply_change(fold_base, run_id, sequence, change)
        if new is None:
            self.tracker.expect(run_id, sequence, stored, None)
            return
        pending: dict[str, Any] | None = None
        if mark_base is not None:
            pending = {"sequence": sequence, "status": new["status"], "at": change.at,
                       "mark": uuid.uuid4().hex[:12]}
            # A mark this one replaces names statuses whose entries may need removing
            # once a change lands (W4): they travel with it.
            was = mark_statuses(stored) - {new["status"]}
            if was:
                pending["was"] = sorted(was)
            self._put_doc(run_id, {**mark_base, "pending": pending})
        key = order_key(created_us(new), run_id)
        folders = self.status_folders(new) + (self.run_folders(new) if stored is None else [])
        for folder in folders:
            self.add_entry(folder, key)
        self.tracker.expect(run_id, sequence, stored, pending, folders)

    # ---- W3–W6: after a status change is published ----

    def note(self, run_id: str, sequence: int, change: SummaryChange | None, durable: bool) -> None:
        """Called after event `sequence` of `run_id` is published (under the run's
        append lock). A storage failure here leaves the summary lagging, never the
        append failed: the next listing, sweep or repair heals it (and it is logged and
        kept in `write_errors`). Anything else is a bug and is raised."""
        if self.tracker.note(run_id, sequence, change) and (durable or not self.waits_for_durable):
            self._write(run_id)

    def flush(self) -> None:
        """Write every summary waiting for its events to be durable (they now are)."""
        for run_id in self.tracker.pending_runs():
            self._write(run_id)

    def _write(self, run_id: str) -> None:
        c = self.tracker.pending(run_id)
        if c is None:
            return
        try:
            self._write_change(run_id, c)
        except OSError as e:
            self.tracker.forget(run_id)
            self._record(run_id, "after the event", e)
        except BaseException:
            self.tracker.forget(run_id)
            raise

    def _write_change(self, run_id: str, c: CachedSummary) -> None:
        summary = c.summary
        if summary is None:
            summary = self.fold_from_log(run_id, through=c.through, durable=True)
            if summary is None:
                self.tracker.forget(run_id)
                return
        stored = self.read_doc(run_id)
        marked = c.intended_for == c.through
        # The document is as this writer left it in W1: nobody wrote in between (W5).
        mine = marked and (stored is not None and stored.get("pending") == c.pending
                           if c.pending is not None else stored is None)
        result = self._commit(run_id, summary, stored, intended=c.intended if marked else frozenset(),
                              mine=mine)
        c.summary = summary
        if result is not None and sequence_of(result) == c.through:
            self.tracker.written(run_id, c, result)
        else:
            self.tracker.forget(run_id)  # moved on without this process: fold next time

    def _commit(self, run_id: str, summary: SummaryDoc, stored: SummaryDoc | None, *,
                intended: frozenset[str] = frozenset(), mine: bool = False,
                stale: Iterable[tuple[str, str]] = (), rewrite: bool = False,
                depth: int = 0) -> SummaryDoc | None:
        """W3–W6 for `summary` over the document `stored` (as just read): the document
        as it is afterwards. `intended`: folders given entries in W1; `mine`: `stored`
        is as this writer left it in W1; `stale`: entries to remove once the document is
        written; `rewrite`: write even a document at the same sequence (a repair)."""
        sequence = summary["sequence"]
        if stored is not None and (sequence_of(stored) > sequence
                                   or (sequence_of(stored) == sequence and not rewrite)):
            return stored  # as new already: a summary only moves forward
        key = order_key(created_us(summary), run_id)
        needed = {(f, key) for f in self.status_folders(summary) + self.run_folders(summary)}
        new_run = stored is None or order_key(created_us(stored), run_id) != key
        add = self.status_folders(summary) + (self.run_folders(summary) if new_run else [])
        for folder in add:
            if folder not in intended:
                self.add_entry(folder, key)
        doc: SummaryDoc = {**summary}
        later = pending_of(stored)
        if later is not None and later["sequence"] <= sequence:
            later = None
        if later is not None:
            doc["pending"] = later  # another writer's change on its way: its mark stays
        self._put_doc(run_id, doc)
        gone = list(stale)
        if stored is not None:
            old_key = order_key(created_us(stored), run_id)
            old_statuses: set[str | None] = {stored.get("status")}
            if later is None:  # its mark: a change that landed, or never will
                old_statuses |= mark_statuses(stored)
            gone += [(f, old_key) for status in old_statuses if isinstance(status, str)
                     for f in self.status_folders(stored, status)]
        for folder, entry_key in gone:
            if (folder, entry_key) not in needed:
                self.remove_entry(folder, entry_key)
        if not mine:
            for folder in add:
                self.add_entry(folder, key)
        return self._catch_up(run_id, doc, depth)

    def _catch_up(self, run_id: str, doc: SummaryDoc, depth: int) -> SummaryDoc:
        """W6: a status change after the written one may have lost its document to it."""
        later = self.store.read_after(run_id, doc["sequence"])
        if not later:
            return doc
        summary: SummaryDoc | None = without_pending(doc)
        status_changed = False
        for seq, data in later:
            env = json.loads(data)
            change = summary_change(env.get("type", ""), env.get("payload"), env.get("createdAt", ""))
            if change is not None:
                summary = apply_change(summary, run_id, seq, change)
                status_changed = status_changed or changes_status(change)
            elif summary is not None:
                summary["sequence"] = seq
            if summary is None:
                return doc
        if not status_changed or depth >= MAX_CATCH_UPS or summary is None:
            return doc
        self.make_durable(run_id)
        return self._commit(run_id, summary, self.read_doc(run_id), depth=depth + 1) or doc

    # ---- settling a run from its whole log ----

    def settle(self, run_id: str, stale: Iterable[tuple[str, str]] = ()) -> SummaryDoc | None:
        """Bring a run's summary (and entries) up to its whole log: what a reader does
        on meeting a cut (R1–R3), the worker's sweep on a finished run, a repair. The
        document as it is afterwards; None when the run has no log. A storage failure
        is logged and kept (`write_errors`): the document stays as it was."""
        try:
            summary = self.fold_from_log(run_id, durable=True)
            if summary is None:
                return None
            self.tracker.forget(run_id)
            return self._commit(run_id, summary, self.read_doc(run_id), stale=stale)
        except OSError as e:
            self._record(run_id, "settling it", e)
            return self.read_doc(run_id)

    def fold_from_log(self, run_id: str, through: int | None = None, *,
                      durable: bool = False) -> SummaryDoc | None:
        envelopes = []
        for seq, data in self.store.read_after(run_id, 0):
            if through is not None and seq > through:
                break
            envelopes.append(json.loads(data))
        if durable and envelopes:
            self.make_durable(run_id)  # after reading: every event read is durable now
        return fold_envelopes(run_id, envelopes)

    def make_durable(self, run_id: str) -> None:
        """Events another process published without syncing them yet (local disk) are
        made durable before a summary folds them: never a summary ahead of the log."""
        if self.waits_for_durable:
            self.publisher.make_durable(self.store.run_dir(run_id))

    # ---- primitives ----

    def _put_doc(self, run_id: str, doc: SummaryDoc) -> None:
        path = self.doc_path(run_id)
        self.publisher.ensure_dir(path.rsplit("/", 1)[0], durable=False)
        # Not durable: a power cut may take it back, with the events it follows.
        self.publisher.replace(path, summary_json(doc).encode(), durable=False)

    def read_doc(self, run_id: str) -> SummaryDoc | None:
        raw = self.publisher.read(self.doc_path(run_id))
        if raw is None:
            return None
        try:
            doc = json.loads(raw)
        except ValueError:
            return None  # torn by a crash on a store without atomic replace: re-fold
        if not isinstance(doc, dict) or doc.get("runId") != run_id or not isinstance(
                doc.get("status"), str) or not isinstance(doc.get("createdAt"), str):
            return None
        return cast(SummaryDoc, doc)  # its keys every summary has are checked above

    def add_entry(self, folder: str, key: str) -> None:
        path = f"{folder}/{entry_path(key)}"
        for attempt in range(3):
            # Not durable, as the entry: a power cut may take both back (a rebuild restores them).
            self.publisher.ensure_dir(path.rsplit("/", 1)[0], durable=False)
            try:
                self.publisher.publish_if_absent(path, b"", durable=False)
                return
            except FileNotFoundError:
                if attempt == 2:  # its bucket folder pruned under it again and again
                    raise

    def remove_entry(self, folder: str, key: str, *, durable: bool = False) -> None:
        """Remove an entry; on a store where folders stay, its emptied bucket folders
        too (else every later page would list them: by-status/running would fill with
        empty buckets). A writer adding to a folder removed under it makes it again."""
        p = self.publisher
        if not p.remove(f"{folder}/{entry_path(key)}", durable=durable) or not p.empty_folders_stay:
            return
        buckets = entry_path(key).split("/")[:-1]
        for depth in range(len(buckets), 0, -1):
            if not p.remove_dir("/".join((folder, *buckets[:depth])), durable=False):
                return

    def _record(self, run_id: str, when: str, error: BaseException) -> None:
        self.write_errors.append(error)
        log.warning("run %s: its catalogue summary was not written %s (%s: %s); the next "
                    "listing, sweep or `little verify --repair` brings it up to date",
                    run_id, when, type(error).__name__, error)

    # ---- reading a page ----

    def page(self, q: RunQuery, limit: int) -> list[SummaryDoc]:
        bounds = self._bounds(q)
        if bounds is None:
            return []
        start, stop = bounds
        folders: list[tuple[str, str | None]]
        if q.statuses is not None and q.workflow_id is not None:
            wf = workflow_folder(q.workflow_id)
            folders = [(self.path("by-workflow-status", wf, s), s) for s in q.statuses]
        elif q.statuses is not None:
            folders = [(self.path("by-status", s), s) for s in q.statuses]
        elif q.workflow_id is not None:
            folders = [(self.path("by-workflow", workflow_folder(q.workflow_id)), None)]
        elif q.parent_run_id is not None:
            folders = [(self.path("by-parent", q.parent_run_id), None)]
        else:
            folders = [(self.path("by-created"), None)]
        streams = [self._tagged(f, s, start, max(limit, 16)) for f, s in folders]
        merged = streams[0] if len(streams) == 1 else heapq.merge(*streams)
        out: list[SummaryDoc] = []
        for key, group in itertools.groupby(merged, key=lambda item: item[0]):
            if stop is not None and key[:16] > stop:
                break
            pos = key_position(key)
            if pos is None:
                continue
            doc = self._checked(pos[1], key, [(f, s) for _, f, s in group], q)
            if doc is None or not q.matches(doc) or order_key(created_us(doc), pos[1]) != key:
                continue  # a stale entry (status changed, run deleted): the document decides
            out.append(doc)
            if len(out) >= limit:
                break
        return out

    @staticmethod
    def _bounds(q: RunQuery) -> tuple[str, str | None] | None:
        """(start key, stop prefix) of a query on indexes whose keys hold createdAt from
        1970 to 2286; None when no run there can match."""
        start = ""
        if q.position is not None:
            at_us, at_run = q.position
            if at_us < 0:
                return None  # past the oldest key
            if at_us <= MAX_US:
                start = order_key(at_us, at_run)
        if q.before_us is not None:
            if q.before_us <= 0:
                return None
            if q.before_us <= MAX_US:
                start = max(start, order_key(q.before_us, "~"))  # past every key of that µs
        stop = None
        if q.after_us is not None and q.after_us > 0:
            if q.after_us > MAX_US:
                return None
            stop = f"{MAX_US - q.after_us:016d}"
        return start, stop

    def _tagged(self, folder: str, status: str | None, start: str,
                page: int) -> Iterator[tuple[str, str, str | None]]:
        for key in self._keys(folder, start, page):
            yield key, folder, status

    def _checked(self, run_id: str, key: str, met: list[tuple[str, str | None]],
                 q: RunQuery) -> SummaryDoc | None:
        """The document of a run an index named, after R1–R3."""
        doc = self.read_doc(run_id)
        if doc is None:  # R1
            if self.store.read_one(run_id, 1) is None:
                return None
            return self.settle(run_id)
        mark = pending_of(doc)
        if mark is not None and self.store.read_one(run_id, mark["sequence"]) is not None:
            return self.settle(run_id)  # R2
        if q.statuses is None or doc["status"] in q.statuses:
            return doc
        stale = [(folder, key) for folder, status in met if status is not None
                 and status != doc["status"] and (mark is None or mark.get("status") != status)]
        if not stale:
            return doc
        try:  # R3
            for folder, entry_key in stale:
                self.remove_entry(folder, entry_key)
            if self.store.read_one(run_id, sequence_of(doc) + 1) is not None:
                return self.settle(run_id)
        except OSError as e:
            self._record(run_id, "removing a stale entry", e)
        return doc

    def _keys(self, folder: str, start_after: str, page: int) -> Iterator[str]:
        """The keys of an index folder after `start_after`, in order: from a start key
        where the store lists that way (one request a page), else bucket by bucket."""
        start = entry_path(start_after) if start_after else ""
        while True:
            paths = self.publisher.list_page(folder, start, page)
            if paths is None:
                yield from self._walk(folder, start_after, 0)
                return
            for path in paths:
                key = path.rsplit("/", 1)[-1]
                if path == entry_path(key):  # not a stray object in the index's prefix
                    yield key
            if len(paths) < page:
                return
            start = paths[-1]
            page = min(page * 4, 1000)

    def _walk(self, folder: str, start_after: str, depth: int) -> Iterator[str]:
        """Keys under a bucket folder (`depth` levels down the index) after
        `start_after`, listing one folder at a time and only as far as the caller reads."""
        names = self.publisher.list_names(folder)
        if depth == len(BUCKETS):
            yield from names[bisect.bisect_right(names, start_after):] if start_after else names
            return
        lo, hi = BUCKETS[depth]
        bound = start_after[lo:hi]
        for name in names:
            if len(name) != hi - lo or not name.isdigit() or name < bound:
                continue  # not a bucket (a stray file), or wholly before the start
            yield from self._walk(f"{folder}/{name}", start_after if name == bound else "", depth + 1)

    def summary(self, run_id: str) -> SummaryDoc | None:
        return self.read_doc(run_id)

    def summarized_runs(self) -> list[str]:
        """Every run that has a summary document."""
        return sorted(n[:-5] for n in self.publisher.list_names(self.path("runs"))
                      if n.endswith(".json") and RUN_ID_RE.fullmatch(n[:-5]))

    # ---- checking and repairing the whole catalogue ----

    def every_entry(self) -> dict[str, list[tuple[str, str]]]:
        """Every index entry, by the run its key names: run id -> [(folder, key)].
        Names that are no entry are listed under "" (folder, name)."""
        out: dict[str, list[tuple[str, str]]] = {}
        for folder in self._index_folders():
            for key in self._keys(folder, "", 1000):
                pos = key_position(key)
                out.setdefault(pos[1] if pos is not None else "", []).append((folder, key))
        return out

    def _index_folders(self) -> Iterator[str]:
        p = self.publisher
        yield self.path("by-created")
        for status in p.list_names(self.path("by-status")):
            yield self.path("by-status", status)
        for wf in p.list_names(self.path("by-workflow")):
            yield self.path("by-workflow", wf)
        for wf in p.list_names(self.path("by-workflow-status")):
            for status in p.list_names(self.path("by-workflow-status", wf)):
                yield self.path("by-workflow-status", wf, status)
        for parent in p.list_names(self.path("by-parent")):
            yield self.path("by-parent", parent)

    def entry_problems(self, docs: dict[str, SummaryDoc], now: float) -> list[str]:
        """What is wrong with the indexes, given every summary document (`docs`): an
        entry a document does not need (or that names no run, once past the grace for
        creations on their way), an entry a document needs and that is missing."""
        problems = []
        entries = self.every_entry()
        for run_id, found in sorted(entries.items()):
            doc = docs.get(run_id)
            needed = self.needed_entries(doc) | self.marked_entries(doc, now) \
                if doc is not None else set()
            for folder, key in found:
                where = folder[len(self.path()) + 1:]
                if not run_id:
                    problems.append(f"{where}/{key}: not an index entry")
                elif doc is None:
                    if _older_than_grace(key, now):
                        problems.append(f"{run_id}: entry in {where} names no summary")
                elif (folder, key) not in needed:
                    problems.append(f"{run_id}: entry in {where}, but the run is "
                                    f"{doc['status']} (created {doc['createdAt']})")
        for run_id, doc in sorted(docs.items()):
            if pending_of(doc) is not None and not young_mark(doc, now):
                problems.append(f"{run_id}: a change marked at {doc['pending'].get('at')} "
                                "never reached the log (a cut before its event)")
            have = set(entries.get(run_id, []))
            for folder, _ in sorted(self.needed_entries(doc) - have):
                problems.append(f"{run_id}: no entry in {folder[len(self.path()) + 1:]} "
                                f"(the run is {doc['status']})")
        return problems

    def rebuild(self, run_ids: list[str] | None = None, *,
                progress: Callable[[int], None] | None = None, every_run: list[str] | None = None,
                now: float | None = None) -> int:
        """Re-fold runs (all: None) from their logs and make their documents and entries
        agree, without stopping writers: each run is settled (W3–W6, so a writer racing
        this one loses nothing), entries it does not need are removed after its document
        is written, summaries whose log is gone are removed, and entries naming no run
        once past `ORPHAN_GRACE_SECONDS`. A catalogue that agrees is not written to.
        The number of runs folded."""
        now = time.time() if now is None else now
        entries = self.every_entry()
        if run_ids is None:
            logged = every_run if every_run is not None else self.logged_runs()
            run_ids = sorted(set(logged) | set(self.summarized_runs())
                             | {r for r in entries if r})
            if progress is None:
                progress = progress_printer(len(run_ids))
        done = 0
        for run_id in run_ids:
            self._repair(run_id, entries.get(run_id, []), now)
            done += 1
            if progress is not None:
                progress(done)
        self.publisher.sync()
        return done

    def _repair(self, run_id: str, found: list[tuple[str, str]], now: float) -> None:
        self.tracker.forget(run_id)
        summary = self.fold_from_log(run_id, durable=True)
        stored = self.read_doc(run_id)
        if summary is None:
            if stored is not None and self.store.read_one(run_id, 1) is None:
                self.forget(run_id)  # a ghost: its log is gone
            if self.read_doc(run_id) is None:
                for folder, key in found:
                    if _older_than_grace(key, now):
                        self.remove_entry(folder, key)
            return
        needed = self.needed_entries(summary)
        kept = needed | (self.marked_entries(stored, now) if stored is not None else set())
        stale = [e for e in found if e not in kept]
        missing = needed - set(found)
        abandoned = stored is not None and pending_of(stored) is not None \
            and not young_mark(stored, now)
        if stored is not None and not summary_lags(stored, summary) and not stale \
                and not missing and not abandoned:
            return
        if abandoned and stored is not None:
            # Its change never reached the log: the mark goes, and its entries with it.
            stored = {**stored, "pending": {**stored["pending"], "sequence": 0}}
        # Written even when the same (`rewrite`): a writer racing this repair then sees
        # a document it did not mark and adds its entries again (W5).
        self._commit(run_id, summary, stored, stale=stale, rewrite=True)

    def logged_runs(self) -> list[str]:
        return [n for n in self.publisher.list_names(f"{self.root}/events") if RUN_ID_RE.fullmatch(n)]

    def forget(self, run_id: str) -> None:
        """Remove a run's document and entries (gc, a ghost): entries first, the
        document last, so that a crash leaves a document to find them by."""
        self.tracker.forget(run_id)
        doc = self.read_doc(run_id)
        if doc is not None:
            key = order_key(created_us(doc), run_id)
            folders = self.run_folders(doc)
            for status in STATUSES:
                folders += self.status_folders(doc, status)
            for folder in folders:
                self.remove_entry(folder, key, durable=True)
        self.publisher.remove(self.doc_path(run_id))

    def ensure_built(self) -> None:
        """A World written before the catalogue (or this layout of it) gets one on first open."""
        if self.publisher.read(self.path("built.json")) == MARKER_DOC:
            return
        runs = self.logged_runs()
        if runs:
            self.rebuild(every_run=runs)
        marker = self.path("built.json")
        self.publisher.ensure_dir(marker.rsplit("/", 1)[0])
        self.publisher.replace(marker, MARKER_DOC)


def _older_than_grace(key: str, now: float) -> bool:
    pos = key_position(key)
    return pos is not None and pos[0] / 1e6 < now - ORPHAN_GRACE_SECONDS
