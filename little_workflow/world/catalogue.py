"""The run catalogue (DESIGN §14): one summary per run, kept as events are appended, so
that a page of runs costs O(limit), not O(runs).

- The summary is derived **once**, here: `summary_change` says what one event changes
  (most events change nothing) and `apply_change` folds that into a summary. Every backend
  keeps the same summary document.
- local_world keeps it in the `runs` table of events.db, written in the same transaction
  as the event that changes it (`SqliteCatalogue`, called by `SqliteEventStore`).
- File and object-store Worlds keep `catalogue/runs/<runId>.json` plus key indexes whose
  names sort newest first (`FileCatalogue`); a listing reads one page of keys
  (`Publisher.list_page`) and then the summaries it names.
- The log stays the truth: a summary is written only after its event is published, so it
  may lag (a crash in between) but never shows a status the log does not have. A lagging
  summary is re-folded from the log by the next status change of that run, by
  `little verify --repair` (`rebuild`), and a World made before the catalogue existed
  gets one built when it is first opened.
"""

from __future__ import annotations

import base64
import bisect
import json
import sys
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Iterator

from ..errors import CatalogueQueryError
from .ids import RUN_ID_RE, sha256_hex
from .publish import Publisher

#: "unknown" is a run whose log has no lifecycle (no `run.created`): one that only holds
#: data, e.g. a LangGraph thread (`OWNER_EVENTS`), as `materialize_run_state` says too.
STATUSES = ("created", "running", "waiting", "completed", "failed", "cancelled", "unknown")
TERMINAL = {"run.completed": "completed", "run.failed": "failed", "run.cancelled": "cancelled"}
FINISHED_STATUSES = frozenset(TERMINAL.values())
#: The first event of a run that holds an integration's data and never runs (workers and
#: gc leave it alone): its type → the workflow id the catalogue lists it under.
OWNER_EVENTS = {"langgraph.thread": "langgraph"}
#: Worlds larger than this report progress while their catalogue is built.
PROGRESS_FROM = 1000
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: Order keys hold `MAX_US - createdAt in µs`, so names sort newest first (until 2286).
MAX_US = 10**16 - 1


# --- what a caller gets --------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RunSummary:
    """One run as the catalogue knows it (`lw.list_runs`). `steps` counts the steps the
    run started, as of its last status change (a running run's count catches up at its
    next one); `updated_at` is the time of that change; `waiting` what a waiting run
    waits for (`kind`, `stepPath`, `wakeAt` or `name`/`deadline`); `error` a failed or
    cancelled run's error record; `needs_version` the version a refused resume asked for
    (the run's pinned version, DESIGN §15), None once the run executes again."""

    run_id: str
    workflow_id: str | None
    status: str
    created_at: datetime
    updated_at: datetime
    steps: int
    waiting: dict[str, Any] | None
    error: dict[str, Any] | None
    parent_run_id: str | None
    needs_version: str | None = None

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> "RunSummary":
        return cls(run_id=doc["runId"], workflow_id=doc.get("workflowId"), status=doc["status"],
                   created_at=parse_time(doc["createdAt"]), updated_at=parse_time(doc["updatedAt"]),
                   steps=int(doc.get("steps") or 0), waiting=doc.get("waiting"),
                   error=doc.get("error"), parent_run_id=doc.get("parentRunId"),
                   needs_version=doc.get("needsVersion"))

    def to_json_dict(self) -> dict[str, Any]:
        return {"runId": self.run_id, "workflowId": self.workflow_id, "status": self.status,
                "createdAt": iso(self.created_at), "updatedAt": iso(self.updated_at),
                "steps": self.steps, "waiting": self.waiting, "error": self.error,
                "parentRunId": self.parent_run_id, "needsVersion": self.needs_version}


