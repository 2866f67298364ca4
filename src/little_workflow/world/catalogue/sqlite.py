"""local_world's catalogue: the `runs` table in events.db, written in the same
transaction as the event that changes it (`SqliteCatalogue`, called by
`SqliteEventStore`), and `StoreCatalogue`, `world.catalogue` over the store's connection."""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable

from ..vocabulary import FINISHED_STATUSES, RUN_STATUSES
from .query import RunQuery
from .summary import (
    SummaryDoc,
    created_us,
    fold_envelopes,
    summary_json,
)
from .tracker import SummaryTracker, progress_printer

#: The statuses of a run created and not yet ended ("unknown" is a log with no run).
UNFINISHED_STATUSES = tuple(s for s in RUN_STATUSES if s not in FINISHED_STATUSES and s != "unknown")

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

            def fold_log(run_id: str = run_id, through: int = through) -> SummaryDoc | None:
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
    def put(conn: Any, summary: SummaryDoc) -> None:
        conn.execute(
            "INSERT INTO runs (run_id, status, workflow_id, created_us, parent_run_id, doc)"
            " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO UPDATE SET"
            " status = excluded.status, workflow_id = excluded.workflow_id,"
            " created_us = excluded.created_us, parent_run_id = excluded.parent_run_id,"
            " doc = excluded.doc",
            (summary["runId"], summary["status"], summary.get("workflowId"), created_us(summary),
             summary.get("parentRunId"), summary_json(summary)))

    @staticmethod
    def fold_run(conn: Any, run_id: str, through: int | None = None) -> SummaryDoc | None:
        rows = conn.execute("SELECT envelope FROM events WHERE run_id = ? AND sequence <= ?"
                            " ORDER BY sequence", (run_id, through if through is not None else 2**62))
        return fold_envelopes(run_id, (json.loads(r[0]) for r in rows))

    @staticmethod
    def page(conn: Any, q: RunQuery, limit: int) -> list[SummaryDoc]:
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
    def summary(conn: Any, run_id: str) -> SummaryDoc | None:
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

    def page(self, q: RunQuery, limit: int) -> list[SummaryDoc]:
        return self.store.query(lambda conn: SqliteCatalogue.page(conn, q, limit))

    def summary(self, run_id: str) -> SummaryDoc | None:
        return self.store.query(lambda conn: SqliteCatalogue.summary(conn, run_id))

    #: Summaries are written in the transaction of their events: none is ever lost.
    write_errors: tuple[BaseException, ...] = ()

    def settle(self, run_id: str) -> SummaryDoc | None:
        """The run's summary: in SQLite it never lags its log (one transaction)."""
        return self.summary(run_id)

    def summarized_runs(self) -> list[str]:
        return self.store.query(
            lambda conn: [r[0] for r in conn.execute("SELECT run_id FROM runs ORDER BY run_id")])

    @property
    def lists_unfinished(self) -> bool:
        """True when `unfinished_run_ids` names every unfinished run: a run's row commits
        with its `run.created` and changes status with its last event, in one transaction
        each. Not while a World written before the catalogue is still to be summarized."""
        return not self.store.catalogue_needs_build

    def unfinished_run_ids(self) -> list[str]:
        """Every run created and not yet ended, in run id order (the `runs_by_status`
        index: its cost grows with unfinished runs, not with every run)."""
        return self.store.query(lambda conn: sorted(r[0] for r in conn.execute(
            f"SELECT run_id FROM runs WHERE status IN ({','.join('?' * len(UNFINISHED_STATUSES))})",
            UNFINISHED_STATUSES)))

    def entry_problems(self, docs: dict[str, SummaryDoc], now: float) -> list[str]:
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
