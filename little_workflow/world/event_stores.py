"""Event storage primitives: "publish event N if absent", "read committed events".

The event rules (receipts, artifact references, sequence allocation, digests) live in
`world.core`; a store only keeps bytes under (run id, sequence) and never overwrites.
"""

from __future__ import annotations

import functools
import os
import re
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from .ids import RUN_ID_RE
from .publish import Publisher

EVENT_FILE_RE = re.compile(r"(\d{10})\.json")
T = TypeVar("T")


class EventStore(ABC):
    blocking: bool = True
    description: str = ""

    @abstractmethod
    def publish_if_absent(
        self, run_id: str, sequence: int, data: bytes, *, durable: bool, idempotency_key: str | None
    ) -> bool:
        """Commit `data` as event `sequence` of `run_id`; False if that sequence exists
        (or, where the store enforces it, the idempotency key is already taken)."""

    @abstractmethod
    def read_after(self, run_id: str, after: int) -> list[tuple[int, bytes]]:
        """Committed events of a run with sequence > after, in order."""

    @abstractmethod
    def read_one(self, run_id: str, sequence: int) -> bytes | None: ...

    @abstractmethod
    def run_ids(self) -> list[str]: ...

    def sync(self) -> None:
        """Make every event appended so far durable, including `durable=False` ones."""
        return None

    def close(self) -> None:
        return None


class FileEventStore(EventStore):
    """One JSON file per event: `<root>/events/<runId>/0000000001.json`."""

    def __init__(self, publisher: Publisher, root: str):
        self.publisher = publisher
        self.root = root
        self.blocking = publisher.blocking
        self.description = f"{type(publisher.fs).__name__} at {root}/events"
        # Object stores answer one listing faster than N probes; elsewhere a probe by name
        # is a cheap point read, and a listing on MemoryFileSystem scans the whole store.
        self._list_to_read = getattr(publisher, "prefers_listing", False)

    def run_dir(self, run_id: str) -> str:
        return f"{self.root}/events/{run_id}"

    def event_path(self, run_id: str, sequence: int) -> str:
        return f"{self.root}/events/{run_id}/{sequence:010d}.json"

    def publish_if_absent(
        self, run_id: str, sequence: int, data: bytes, *, durable: bool, idempotency_key: str | None
    ) -> bool:
        return self.publisher.publish_if_absent(
            self.event_path(run_id, sequence), data, durable=durable
        )

    def read_one(self, run_id: str, sequence: int) -> bytes | None:
        return self.publisher.read(self.event_path(run_id, sequence))

    def read_after(self, run_id: str, after: int) -> list[tuple[int, bytes]]:
        if self._list_to_read:
            sequences = [
                int(m.group(1))
                for name in self.publisher.list_names(self.run_dir(run_id))
                if (m := EVENT_FILE_RE.fullmatch(name))
            ]
            out = []
            for seq in sorted(s for s in sequences if s > after):
                data = self.read_one(run_id, seq)
                if data is None:
                    break
                out.append((seq, data))  # a hole shows as a jump, which the World reports
            return out
        # Sequences are contiguous (event N is only published once N-1 exists), so probing
        # upward until the first missing name reads exactly the committed events.
        out = []
        seq = after + 1
        while (data := self.read_one(run_id, seq)) is not None:
            out.append((seq, data))
            seq += 1
        if after == 0:
            # A whole-log read also looks past the first missing name: an event beyond
            # it means a lost event file (a hole), which the World reports as corruption.
            beyond = [s for s in self.listed_sequences(run_id) if s > seq]
            if beyond and (data := self.read_one(run_id, beyond[0])) is not None:
                out.append((beyond[0], data))
        return out

    def run_ids(self) -> list[str]:
        return [
            n
            for n in self.publisher.list_names(f"{self.root}/events")
            if RUN_ID_RE.fullmatch(n)
        ]

    def sync(self) -> None:
        self.publisher.sync()

    def listed_sequences(self, run_id: str) -> list[int]:
        """Every sequence present by listing (used by verification, not by appends)."""
        return sorted(
            int(m.group(1))
            for name in self.publisher.list_names(self.run_dir(run_id))
            if (m := EVENT_FILE_RE.fullmatch(name))
        )


@dataclass
class _PendingInsert:
    row: tuple
    durable: bool
    done: threading.Event = field(default_factory=threading.Event)
    published: bool = False
    error: BaseException | None = None