@dataclass(frozen=True, slots=True)
class RunPage:
    runs: list[RunSummary]
    #: Pass as `cursor=` for the next page; None when this page is the last.
    next_cursor: str | None


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def iso(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


def micros(moment: datetime) -> int:
    return (moment - _EPOCH) // _ONE_US


_ONE_US = datetime.resolution


def created_us(doc: dict[str, Any]) -> int:
    return micros(parse_time(doc["createdAt"]))


# --- the fold, written once -------------------------------------------------------------------

def summary_change(type_: str, payload: Any, created_at: str) -> tuple | None:
    """What an event changes in its run's summary, or None (most events). Pure: a tuple
    `(kind, created_at, ...)` that `apply_change` folds in."""
    kind = _CHANGES.get(type_)
    if kind is None:
        return None
    p = payload if isinstance(payload, dict) else {}
    if kind == "step":
        return ("step", created_at) if p.get("attempt", 1) == 1 else None
    if kind == "created":
        return ("created", created_at, p.get("workflowId"), p.get("parentRunId"))
    if kind == "owner":
        return ("owner", created_at, OWNER_EVENTS[type_])
    if kind == "started":
        return ("started", created_at)
    if kind == "refused":
        version = p.get("version")
        return ("refused", created_at, version if isinstance(version, str) else None)
    if kind == "end":
        status = TERMINAL[type_]
        error = p.get("error")
        if status == "cancelled" and error is None:
            error = {"type": "RunCancelledError", "reason": p.get("reason")}
        return ("end", created_at, status, _plain(error))
    path = p.get("stepPath")
    if not isinstance(path, str):
        return None
    if type_ == "timer.scheduled":
        return ("open", created_at, path, {"kind": "sleep", "stepPath": path, "wakeAt": p.get("wakeAt")})
    if type_ == "wait.started":
        return ("open", created_at, path, {"kind": "event", "stepPath": path, "name": p.get("name"),
                                           "deadline": p.get("deadline")})
    return ("close", created_at, path)


_CHANGES = {"run.created": "created", "run.started": "started", "run.resume_refused": "refused",
            "run.completed": "end",
            "run.failed": "end", "run.cancelled": "end", "step.started": "step",
            "timer.scheduled": "wait", "wait.started": "wait", "timer.fired": "wait",
            "wait.completed": "wait", **{t: "owner" for t in OWNER_EVENTS}}


def changes_status(change: tuple) -> bool:
    """False only for a step count: file Worlds write those with the next status change."""
    return change[0] != "step"


def _plain(value: Any) -> Any:
    """Frozen payload values as plain JSON."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def apply_change(summary: dict[str, Any] | None, run_id: str, sequence: int,
                 change: tuple) -> dict[str, Any] | None:
    """The summary after one change (a new dict). A run whose `run.created` was not seen
    has no summary (None) until it is re-folded from its whole log."""
    kind, at = change[0], change[1]
    if kind == "created":
        s: dict[str, Any] = {"runId": run_id, "workflowId": change[2], "status": "created",
                             "createdAt": at, "updatedAt": at, "steps": 0, "waiting": None,
                             "error": None, "parentRunId": change[3], "openWaits": {},
                             "sequence": sequence}
        return s
    if kind == "owner":
        if summary is not None:
            return summary  # a run with a lifecycle keeps it
        return {"runId": run_id, "workflowId": change[2], "status": "unknown", "createdAt": at,
                "updatedAt": at, "steps": 0, "waiting": None, "error": None,
                "parentRunId": None, "openWaits": {}, "sequence": sequence}
    if summary is None:
        return None
    s = dict(summary, updatedAt=at, sequence=sequence)
    status = s["status"]
    if kind == "step":
        s["steps"] = int(s.get("steps") or 0) + 1
        return s
    if kind == "end":
        s["status"], s["error"], s["waiting"] = change[2], change[3], None
        return s
    if kind == "refused":
        s["needsVersion"] = change[2]
        return s
    if kind == "started":
        s.pop("needsVersion", None)
    waits = dict(s.get("openWaits") or {})
    if kind == "open":
        waits[change[2]] = change[3]
    elif kind == "close":
        waits.pop(change[2], None)
    s["openWaits"] = waits
    if kind == "started" or status in ("running", "waiting"):
        if status not in FINISHED_STATUSES:
            s["status"] = "waiting" if waits else "running"
    s["waiting"] = dict(next(iter(waits.values()))) if s["status"] == "waiting" and waits else None
    return s


def fold_envelopes(run_id: str, envelopes: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """A run's summary from its whole log (envelopes in sequence order)."""
    summary = None
    for env in envelopes:
        change = summary_change(env.get("type", ""), env.get("payload"), env.get("createdAt", ""))
        if change is not None:
            summary = apply_change(summary, run_id, int(env["sequence"]), change)
        elif summary is not None:
            summary["sequence"] = int(env["sequence"])
    return summary


def summary_json(summary: dict[str, Any]) -> str:
    return json.dumps(summary, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# --- a query: arguments checked once, cursors ----------------------------------------------

@dataclass(frozen=True)
class RunQuery:
    statuses: tuple[str, ...] | None
    workflow_id: str | None
    parent_run_id: str | None
    after_us: int | None  # created_at >= this
    before_us: int | None  # created_at < this
    limit: int
    #: (created µs, run id) of the last run of the previous page
    position: tuple[int, str] | None

    def matches(self, doc: dict[str, Any]) -> bool:
        if self.statuses is not None and doc.get("status") not in self.statuses:
            return False
        if self.workflow_id is not None and doc.get("workflowId") != self.workflow_id:
            return False
        if self.parent_run_id is not None and doc.get("parentRunId") != self.parent_run_id:
            return False
        us = created_us(doc)
        if self.after_us is not None and us < self.after_us:
            return False
        if self.before_us is not None and us >= self.before_us:
            return False
        if self.position is not None and order_key(us, doc["runId"]) <= order_key(*self.position):
            return False
        return True


def order_key(us: int, run_id: str) -> str:
    """A name that sorts newest first, ties by run id."""
    return f"{MAX_US - us:016d}_{run_id}"


def key_position(key: str) -> tuple[int, str] | None:
    head, _, run_id = key.partition("_")
    if len(head) != 16 or not head.isdigit() or not RUN_ID_RE.fullmatch(run_id):
        return None
    return MAX_US - int(head), run_id


def encode_cursor(us: int, run_id: str) -> str:
    raw = json.dumps([1, us, run_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        version, us, run_id = json.loads(raw)
        if version != 1 or type(us) is not int or not RUN_ID_RE.fullmatch(run_id):
            raise ValueError
        return us, run_id
    except (ValueError, TypeError, UnicodeDecodeError):
        raise CatalogueQueryError(
            "cursor", f"{cursor!r} is not a cursor list_runs handed out (pass next_cursor as it is)"
        ) from None


def _moment(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise CatalogueQueryError(name, f"expected an aware datetime, got {type(value).__name__}")
    if value.tzinfo is None:
        raise CatalogueQueryError(name, "the datetime has no timezone (use tzinfo=timezone.utc)")
    return micros(value)


def build_query(*, status: Any, workflow_id: Any, created_after: Any, created_before: Any,
                parent_run_id: Any, limit: Any, cursor: Any) -> RunQuery:
    statuses: tuple[str, ...] | None = None
    if status is not None:
        items = (status,) if isinstance(status, str) else tuple(status)
        for s in items:
            if s not in STATUSES:
                raise CatalogueQueryError("status", f"unknown status {s!r}; one of {', '.join(STATUSES)}")
        if not items:
            raise CatalogueQueryError("status", "an empty list matches nothing; pass None for all")
        statuses = tuple(sorted(set(items)))
    if type(limit) is not int or limit < 1:
        raise CatalogueQueryError("limit", f"must be an integer of at least 1, not {limit!r}")
    for name, value in (("workflow_id", workflow_id), ("parent_run_id", parent_run_id)):
        if value is not None and not isinstance(value, str):
            raise CatalogueQueryError(name, f"expected a string, got {type(value).__name__}")
    if cursor is not None and not isinstance(cursor, str):
        raise CatalogueQueryError("cursor", f"expected the string next_cursor, got {type(cursor).__name__}")
    return RunQuery(statuses=statuses, workflow_id=workflow_id, parent_run_id=parent_run_id,
                    after_us=_moment("created_after", created_after),
                    before_us=_moment("created_before", created_before), limit=limit,
                    position=decode_cursor(cursor) if cursor else None)


def list_runs(world: Any, *, status: str | Iterable[str] | None = None,
              workflow_id: str | None = None, created_after: datetime | None = None,
              created_before: datetime | None = None, parent_run_id: str | None = None,
              limit: int = 50, cursor: str | None = None) -> RunPage:
    """A page of runs from the World's catalogue, newest first by `created_at` (ties by
    run id), filters combined with AND: `status` one value or a list, `workflow_id`,
    `created_after` (inclusive) and `created_before` (exclusive) as aware datetimes,
    `parent_run_id` (sub-runs of a pipeline). `next_cursor` gives the next page; a page
    is consistent with the runs that existed when the first page was read plus any
    created since. Costs O(limit), not O(runs). Bad arguments raise
    `lw.CatalogueQueryError` naming the argument."""
    query = build_query(status=status, workflow_id=workflow_id, created_after=created_after,
                        created_before=created_before, parent_run_id=parent_run_id,
                        limit=limit, cursor=cursor)
    catalogue = getattr(world, "catalogue", None)
    if catalogue is None:
        raise TypeError(f"{world!r} is not a World with a run catalogue")
    docs = catalogue.page(query, query.limit + 1)
    more = len(docs) > query.limit
    docs = docs[: query.limit]
    runs = [RunSummary.from_doc(d) for d in docs]
    last = docs[-1] if docs and more else None
    return RunPage(runs=runs, next_cursor=encode_cursor(created_us(last), last["runId"]) if last else None)


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


# --- local_world: the `runs` table in events.db ----------------------------------------------

class SqliteCatalogue:
    """The summary rows, in the same SQLite database (and transaction) as the events.
    Every method takes the store's connection, used under the store's lock."""

    SCHEMA = (
        "CREATE TABLE IF NOT EXISTS runs ("
        " run_id TEXT PRIMARY KEY, status TEXT NOT NULL, workflow_id TEXT,"
        " created_us INTEGER NOT NULL, parent_run_id TEXT, doc TEXT NOT NULL) WITHOUT ROWID",
        "CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status, created_us DESC, run_id)",
        "CREATE INDEX IF NOT EXISTS runs_by_workflow ON runs (workflow_id, created_us DESC, run_id)",
        "CREATE INDEX IF NOT EXISTS runs_by_created ON runs (created_us DESC, run_id)",
        "CREATE INDEX IF NOT EXISTS runs_by_parent ON runs (parent_run_id, created_us DESC, run_id)"
        " WHERE parent_run_id IS NOT NULL",
        "CREATE TABLE IF NOT EXISTS catalogue_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    )

    @classmethod
    def create_schema(cls, conn: Any) -> bool:
        """Create the tables; True when the World's runs still need their summaries
        (a World written before the catalogue existed)."""
        for statement in cls.SCHEMA:
            conn.execute(statement)
        built = conn.execute("SELECT 1 FROM catalogue_meta WHERE name = 'built'").fetchone()
        if built is not None:
            return False
        if conn.execute("SELECT 1 FROM events LIMIT 1").fetchone() is None:
            conn.execute("INSERT OR IGNORE INTO catalogue_meta VALUES ('built', '1')")
            return False
        return True

    @staticmethod
    def needs_build(conn: Any) -> bool:
        """`create_schema`'s answer without writing (a World opened read-only)."""
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                        "name = 'catalogue_meta'").fetchone() is not None and conn.execute(
                "SELECT 1 FROM catalogue_meta WHERE name = 'built'").fetchone() is not None:
            return False
        return conn.execute("SELECT 1 FROM events LIMIT 1").fetchone() is not None

    @staticmethod
    def write_pending(conn: Any, tracker: "SummaryTracker", run_ids: Iterable[str]) -> None:
        """Inside the transaction that inserted the events: write the summaries of runs
        whose status changed — one read and one write per run."""
        for run_id in run_ids:
            c = tracker.pending(run_id)
            if c is None:
                continue
            row = conn.execute("SELECT doc FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            old = json.loads(row[0]) if row is not None else None
            summary, old = tracker.resolve(
                run_id, c, old, lambda: SqliteCatalogue.fold_run(conn, run_id, c.through))
            if summary is None:
                continue
            if old is not None and old.get("createdAt") == summary["createdAt"] \
                    and old.get("workflowId") == summary.get("workflowId") \
                    and old.get("parentRunId") == summary.get("parentRunId"):
                # Only status and document change: the other indexes stay untouched.
                conn.execute("UPDATE runs SET status = ?, doc = ? WHERE run_id = ?",
                             (summary["status"], summary_json(summary), run_id))
            else:
                SqliteCatalogue.put(conn, summary)
            tracker.written(run_id, c)

    @staticmethod
    def put(conn: Any, summary: dict[str, Any]) -> None:
        conn.execute(
            "INSERT INTO runs (run_id, status, workflow_id, created_us, parent_run_id, doc)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET"
            " status = excluded.status, workflow_id = excluded.workflow_id,"
            " created_us = excluded.created_us, parent_run_id = excluded.parent_run_id,"
            " doc = excluded.doc",
            (summary["runId"], summary["status"], summary.get("workflowId"), created_us(summary),
             summary.get("parentRunId"), summary_json(summary)))

    @staticmethod
    def fold_run(conn: Any, run_id: str, through: int | None = None) -> dict[str, Any] | None:
        rows = conn.execute("SELECT envelope FROM events WHERE run_id = ? AND sequence <= ?"
                            " ORDER BY sequence", (run_id, through if through is not None else 2**62))
        return fold_envelopes(run_id, (json.loads(r[0]) for r in rows))

    @staticmethod
    def page(conn: Any, q: RunQuery, limit: int) -> list[dict[str, Any]]:
        where, args = [], []
        if q.statuses is not None:
            where.append(f"status IN ({','.join('?' * len(q.statuses))})")
            args.extend(q.statuses)
        if q.workflow_id is not None:
            where.append("workflow_id = ?")
            args.append(q.workflow_id)
        if q.parent_run_id is not None:
            where.append("parent_run_id = ?")
            args.append(q.parent_run_id)
        if q.after_us is not None:
            where.append("created_us >= ?")
            args.append(q.after_us)
        if q.before_us is not None:
            where.append("created_us < ?")
            args.append(q.before_us)
        if q.position is not None:
            # `created_us <= ?` is the range the index serves; the OR breaks the tie.
            where.append("created_us <= ? AND (created_us < ? OR run_id > ?)")
            args.extend((q.position[0], q.position[0], q.position[1]))
        sql = ("SELECT doc FROM runs" + (" WHERE " + " AND ".join(where) if where else "")
               + " ORDER BY created_us DESC, run_id LIMIT ?")
        args.append(limit)
        return [json.loads(r[0]) for r in conn.execute(sql, args)]

    @staticmethod
    def summary(conn: Any, run_id: str) -> dict[str, Any] | None:
        row = conn.execute("SELECT doc FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return json.loads(row[0]) if row is not None else None

    @staticmethod
    def rebuild(conn: Any, run_ids: list[str] | None,
                progress: Callable[[int], None] | None = None) -> int:
        """Re-fold runs (all of them: None) from their logs inside one transaction;
        summaries of runs that have no log any more are dropped. The number folded."""
        if run_ids is None:
            run_ids = [r[0] for r in conn.execute("SELECT DISTINCT run_id FROM events")]
            conn.execute("DELETE FROM runs WHERE run_id NOT IN (SELECT DISTINCT run_id FROM events)")
        done = 0
        for run_id in run_ids:
            summary = SqliteCatalogue.fold_run(conn, run_id)
            if summary is None:
                conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
            else:
                SqliteCatalogue.put(conn, summary)
            done += 1
            if progress is not None:
                progress(done)
        conn.execute("INSERT OR REPLACE INTO catalogue_meta VALUES ('built', '1')")
        return done

    @staticmethod
    def forget(conn: Any, run_id: str) -> None:
        conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))


class StoreCatalogue:
    """`world.catalogue` of a local_world: the SqliteCatalogue over its store's connection."""

    def __init__(self, store: Any):
        self.store = store

    def page(self, q: RunQuery, limit: int) -> list[dict[str, Any]]:
        return self.store.query(lambda conn: SqliteCatalogue.page(conn, q, limit))

    def summary(self, run_id: str) -> dict[str, Any] | None:
        return self.store.query(lambda conn: SqliteCatalogue.summary(conn, run_id))

    def rebuild(self, run_ids: list[str] | None = None, *,
                progress: Callable[[int], None] | None = None) -> int:
        if run_ids is None and progress is None:
            total = self.store.query(
                lambda conn: conn.execute("SELECT COUNT(DISTINCT run_id) FROM events").fetchone()[0])
            progress = progress_printer(total)
        return self.store.transaction(lambda conn: SqliteCatalogue.rebuild(conn, run_ids, progress))

    def forget(self, run_id: str) -> None:
        self.store.summaries.forget(run_id)
        self.store.transaction(lambda conn: SqliteCatalogue.forget(conn, run_id))

    def ensure_built(self) -> None:
        if self.store.catalogue_needs_build:
            self.rebuild()
            self.store.catalogue_needs_build = False


# --- file and object-store Worlds: summary documents and key indexes ----------------------------

CATALOGUE_DIR = "catalogue"
MARKER = f"{CATALOGUE_DIR}/built.json"
#: The marker's content: a World whose marker differs (none, or an older layout) is built.
MARKER_DOC = b'{"version": 2}'
#: The folders above an index entry, as digit ranges of its order key: buckets of
#: ~11.6 days, ~16.7 minutes and 1 second of created_at, named so that every level sorts
#: newest first. Where a store cannot list from a key, a page lists the newest folders
#: one at a time until it has its runs — it reads O(limit + a bucket), not the index.
BUCKETS = ((0, 4), (4, 7), (7, 10))
#: In-memory summaries kept per World storage (runs in flight), at most this many.
CACHE_LIMIT = 4096


@dataclass
class _Cached:
    summary: dict[str, Any] | None  # None: not known here; folded from the log when written
    written: int | None  # `sequence` of the summary this process last wrote (or saw)
    through: int  # every event up to this one is folded into `summary`
    dirty: bool = False  # a status change not written yet


class SummaryTracker:
    """What this process has folded of each run since it last wrote the run's summary,
    so that an event that changes only the step count costs no storage write (it rides
    with the next status change) and a status change costs one write, no log read.

    Events this process did not see (another process appended, or this one started
    after them) show as a gap in `through`: the next write then folds the run's log
    instead — the log stays the truth. Bounded: an entry dropped costs one fold later."""

    def __init__(self) -> None:
        self._runs: dict[str, _Cached] = {}
        self._lock = threading.Lock()

    def note(self, run_id: str, sequence: int, change: tuple | None) -> bool:
        """Fold one published event in; True when a status change waits to be written."""
        c = self._runs.get(run_id)
        if c is None or c.through != sequence - 1:
            if change is None or not changes_status(change):
                return False  # a later status change folds what was not seen here
            fresh = change[0] == "created" and sequence == 1
            c = _Cached(apply_change(None, run_id, sequence, change) if fresh else None,
                        None, sequence, True)
            with self._lock:
                self._runs.pop(run_id, None)
                if len(self._runs) >= CACHE_LIMIT:
                    self._runs.pop(next(iter(self._runs)))
                self._runs[run_id] = c
            return True
        c.through = sequence
        if change is not None:
            if c.summary is not None:
                c.summary = apply_change(c.summary, run_id, sequence, change)
            if changes_status(change):
                c.dirty = True
        return c.dirty

    def pending(self, run_id: str) -> _Cached | None:
        c = self._runs.get(run_id)
        return c if c is not None and c.dirty else None

    def pending_runs(self) -> list[str]:
        return [run_id for run_id, c in list(self._runs.items()) if c.dirty]

    def resolve(self, run_id: str, c: _Cached, old: dict[str, Any] | None,
                fold_log: Callable[[], dict[str, Any] | None]
                ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The summary to write, given the stored one (`old`), and the stored one its
        index entries follow (None: rewrite them all)."""
        if c.summary is None or (old.get("sequence") if old is not None else None) != c.written:
            c.summary = fold_log()  # lagging, or written by another process: the log decides
            old = None
        if c.summary is None:
            self.forget(run_id)
        return c.summary, old

    def written(self, run_id: str, c: _Cached) -> None:
        assert c.summary is not None
        c.written, c.dirty = c.summary["sequence"], False
        if c.summary["status"] in FINISHED_STATUSES:
            self.forget(run_id)

    def forget(self, run_id: str) -> None:
        with self._lock:
            self._runs.pop(run_id, None)


class FileCatalogue:
    """Layout under the data dir (names only; everything is small JSON or empty):

    catalogue/runs/<runId>.json                       the summary document (the truth
                                                      of the catalogue, after the log)
    catalogue/by-created/<entry>                      every run
    catalogue/by-status/<status>/<entry>              runs with that status (readers
                                                      check the document: a crash may
                                                      leave an entry under the old one)
    catalogue/by-workflow/<sha256(workflowId)[:24]>/<entry>
    catalogue/by-parent/<parentRunId>/<entry>
    catalogue/built.json                              written once every run has one

    `<entry>` = `entry_path(key)`: `dddd/ddd/ddd/<key>`, the key's first ten digits as
    bucket folders (`BUCKETS`); `<key>` = `order_key`: 16 digits of (10¹⁶−1 − createdAt
    in µs), `_`, the run id — so names sort newest first at every level and the entry
    paths of a whole index sort as their keys do. An object store lists a page of an
    index from a start key at any depth (one request); elsewhere a page lists the
    newest bucket folders one at a time (`_walk`), and emptied bucket folders are
    removed with their last entry. Index entries are written after the document, and a
    status entry is removed only after the new one is written.

    When a summary is written: after a status change's event is published — on a
    backend with real durability (local disk) only once the run's log up to it is
    durable (its next durable append, or `sync()`), so that a power cut can take back a
    summary with its events but never leave one ahead of them. Step counts ride along
    with the next status change."""

    def __init__(self, publisher: Any, root: str, read_log: Callable[[str, int], list[tuple[int, bytes]]]):
        self.publisher = publisher
        self.root = root
        self.read_log = read_log
        self.tracker = SummaryTracker()
        # A publisher with its own sync() has writes a power cut can take back.
        self.waits_for_durable = type(publisher).sync is not Publisher.sync

    def path(self, *parts: str) -> str:
        return "/".join((self.root, CATALOGUE_DIR, *parts))

    def doc_path(self, run_id: str) -> str:
        return self.path("runs", f"{run_id}.json")

    # ---- writing, after each published event ----

    def note(self, run_id: str, sequence: int, change: tuple | None, durable: bool) -> None:
        """Called after event `sequence` of `run_id` is published (under the run's
        append lock). A failure here leaves the summary lagging, never the append
        failed: the next status change or a rebuild re-folds it from the log."""
        if self.tracker.note(run_id, sequence, change) and (durable or not self.waits_for_durable):
            self._write(run_id)

    def _write(self, run_id: str) -> None:
        c = self.tracker.pending(run_id)
        if c is None:
            return
        try:
            summary, old = self.tracker.resolve(run_id, c, self.read_doc(run_id),
                                                lambda: self.fold_from_log(run_id, c.through))
            if summary is not None:
                self.put(summary, old)
                self.tracker.written(run_id, c)
        except Exception:
            self.tracker.forget(run_id)  # re-fold from the log next time

    def flush(self) -> None:
        """Write every summary waiting for its events to be durable (they now are)."""
        for run_id in self.tracker.pending_runs():
            self._write(run_id)

    def fold_from_log(self, run_id: str, through: int | None = None) -> dict[str, Any] | None:
        envelopes = []
        for seq, data in self.read_log(run_id, 0):
            if through is not None and seq > through:
                break
            envelopes.append(json.loads(data))
        return fold_envelopes(run_id, envelopes)

    def put(self, summary: dict[str, Any], old: dict[str, Any] | None, *,
            first_build: bool = False) -> None:
        """Write the document, then the index entries it needs; then drop the status
        entry it no longer has. Index entries are not synced: one lost to a power cut
        is restored by the next status change or a rebuild."""
        run_id = summary["runId"]
        key = order_key(created_us(summary), run_id)
        p = self.publisher
        doc_path = self.doc_path(run_id)
        p.ensure_dir(doc_path.rsplit("/", 1)[0])
        p.replace(doc_path, summary_json(summary).encode(), durable=False)
        folders = [self.path("by-status", summary["status"])]
        for folder in folders + (self.run_folders(summary) if old is None else []):
            self.add_entry(folder, key)
        if old is not None and old.get("status") != summary["status"]:
            self.remove_entry(self.path("by-status", old["status"]), key)
        elif old is None and not first_build and summary["status"] != "created":
            # A rewrite after a lag: no entry under another status. (A run still at
            # "created" never had another status: a new run costs no blind removes.)
            for status in STATUSES:
                if status != summary["status"]:
                    self.remove_entry(self.path("by-status", status), key)

    def run_folders(self, summary: dict[str, Any]) -> list[str]:
        """The index folders naming a run whatever its status."""
        folders = [self.path("by-created")]
        if summary.get("workflowId") is not None:
            folders.append(self.path("by-workflow", workflow_folder(summary["workflowId"])))
        if summary.get("parentRunId"):
            folders.append(self.path("by-parent", summary["parentRunId"]))
        return folders

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

    def read_doc(self, run_id: str) -> dict[str, Any] | None:
        raw = self.publisher.read(self.doc_path(run_id))
        if raw is None:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return None  # torn by a crash on a store without atomic replace: re-fold

    # ---- reading a page ----

    def page(self, q: RunQuery, limit: int) -> list[dict[str, Any]]:
        start = order_key(*q.position) if q.position is not None else ""
        if q.before_us is not None:
            start = max(start, order_key(q.before_us, "~"))  # past every key of that µs
        stop = f"{MAX_US - q.after_us:016d}" if q.after_us is not None else None
        if q.statuses is not None:
            folders = [self.path("by-status", s) for s in q.statuses]
        elif q.workflow_id is not None:
            folders = [self.path("by-workflow", workflow_folder(q.workflow_id))]
        elif q.parent_run_id is not None:
            folders = [self.path("by-parent", q.parent_run_id)]
        else:
            folders = [self.path("by-created")]
        out: list[dict[str, Any]] = []
        seen: set[str] = set()
        for key in _merged(*(self._keys(f, start, max(limit, 16)) for f in folders)):
            if stop is not None and key[:16] > stop:
                break
            pos = key_position(key)
            if pos is None or pos[1] in seen:
                continue
            seen.add(pos[1])
            doc = self.read_doc(pos[1])
            if doc is None or not q.matches(doc) or order_key(created_us(doc), pos[1]) != key:
                continue  # a stale entry (status changed, run deleted): the document decides
            out.append(doc)
            if len(out) >= limit:
                break
        return out

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

    def summary(self, run_id: str) -> dict[str, Any] | None:
        doc = self.read_doc(run_id)
        return doc

    # ---- rebuilding ----

    def rebuild(self, run_ids: list[str] | None = None, *,
                progress: Callable[[int], None] | None = None, every_run: list[str] | None = None,
                first_build: bool = False) -> int:
        """Re-fold runs (all: None) from their logs and rewrite their documents and
        index entries. The number folded."""
        if run_ids is None:
            run_ids = every_run if every_run is not None else self.logged_runs()
            if progress is None:
                progress = progress_printer(len(run_ids))
        done = 0
        for run_id in run_ids:
            self.tracker.forget(run_id)
            summary = self.fold_from_log(run_id)
            if summary is None:
                self.forget(run_id)
            else:
                self.put(summary, None, first_build=first_build)
            done += 1
            if progress is not None:
                progress(done)
        self.publisher.sync()
        return done

    def logged_runs(self) -> list[str]:
        return [n for n in self.publisher.list_names(f"{self.root}/events") if RUN_ID_RE.fullmatch(n)]

    def forget(self, run_id: str) -> None:
        """Remove a run's document and entries (gc): entries first, the document last, so
        an entry never names a run whose document is gone... unless a crash, and readers
        skip entries without a document."""
        self.tracker.forget(run_id)
        doc = self.read_doc(run_id)
        if doc is not None:
            key = order_key(created_us(doc), run_id)
            for folder in [self.path("by-status", s) for s in STATUSES] + self.run_folders(doc):
                self.remove_entry(folder, key, durable=True)
        self.publisher.remove(self.doc_path(run_id))

    def ensure_built(self) -> None:
        """A World written before the catalogue existed gets one on first open."""
        if self.publisher.read(self.path("built.json")) == MARKER_DOC:
            return
        runs = self.logged_runs()
        if runs:
            self.rebuild(every_run=runs, first_build=True)
        marker = self.path("built.json")
        self.publisher.ensure_dir(marker.rsplit("/", 1)[0])
        self.publisher.replace(marker, MARKER_DOC)


def workflow_folder(workflow_id: str) -> str:
    return sha256_hex(workflow_id)[:24]


def entry_path(key: str) -> str:
    """Where an order key lives inside an index folder: its buckets, then itself."""
    return "/".join(key[lo:hi] for lo, hi in BUCKETS) + "/" + key


def _merged(*iterators: Iterator[str]) -> Iterator[str]:
    if len(iterators) == 1:
        return iterators[0]
    import heapq

    return heapq.merge(*iterators)
