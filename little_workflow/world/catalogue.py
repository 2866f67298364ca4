"""The run catalogue: one summary per run, kept as events are appended, so
that a page of runs costs O(limit), not O(runs).

This module holds what every World shares, and local_world's part:

- what a caller gets (`RunSummary`, `RunPage`) and asks (`list_runs`, `RunQuery`, the
  cursor): every argument checked once, a bad one is `CatalogueQueryError`;
- the fold, written once: `summary_change` says what one event changes in its run's
  summary (most events: nothing), `apply_change` folds that in, `fold_envelopes` a log;
- local_world's `runs` table in events.db, written in the same transaction as the event
  that changes it (`SqliteCatalogue`, called by `SqliteEventStore`);
- `SummaryTracker`: what this process folded of each run since it wrote its summary.

File and object-store Worlds keep summary documents and key indexes: file_catalogue.py
(its docstring is the write protocol that keeps them honest through cuts and races).
The log stays the truth: a summary is written only after its event is published, so it
may lag (a crash in between) but never shows a status the log does not have.
"""

from __future__ import annotations

import base64
import json
import sys
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Literal

from ..errors import CatalogueQueryError
from .ids import RUN_ID_RE
from .vocabulary import FINISHED_STATUSES as _FINISHED
from .vocabulary import (
    OWNER_EVENTS,
    RUN_ENDINGS,
    RUN_STATUSES,
    RunStatus,
    status_after,
)

#: "unknown" is a run whose log has no lifecycle (no `run.created`): one that only holds
#: data, e.g. a LangGraph thread (`OWNER_EVENTS`), as `materialize_run_state` says too.
STATUSES = RUN_STATUSES
TERMINAL = RUN_ENDINGS
FINISHED_STATUSES = frozenset(_FINISHED)
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
    (runs are pinned to the version that created them), None once the run executes
    again."""

    run_id: str
    workflow_id: str | None
    status: RunStatus
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

ChangeKind = Literal["created", "owner", "started", "refused", "end", "step", "open", "close"]


@dataclass(frozen=True, slots=True)
class SummaryChange:
    """What one event changes in its run's summary (`summary_change`), for `apply_change`
    to fold in. `kind` says which fields mean something: `workflow_id` (created, owner),
    `parent_run_id` (created), `version` (refused), `error` (end), `step_path` (open,
    close) and `waiting` (open: what the run now waits for)."""

    kind: ChangeKind
    #: The event's type and `createdAt`.
    event_type: str
    at: str
    workflow_id: str | None = None
    parent_run_id: str | None = None
    version: str | None = None
    error: Any = None
    step_path: str | None = None
    waiting: dict[str, Any] | None = None


def summary_change(type_: str, payload: Any, created_at: str) -> SummaryChange | None:
    """What an event changes in its run's summary, or None (most events). Pure."""
    kind = _CHANGES.get(type_)
    if kind is None:
        return None
    p = payload if isinstance(payload, dict) else {}
    if kind == "step":
        return SummaryChange("step", type_, created_at) if p.get("attempt", 1) == 1 else None
    if kind == "created":
        return SummaryChange("created", type_, created_at, workflow_id=p.get("workflowId"),
                             parent_run_id=p.get("parentRunId"))
    if kind == "owner":
        return SummaryChange("owner", type_, created_at, workflow_id=OWNER_EVENTS[type_])
    if kind == "started":
        return SummaryChange("started", type_, created_at)
    if kind == "refused":
        version = p.get("version")
        return SummaryChange("refused", type_, created_at,
                             version=version if isinstance(version, str) else None)
    if kind == "end":
        error = p.get("error")
        if RUN_ENDINGS[type_] == "cancelled" and error is None:
            error = {"type": "RunCancelledError", "reason": p.get("reason")}
        return SummaryChange("end", type_, created_at, error=_plain(error))
    path = p.get("stepPath")
    if not isinstance(path, str):
        return None
    if type_ == "timer.scheduled":
        return SummaryChange("open", type_, created_at, step_path=path, waiting={
            "kind": "sleep", "stepPath": path, "wakeAt": p.get("wakeAt")})
    if type_ == "wait.started":
        return SummaryChange("open", type_, created_at, step_path=path, waiting={
            "kind": "event", "stepPath": path, "name": p.get("name"), "deadline": p.get("deadline")})
    return SummaryChange("close", type_, created_at, step_path=path)