class SqliteEventStore(EventStore):
    """SQLite in WAL mode, `PRIMARY KEY (run_id, sequence)`, durable commits
    (`synchronous=FULL`). One connection per World storage, used under a lock."""

    def __init__(self, db_path: str):
        self.db_path = db_path
        self.description = f"SQLite {db_path}"
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            db_path, timeout=30.0, isolation_level=None, check_same_thread=False
        )
        self._synchronous = ""
        self._queue: list[_PendingInsert] = []
        self._queue_lock = threading.Lock()
        self._leader_active = False
        self._retrying(self._setup)

    def _setup(self) -> None:
        c = self._conn
        c.execute("PRAGMA busy_timeout=30000")
        c.execute("PRAGMA journal_mode=WAL")
        self._set_synchronous(True)
        c.execute(
            "CREATE TABLE IF NOT EXISTS events ("
            " run_id TEXT NOT NULL, sequence INTEGER NOT NULL,"
            " idempotency_key TEXT, envelope TEXT NOT NULL,"
            " PRIMARY KEY (run_id, sequence)) WITHOUT ROWID"
        )
        c.execute(
            "CREATE UNIQUE INDEX IF NOT EXISTS events_idempotency_key"
            " ON events (run_id, idempotency_key) WHERE idempotency_key IS NOT NULL"
        )
        self._preallocate_wal()

    def _preallocate_wal(self) -> None:
        """Grow the WAL to its steady-state size before the first append.

        A commit that extends the WAL file also has to make the new file size durable,
        which made each of the first ~500 steps of a fresh data dir cost ~1.6× a commit
        that overwrites WAL space already there (measured: 220-260 µs vs 135-140 µs).
        So: 1,000 tiny unsynced updates of one row (one page, so the database itself does
        not grow), then a RESTART checkpoint, after which commits reuse the WAL from its
        start. SQLite's default autocheckpoint (1,000 pages) keeps it at this size."""
        c = self._conn
        wal = self.db_path + "-wal"
        page_size = c.execute("PRAGMA page_size").fetchone()[0]
        if os.path.exists(wal) and os.path.getsize(wal) >= 1000 * page_size:
            return
        c.execute("CREATE TABLE IF NOT EXISTS wal_preallocation (k INTEGER PRIMARY KEY, v INTEGER)")
        c.execute("INSERT OR IGNORE INTO wal_preallocation VALUES (1, 0)")
        c.execute("PRAGMA synchronous=OFF")
        self._synchronous = "OFF"
        for i in range(1000):
            c.execute("UPDATE wal_preallocation SET v = ? WHERE k = 1", (i,))
        c.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
        self._set_synchronous(True)

    def _set_synchronous(self, durable: bool) -> None:
        # In WAL mode a FULL commit fsyncs the WAL, which also makes every earlier NORMAL
        # commit durable; NORMAL commits still survive the process being killed.
        mode = "FULL" if durable else "NORMAL"
        if mode != self._synchronous:
            self._conn.execute(f"PRAGMA synchronous={mode}")
            self._synchronous = mode

    def _retrying(self, op: Callable[[], T]) -> T:
        # busy_timeout covers most contention; a "locked" that still escapes (WAL recovery
        # by another process, checkpoint) is retried here so it never reaches a user.
        delay = 0.005
        for attempt in range(200):
            try:
                with self._lock:
                    return op()
            except sqlite3.OperationalError as e:
                msg = str(e).lower()
                if ("locked" not in msg and "busy" not in msg) or attempt == 199:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
        raise AssertionError("unreachable")

    def publish_if_absent(
        self, run_id: str, sequence: int, data: bytes, *, durable: bool, idempotency_key: str | None
    ) -> bool:
        # Group commit: appends that arrive while another thread is committing wait for
        # the next commit and share it — one fsync for a batch of parallel steps. A batch
        # is synced (FULL) when any append in it asked for durability.
        pending = _PendingInsert((run_id, sequence, idempotency_key, data.decode("utf-8")),
                                 durable)
        with self._queue_lock:
            self._queue.append(pending)
            lead = not self._leader_active
            self._leader_active = True
        if lead:
            self._lead_commits()
        else:
            pending.done.wait()
        if pending.error is not None:
            raise pending.error
        return pending.published

    def _lead_commits(self) -> None:
        while True:
            with self._queue_lock:
                batch, self._queue = self._queue, []
                if not batch:
                    self._leader_active = False
                    return
            try:
                durable = any(p.durable for p in batch)
                rows = [p.row for p in batch]
                results = self._retrying(
                    functools.partial(self._insert_batch, rows, durable=durable))
                for p, ok in zip(batch, results, strict=True):
                    p.published = ok
            except BaseException as e:
                for p in batch:
                    p.error = e
            for p in batch:
                p.done.set()

    def _insert_batch(self, rows: list[tuple], *, durable: bool) -> list[bool]:
        """Insert rows in one transaction; False for a row whose sequence (or idempotency
        key) is already taken. Runs under self._lock (see _retrying)."""
        self._set_synchronous(durable)
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            results = [
                conn.execute(
                    "INSERT OR IGNORE INTO events (run_id, sequence, idempotency_key, envelope)"
                    " VALUES (?, ?, ?, ?)", row).rowcount == 1
                for row in rows
            ]
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return results

    def read_after(self, run_id: str, after: int) -> list[tuple[int, bytes]]:
        def select() -> list[tuple[int, bytes]]:
            rows = self._conn.execute(
                "SELECT sequence, envelope FROM events WHERE run_id = ? AND sequence > ?"
                " ORDER BY sequence",
                (run_id, after),
            ).fetchall()
            return [(s, e.encode("utf-8")) for s, e in rows]

        return self._retrying(select)

    def read_one(self, run_id: str, sequence: int) -> bytes | None:
        def select() -> bytes | None:
            row = self._conn.execute(
                "SELECT envelope FROM events WHERE run_id = ? AND sequence = ?",
                (run_id, sequence),
            ).fetchone()
            return None if row is None else row[0].encode("utf-8")

        return self._retrying(select)

    def run_ids(self) -> list[str]:
        def select() -> list[str]:
            rows = self._conn.execute("SELECT DISTINCT run_id FROM events ORDER BY run_id")
            return [r[0] for r in rows]

        return self._retrying(select)

    def listed_sequences(self, run_id: str) -> list[int]:
        def select() -> list[int]:
            rows = self._conn.execute(
                "SELECT sequence FROM events WHERE run_id = ? ORDER BY sequence", (run_id,)
            )
            return [r[0] for r in rows]

        return self._retrying(select)

    def sync(self) -> None:
        # Every commit, NORMAL ones included, is already in the WAL file: one fsync of
        # that file makes them all durable, with no transaction of its own.
        wal = self.db_path + "-wal"
        try:
            fd = os.open(wal, os.O_RDONLY)
        except FileNotFoundError:
            return  # no WAL: everything was checkpointed into the synced database
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