_CHANGES = {"run.created": "created", "run.started": "started", "run.resume_refused": "refused",
            "run.completed": "end",
            "run.failed": "end", "run.cancelled": "end", "step.started": "step",
            "timer.scheduled": "wait", "wait.started": "wait", "timer.fired": "wait",
            "wait.completed": "wait", **{t: "owner" for t in OWNER_EVENTS}}


def changes_status(change: SummaryChange) -> bool:
    """False only for a step count: file Worlds write those with the next status change."""
    return change.kind != "step"


def _plain(value: Any) -> Any:
    """Frozen payload values as plain JSON."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def apply_change(summary: dict[str, Any] | None, run_id: str, sequence: int,
                 change: SummaryChange) -> dict[str, Any] | None:
    """The summary after one change (a new dict). A run whose `run.created` was not seen
    has no summary (None) until it is re-folded from its whole log."""
    kind, at = change.kind, change.at
    if kind == "created":
        s: dict[str, Any] = {"runId": run_id, "workflowId": change.workflow_id,
                             "status": status_after("unknown", change.event_type, False),
                             "createdAt": at, "updatedAt": at, "steps": 0, "waiting": None,
                             "error": None, "parentRunId": change.parent_run_id,
                             "openWaits": {}, "sequence": sequence}
        return s
    if kind == "owner":
        if summary is not None:
            return summary  # a run with a lifecycle keeps it
        return {"runId": run_id, "workflowId": change.workflow_id, "status": "unknown", "createdAt": at,
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
        s["status"] = status_after(status, change.event_type, False)
        s["error"], s["waiting"] = change.error, None
        return s
    if kind == "refused":
        s["needsVersion"] = change.version
        return s
    if kind == "started":
        s.pop("needsVersion", None)
    waits = dict(s.get("openWaits") or {})
    if kind == "open":
        waits[change.step_path] = change.waiting
    elif kind == "close":
        waits.pop(change.step_path, None)
    s["openWaits"] = waits
    s["status"] = status_after(status, change.event_type, bool(waits))
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


#: The fields a stored summary must share with the fold of its log.
SUMMARY_FIELDS = ("status", "workflowId", "createdAt", "waiting", "error", "parentRunId")


def summary_lags(found: dict[str, Any], expected: dict[str, Any]) -> bool:
    """Whether a stored summary says other than the fold of its whole log (`expected`).
    A step count rides with the next status change, so it may trail while a run runs;
    a `pending` mark whose event is in the log is a change not written yet."""
    fields = SUMMARY_FIELDS + (("steps",) if expected["status"] in FINISHED_STATUSES else ())
    mark = found.get("pending")
    landed = isinstance(mark, dict) and isinstance(mark.get("sequence"), int) \
        and int(found.get("sequence") or 0) < mark["sequence"] <= int(expected["sequence"])
    return landed or any(found.get(k) != expected.get(k) for k in fields)


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
        if self.position is not None:
            # Newest first, ties by run id: only what comes after the cursor's run.
            at_us, at_run = self.position
            return us < at_us or (us == at_us and doc["runId"] > at_run)
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


#: The largest page `list_runs` hands out (a caller wanting more pages with the cursor).
MAX_LIMIT = 10_000
#: Cursors are short: anything longer was not handed out (and is not worth decoding).
MAX_CURSOR_CHARS = 1000
#: Positions a cursor may hold: far wider than any clock, narrower than SQLite's integers.
MAX_POSITION_US = 2**62


def decode_cursor(cursor: str) -> tuple[int, str]:
    def refuse() -> CatalogueQueryError:
        shown = cursor if len(cursor) <= 60 else cursor[:57] + "..."
        return CatalogueQueryError(
            "cursor", f"{shown!r} is not a cursor list_runs handed out (pass next_cursor as it is)")

    if len(cursor) > MAX_CURSOR_CHARS:
        raise refuse()
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (ValueError, RecursionError):  # bad base64 or JSON (UnicodeDecodeError is one)
        raise refuse() from None
    if not (isinstance(value, list) and len(value) == 3 and value[0] == 1
            and type(value[1]) is int and -MAX_POSITION_US <= value[1] <= MAX_POSITION_US
            and isinstance(value[2], str) and RUN_ID_RE.fullmatch(value[2])):
        raise refuse()
    return value[1], value[2]


def _moment(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise CatalogueQueryError(name, f"expected an aware datetime, got {type(value).__name__}")
    try:
        offset = value.utcoffset()
        if offset is None:
            raise CatalogueQueryError(name, "the datetime has no timezone (use tzinfo=timezone.utc)")
        # On timedeltas: exact for every datetime from year 1 to 9999, whatever its offset.
        return ((value.replace(tzinfo=None) - _EPOCH_NAIVE) - offset) // _ONE_US
    except CatalogueQueryError:
        raise
    except (ValueError, TypeError, OverflowError, ArithmeticError) as e:
        raise CatalogueQueryError(name, f"the datetime's timezone cannot be read: {e}") from None


_EPOCH_NAIVE = datetime(1970, 1, 1)


def _text(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise CatalogueQueryError(name, f"expected a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise CatalogueQueryError(name, f"{value!r} is not valid text (a lone surrogate)") from None
    return value


def _statuses(status: Any) -> tuple[str, ...] | None:
    if status is None:
        return None
    if isinstance(status, str):
        items: tuple[Any, ...] = (status,)
    elif isinstance(status, (bytes, bytearray, dict)) or not hasattr(status, "__iter__"):
        raise CatalogueQueryError("status", f"a status or a list of statuses, not {type(status).__name__}")
    else:
        items = tuple(status)
    for s in items:
        if not isinstance(s, str) or s not in STATUSES:
            raise CatalogueQueryError("status", f"unknown status {s!r}; one of {', '.join(STATUSES)}")
    if not items:
        raise CatalogueQueryError("status", "an empty list matches nothing; pass None for all")
    return tuple(sorted(set(items)))


def build_query(*, status: Any, workflow_id: Any, created_after: Any, created_before: Any,
                parent_run_id: Any, limit: Any, cursor: Any) -> RunQuery:
    statuses = _statuses(status)
    if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
        raise CatalogueQueryError("limit", f"must be an integer from 1 to at most {MAX_LIMIT} "
                                  f"(page on with the cursor), not {limit!r}")
    workflow_id = _text("workflow_id", workflow_id)
    parent_run_id = _text("parent_run_id", parent_run_id)
    if parent_run_id is not None and not RUN_ID_RE.fullmatch(parent_run_id):
        raise CatalogueQueryError("parent_run_id", f"{parent_run_id!r} is not a run id "
                                  "(run_ followed by 1 to 80 letters, digits, _ or -)")
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
            through = c.through

            def fold_log(run_id: str = run_id, through: int = through) -> dict[str, Any] | None:
                return SqliteCatalogue.fold_run(conn, run_id, through)

            summary, old = tracker.resolve(run_id, c, old, fold_log)
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
        where: list[str] = []
        args: list[Any] = []
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

    #: Summaries are written in the transaction of their events: none is ever lost.
    write_errors: tuple[BaseException, ...] = ()

    def settle(self, run_id: str) -> dict[str, Any] | None:
        """The run's summary: in SQLite it never lags its log (one transaction)."""
        return self.summary(run_id)

    def summarized_runs(self) -> list[str]:
        return self.store.query(
            lambda conn: [r[0] for r in conn.execute("SELECT run_id FROM runs ORDER BY run_id")])

    def entry_problems(self, docs: dict[str, dict[str, Any]], now: float) -> list[str]:
        """SQLite keeps its indexes itself: nothing to check."""
        return []

    def rebuild(self, run_ids: list[str] | None = None, *,
                progress: Callable[[int], None] | None = None, now: float | None = None) -> int:
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


# --- what this process folded of each run ----------------------------------------------------

#: In-memory summaries kept per World storage (runs in flight), at most this many.
CACHE_LIMIT = 4096


@dataclass
class CachedSummary:
    summary: dict[str, Any] | None  # None: not known here; folded from the log when written
    written: int | None  # `sequence` of the summary this process last wrote (or saw)
    through: int  # every event up to this one is folded into `summary`
    dirty: bool = False  # a status change not written yet
    #: File catalogues (file_catalogue.py): the document as this process last wrote (or
    #: read) it; and for the status change at `intended_for`, the `pending` mark written
    #: over it and the index folders given entries before the event was published.
    stored: dict[str, Any] | None = None
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

    def expect(self, run_id: str, sequence: int, stored: dict[str, Any] | None,
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

    def resolve(self, run_id: str, c: CachedSummary, old: dict[str, Any] | None,
                fold_log: Callable[[], dict[str, Any] | None]
                ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
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

    def written(self, run_id: str, c: CachedSummary, stored: dict[str, Any] | None = None) -> None:
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
