"""Event storage primitives: "publish event N if absent", "read committed events".

The event rules (receipts, artifact references, sequence allocation, digests) live in
`world.core`; a store only keeps bytes under (run id, sequence) and never overwrites.
"""

from __future__ import annotations

import itertools
import os
import re
import sqlite3
import threading
import time
import urllib.parse
import uuid
from abc import ABC, abstractmethod
from typing import Any, Callable, TypeVar

from ..errors import StorageDamagedError, StorageError
from .catalogue import (
    SqliteCatalogue,
    StoreCatalogue,
    SummaryChange,
    SummaryTracker,
    changes_status,
)
from .catalogue.files import FileCatalogue
from .ids import RUN_ID_RE
from .posix import REAL_POSIX
from .publish import Publisher
from .storage_errors import DAMAGED_HINT, sqlite_storage_error, storage_error

EVENT_FILE_RE = re.compile(r"(\d{10})\.json")
T = TypeVar("T")


class PendingAppend:
    """One event handed to a store (`EventStore.enqueue`), in sequence order per run.

    `wait()` returns True once it is committed, False when its sequence (or idempotency
    key) was already taken; it raises when its commit failed. When it did not commit,
    `first_lost` is the run's first sequence that did not commit with it: that one and
    every later append of the same `epoch` failed too (the log never has a hole)."""

    __slots__ = ("run_id", "sequence", "data", "durable", "idempotency_key", "epoch",
                 "done", "published", "error", "first_lost", "_store", "change")

    def __init__(self, run_id: str, sequence: int, data: bytes, durable: bool,
                 idempotency_key: str | None, epoch: int, store: "EventStore | None" = None,
                 change: SummaryChange | None = None):
        self.run_id, self.sequence, self.data = run_id, sequence, data
        self.change = change  # what it changes in the run's catalogue summary (catalogue.py)
        self.durable, self.idempotency_key, self.epoch = durable, idempotency_key, epoch
        self.done = False
        self.published = False
        self.error: BaseException | None = None
        self.first_lost = sequence
        self._store = store

    def wait(self) -> bool:
        if not self.done and self._store is not None:
            self._store.wait_for(self)
        if self.error is not None:
            raise self.error
        return self.published


#: The outcome of every append a store published at once (nothing to wait for or undo).
PUBLISHED = PendingAppend("", 0, b"", True, None, 0)
PUBLISHED.done = PUBLISHED.published = True


class EventStore(ABC):
    blocking: bool = True
    description: str = ""
    #: The store refuses event N+1 of a run when event N is missing, in the same step as
    #: the write (a process with a stale idea of the run cannot leave a hole).
    checks_predecessor: bool = False

    def enqueue(self, run_id: str, sequence: int, data: bytes, *, durable: bool,
                idempotency_key: str | None, epoch: int = 0,
                change: SummaryChange | None = None) -> PendingAppend:
        """Hand event `sequence` to the store. The World calls this in sequence order per
        run (under the run's lock) and waits outside the lock. This default publishes
        at once, so publication stays in order (file stores: readers probe sequences
        upward, and N+1 must never be visible before N). `change`: what the event
        changes in the run's catalogue summary (`catalogue.summary_change`)."""
        self.publishing(run_id, sequence, change)
        if self.publish_if_absent(run_id, sequence, data, durable=durable,
                                  idempotency_key=idempotency_key):
            self.published(run_id, sequence, change, durable)
            return PUBLISHED
        p = PendingAppend(run_id, sequence, data, durable, idempotency_key, epoch)
        p.done = True
        return p

    def wait_for(self, pending: PendingAppend) -> None:
        """Block until `pending` is settled (stores that commit later)."""
        return None

    def publishing(self, run_id: str, sequence: int, change: SummaryChange | None) -> None:
        """Before event `sequence` is published: prepare the run catalogue (file stores)."""
        return None

    def published(self, run_id: str, sequence: int, change: SummaryChange | None, durable: bool) -> None:
        """After event `sequence` is published: keep the run catalogue (file stores)."""
        return None

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

    def delete_run(self, run_id: str) -> int:
        """Remove every event of a run; the bytes freed. A partial delete (crash) must
        leave a shorter contiguous log, never a hole below the highest sequence."""
        raise NotImplementedError(f"{type(self).__name__} cannot delete runs")

    def withdraw(self, run_id: str, sequence: int, data: bytes) -> None:
        """Remove event `sequence` that this process just published with `data`, found
        to follow no event (the run was deleted meanwhile). Only stores without
        `checks_predecessor` are asked."""
        raise NotImplementedError(f"{type(self).__name__} cannot withdraw events")

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
        self.catalogue = FileCatalogue(publisher, root, self)
        self.blocking = publisher.blocking
        self.description = f"{type(publisher.fs).__name__} at {root}/events"
        # Object stores answer one listing faster than N probes; elsewhere a probe by name
        # is a cheap point read, and a listing on MemoryFileSystem scans the whole store.
        self._list_to_read = getattr(publisher, "prefers_listing", False)

    def run_dir(self, run_id: str) -> str:
        return f"{self.root}/events/{run_id}"

    def publishing(self, run_id: str, sequence: int, change: SummaryChange | None) -> None:
        self.catalogue.intend(run_id, sequence, change)

    def published(self, run_id: str, sequence: int, change: SummaryChange | None, durable: bool) -> None:
        self.catalogue.note(run_id, sequence, change, durable)

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
        while True:
            while (data := self.read_one(run_id, seq)) is not None:
                out.append((seq, data))
                seq += 1
            if after != 0:
                return out
            # A whole-log read also looks past the first missing name: an event beyond
            # it means a lost event file (a hole), which the World reports as corruption.
            listed = self.listed_sequences(run_id)
            if seq in listed:
                continue  # appended while we probed: not a hole, read on
            beyond = [s for s in listed if s > seq]
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
        self.catalogue.flush()  # summaries that waited for their events to be durable

    def delete_run(self, run_id: str) -> int:
        # Highest sequence first: a crash part-way leaves events 1..k, a shorter log
        # that reads as contiguous, never a hole.
        freed = 0
        # Twice: a writer holding no lock that published after the first listing and
        # still saw its predecessor withdraws nothing, so the second listing takes it.
        for _ in range(2):
            for sequence in reversed(self.listed_sequences(run_id)):
                path = self.event_path(run_id, sequence)
                found = self.publisher.info(path)
                if self.publisher.remove(path) and found is not None:
                    freed += int(found.get("size") or 0)
        self.publisher.remove_dir(self.run_dir(run_id))
        return freed

    def withdraw(self, run_id: str, sequence: int, data: bytes) -> None:
        path = self.event_path(run_id, sequence)
        if self.publisher.read(path) == data:  # ours, not a new run's event
            self.publisher.remove(path)
            self.publisher.remove_dir(self.run_dir(run_id))  # only if nothing else is there

    def listed_sequences(self, run_id: str) -> list[int]:
        """Every sequence present by listing (used by verification, not by appends)."""
        return sorted(
            int(m.group(1))
            for name in self.publisher.list_names(self.run_dir(run_id))
            if (m := EVENT_FILE_RE.fullmatch(name))
        )


#: An ordinary rowid table (its primary key is a unique index made with the table): an
#: envelope is often 1-2 KB, and a WITHOUT ROWID table keeps at most ~1/4 page of a row in
#: its b-tree, moving each such row's tail to an overflow page of its own, mostly empty
#: (issue 29: 2.4x the events' bytes, 1.4x here). The key's uniqueness is what refuses a
#: taken sequence. Files made before keep their WITHOUT ROWID table, which the same
#: statements read and write the same way.
EVENTS_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS events ("
    " run_id TEXT NOT NULL, sequence INTEGER NOT NULL,"
    " idempotency_key TEXT, envelope TEXT NOT NULL,"
    " PRIMARY KEY (run_id, sequence))",
    "CREATE UNIQUE INDEX IF NOT EXISTS events_idempotency_key"
    " ON events (run_id, idempotency_key) WHERE idempotency_key IS NOT NULL",
)


#: World counters (`World.take_number`), made at their first use.
COUNTERS_SCHEMA = ("CREATE TABLE IF NOT EXISTS counters ("
                   " name TEXT PRIMARY KEY, next INTEGER NOT NULL) WITHOUT ROWID")


class SqliteEventStore(EventStore):
    """SQLite in WAL mode, `PRIMARY KEY (run_id, sequence)`, durable commits
    (`synchronous=FULL`; `NORMAL` only for a batch of `durable=False` appends, never
    `OFF`). One connection per World storage writes, under a lock; reads use it while it
    is free and otherwise a second one (`_reading`), so they never wait for a commit in
    progress.

    Every SQLite or OS failure leaves as `StorageError` naming events.db (read-only data
    dir, disk full, a file that is not a SQLite database)."""

    checks_predecessor = True

    def __init__(self, db_path: str, *, read_only: bool = False):
        self.db_path = db_path
        self.description = f"SQLite {db_path}"
        self.read_only = read_only
        self._lock = threading.Lock()
        # Reads: a connection of their own, opened at the first read that finds the
        # writing connection busy (see _reading).
        self._reader: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()
        self._closed = False
        self._wal_prefilled = False
        self._synchronous = ""
        # Group commit: appends queued while a commit runs share the next one.
        self._queue: list[PendingAppend] = []
        self._queue_cond = threading.Condition(threading.Lock())
        self._leader_active = False
        self._waiting = 0  # threads waiting on _queue_cond for another's commit
        # run id -> (epoch, first lost sequence, error or None for "taken"): later appends
        # of that epoch fail the same way, so a failed commit never leaves a hole.
        self._lost: dict[str, tuple[int, int, BaseException | None]] = {}
        # A direct publish_if_absent is one append with nothing allocated behind it: each
        # gets an epoch of its own (negative: never the World's), so one refused append
        # does not fail the caller's next one.
        self._direct_epochs = itertools.count(-1, -1)
        #: True when the World was written before the run catalogue existed (local.py
        #: builds it when the World is opened).
        self.catalogue_needs_build = False
        self.catalogue = StoreCatalogue(self)
        #: What this process folded of each run since writing its summary (catalogue.py).
        self.summaries = SummaryTracker()
        refuse_empty_file(db_path)
        if read_only:
            self._conn = connect_read_only(db_path)
        else:
            create_atomically(db_path)
            try:
                self._conn = sqlite3.connect(
                    db_path, timeout=30.0, isolation_level=None, check_same_thread=False
                )
            except sqlite3.Error as e:
                raise sqlite_storage_error(db_path, e) from None
        try:
            self._retrying(self._setup_read_only if read_only else self._setup)
        except BaseException:
            self._closed = True
            self._conn.close()
            raise

    @property
    def closed(self) -> bool:
        return self._closed

    def _setup(self) -> None:
        c = self._conn
        c.execute("PRAGMA busy_timeout=30000")
        if c.execute("PRAGMA journal_mode=WAL").fetchone()[0].lower() != "wal":
            raise StorageError(self.db_path, "SQLite could not switch it to WAL mode",
                               "is the data dir on a filesystem without shared memory?")
        self._set_synchronous(True)
        for statement in EVENTS_SCHEMA:
            c.execute(statement)
        self._check_pages()
        self.catalogue_needs_build = SqliteCatalogue.create_schema(c)

    def _setup_read_only(self) -> None:
        c = self._conn
        c.execute("PRAGMA busy_timeout=30000")
        if c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events'"
                     ).fetchone() is None:
            raise StorageError(self.db_path, "SQLite: not a local_world event store (it has no "
                               "events table)", "give the data dir a World wrote")
        self._check_pages()
        self.catalogue_needs_build = SqliteCatalogue.needs_build(c)

    def _check_pages(self) -> None:
        """Refuse a damaged store before anything is written into it. SQLite finds a bad
        page only when a statement reads it, so a new run's appends (which touch only the
        pages on their own key's path) would otherwise go on into a file that reads fail
        on. `quick_check` reads every page once: measured 0.3-0.6 s per 200 MB, once per
        storage per process."""
        try:
            found = [row[0] for row in self._conn.execute("PRAGMA quick_check(3)")]
        except sqlite3.DatabaseError as e:
            found = [str(e)]
        if found != ["ok"]:
            lines = [line.strip() for text in found for line in text.splitlines()
                     if line.strip() and not line.startswith("***")]  # "*** in database main ***"
            where = "; ".join(lines[:2])
            raise StorageDamagedError(self.db_path,
                                      f"SQLite: database disk image is malformed ({where})",
                                      DAMAGED_HINT)

    def _prefill_wal(self) -> None:
        """Give the WAL its steady-state size (one autocheckpoint's worth of frames) in
        zeros before the first commit of this connection.

        A commit that grows the WAL must also make the new file size durable, so on a
        fresh WAL (SQLite deletes it at every clean close) the first ~500 appends cost
        ~1.6x the later ones, which overwrite WAL space already there. Runs inside a
        write transaction (BEGIN IMMEDIATE holds the WAL write lock), and only writes
        past the WAL's current end, where no frame of any connection can be: SQLite reads
        zeros there as "no frame" (bad checksum), exactly as it reads stale frames of an
        earlier WAL generation. Nothing of SQLite's own sync discipline changes."""
        self._wal_prefilled = True
        wal = self.db_path + "-wal"
        c = self._conn
        page_size = c.execute("PRAGMA page_size").fetchone()[0]
        frames = max(c.execute("PRAGMA wal_autocheckpoint").fetchone()[0], 0)
        target = 32 + (frames + 16) * (24 + page_size)
        try:
            fd = os.open(wal, os.O_WRONLY)  # never create it: that is SQLite's job
        except FileNotFoundError:
            return
        try:
            size = os.fstat(fd).st_size
            if size >= target:
                return
            chunk = bytes(1 << 20)
            while size < target:
                size += os.pwrite(fd, chunk[: min(len(chunk), target - size)], size)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _set_synchronous(self, durable: bool) -> None:
        # In WAL mode a FULL commit fsyncs the WAL, which also makes every earlier NORMAL
        # commit durable; NORMAL commits still survive the process being killed.
        mode = "FULL" if durable else "NORMAL"
        if mode != self._synchronous:
            self._conn.execute(f"PRAGMA synchronous={mode}")
            self._synchronous = mode

    def _retrying(self, op: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return self._attempts(self._lock, lambda: op(*args, **kwargs))

    def _reading(self, select: Callable[[sqlite3.Connection], T]) -> T:
        """`select(connection)` on a connection no commit is using. In WAL mode a reader
        takes no lock the writer holds, so a read does not queue behind a commit in
        progress — on one shared connection every log read of a worker's claims and sweeps
        waited for whichever commit was mid-fsync. Each statement is its own read transaction
        (autocommit): it sees every commit made before it starts, as the writing
        connection would between its transactions, and never a commit not yet made."""
        if self.read_only:
            return self._retrying(lambda: select(self._conn))

        def read() -> T:
            if self._reader is None:
                # Until a read first meets a commit in progress, the writing connection
                # serves it when free: a process that only reads a little (a CLI command,
                # a cold LangGraph head) never pays for opening a second one (~0.2 ms).
                if self._lock.acquire(blocking=False):
                    try:
                        return select(self._conn)
                    finally:
                        self._lock.release()
                self._reader = self._open_reader()
            return select(self._reader)

        return self._attempts(self._read_lock, read)

    def _open_reader(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.db_path, timeout=30.0, isolation_level=None,
                               check_same_thread=False)
        try:
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute("PRAGMA query_only=1")
        except BaseException:
            conn.close()
            raise
        return conn

    def _attempts(self, lock: threading.Lock, op: Callable[[], T]) -> T:
        # busy_timeout covers most contention; a "locked" that still escapes (WAL recovery
        # by another process, checkpoint) is retried here so it never reaches a user.
        delay = 0.005
        for attempt in range(200):
            try:
                with lock:
                    if self._closed:
                        raise StorageError(self.db_path, "the event store is closed",
                                           "open the World again")
                    return op()
            except sqlite3.OperationalError as e:
                code = getattr(e, "sqlite_errorname", "") or ""
                if not code.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or attempt == 199:
                    raise sqlite_storage_error(self.db_path, e) from None
            except sqlite3.Error as e:
                raise sqlite_storage_error(self.db_path, e) from None
            except OSError as e:
                if isinstance(e, StorageError):
                    raise
                raise storage_error(e, self.db_path + "-wal") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
        raise AssertionError("unreachable")

    def publish_if_absent(
        self, run_id: str, sequence: int, data: bytes, *, durable: bool, idempotency_key: str | None
    ) -> bool:
        return self.enqueue(run_id, sequence, data, durable=durable,
                            idempotency_key=idempotency_key,
                            epoch=next(self._direct_epochs)).wait()

    def enqueue(self, run_id: str, sequence: int, data: bytes, *, durable: bool,
                idempotency_key: str | None, epoch: int = 0,
                change: SummaryChange | None = None) -> PendingAppend:
        p = PendingAppend(run_id, sequence, data, durable, idempotency_key, epoch, self, change)
        with self._queue_cond:
            lost = self._lost.get(run_id)
            if lost is not None:
                if lost[0] == epoch:  # allocated before the World rolled back: fails too
                    self._settle_lost(p, lost)
                    return p
                del self._lost[run_id]
            self._queue.append(p)
        return p

    @staticmethod
    def _settle_lost(p: PendingAppend, lost: tuple[int, int, BaseException | None]) -> None:
        p.first_lost, p.error, p.published, p.done = lost[1], lost[2], False, True

    def wait_for(self, pending: PendingAppend) -> None:
        """Wait for `pending`'s commit. The first waiter with no commit running commits
        everything queued in one transaction (one fsync for a batch, synced when any
        append in it asked for durability); the others wait and share it."""
        cond = self._queue_cond
        with cond:
            while not pending.done:
                if self._leader_active:
                    self._waiting += 1
                    try:
                        cond.wait()
                    finally:
                        self._waiting -= 1
                    continue
                batch, self._queue = self._queue, []
                self._leader_active = True
                cond.release()
                try:
                    results, error = self._commit(batch)
                finally:
                    cond.acquire()
                    self._leader_active = False
                    self._settle(batch, results, error)
                    if self._waiting:
                        cond.notify_all()

    def _commit(self, batch: list[PendingAppend]) -> tuple[list[bool | None], BaseException | None]:
        rows = [(p.run_id, p.sequence, p.idempotency_key, p.data.decode("utf-8")) for p in batch]
        durable = False
        changes: list[SummaryChange | None] | None = None
        for i, p in enumerate(batch):
            if p.durable:
                durable = True
            if p.change is not None:
                if changes is None:
                    changes = [None] * len(batch)
                changes[i] = p.change
        try:
            extra = {"changes": changes} if changes is not None else {}
            return self._retrying(self.commit_rows, rows, durable=durable, **extra), None
        except BaseException as e:
            return [], e

    def _settle(self, batch: list[PendingAppend], results: list[bool | None],
                error: BaseException | None) -> None:
        """Record a batch's outcome (under the queue lock). A run with an append that did
        not commit loses it and every later append of the same epoch, queued or not."""
        if error is None and len(batch) == 1 and results[0] is True:  # the serial case
            p = batch[0]
            p.published = p.done = True
            return
        lost_from: dict[str, PendingAppend] = {}
        for i, p in enumerate(batch):
            ok = error is None and results[i] is True
            if ok:
                p.published = True
            else:
                p.error = error
                first = lost_from.setdefault(p.run_id, p)
                p.first_lost = first.sequence
            p.done = True
        if not lost_from:
            return
        for run_id, first in lost_from.items():
            self._lost[run_id] = (first.epoch, first.sequence, error)
        kept = []
        for p in self._queue:
            lost = self._lost.get(p.run_id) if p.run_id in lost_from else None
            if lost is not None and lost[0] == p.epoch:
                self._settle_lost(p, lost)
            else:
                kept.append(p)
        self._queue = kept

    def commit_rows(self, rows: list[tuple], *, durable: bool,
                    changes: list[SummaryChange | None] | None = None) -> list[bool | None]:
        """Insert rows `(run_id, sequence, idempotency_key, envelope)` in one transaction:
        True for a row inserted, False for one whose sequence (or idempotency key) is
        taken, None for a later row of that run, skipped. `changes` (parallel to rows)
        are folded into the run catalogue in the same transaction. Runs under the
        connection lock (see _retrying)."""
        self._set_synchronous(durable)
        conn = self._conn
        summaries = self.summaries
        if len(rows) == 1 and self._wal_prefilled and (
                changes is None or changes[0] is None or not changes_status(changes[0])):
            # One row is its own transaction: in autocommit mode the INSERT takes the
            # write lock when it starts (as BEGIN IMMEDIATE would) and commits when it
            # ends, with the same synchronous setting, in one statement instead of three.
            # A step count is folded in memory: it is written with the next status change.
            ok = self.insert_row(rows[0])
            if ok:
                summaries.note(rows[0][0], rows[0][1], changes[0] if changes else None)
            return [ok]
        conn.execute("BEGIN IMMEDIATE")
        try:
            if not self._wal_prefilled:
                self._prefill_wal()
            results: list[bool | None] = []
            taken: set[str] = set()
            changed: list[str] = []
            for i, row in enumerate(rows):
                if row[0] in taken:
                    results.append(None)
                    continue
                ok = self.insert_row(row)
                if not ok:
                    taken.add(row[0])
                elif summaries.note(row[0], row[1], changes[i] if changes else None):
                    changed.append(row[0])
                results.append(ok)
            if changed:
                SqliteCatalogue.write_pending(conn, summaries, dict.fromkeys(changed))
            conn.execute("COMMIT")
        except BaseException:
            for row in rows:  # what was noted did not commit: fold the log next time
                summaries.forget(row[0])
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return results

    def insert_row(self, row: tuple) -> bool:
        """One INSERT inside commit_rows' transaction; False when the row is taken, or
        when its predecessor is missing (the run was deleted since its writer read it:
        never a hole)."""
        return self._conn.execute(
            "INSERT OR IGNORE INTO events (run_id, sequence, idempotency_key, envelope)"
            " SELECT ?1, ?2, ?3, ?4 WHERE ?2 = 1 OR EXISTS"
            " (SELECT 1 FROM events WHERE run_id = ?1 AND sequence = ?2 - 1)", row).rowcount == 1

    def take_number(self, name: str, first: Callable[[], int]) -> int:
        """The next number of counter `name` (`first()` the first time) in a commit that
        is not synced: every later synced commit — the run.created that records the
        number — fsyncs the WAL, and this commit with it (the WAL is one file, written in
        commit order). A process killed after this returns keeps it (it is in the WAL)."""
        def take() -> int:
            self._set_synchronous(False)
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(COUNTERS_SCHEMA)
                rows = conn.execute("SELECT next FROM counters WHERE name = ?", (name,)).fetchall()
                number = int(rows[0][0]) if rows else int(first())
                conn.execute("INSERT OR REPLACE INTO counters (name, next) VALUES (?, ?)",
                             (name, number + 1))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return number

        return self._retrying(take)

    def query(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn(connection)` under the connection lock (reads of the run catalogue)."""
        return self._retrying(lambda: fn(self._conn))

    def transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn(connection)` in one durable write transaction."""
        def run() -> T:
            self._set_synchronous(True)
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                out = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return out

        return self._retrying(run)

    def read_after(self, run_id: str, after: int) -> list[tuple[int, bytes]]:
        def select(conn: sqlite3.Connection) -> list[tuple[int, bytes]]:
            rows = conn.execute(
                "SELECT sequence, envelope FROM events WHERE run_id = ? AND sequence > ?"
                " ORDER BY sequence",
                (run_id, after),
            ).fetchall()
            return [(s, e.encode("utf-8")) for s, e in rows]

        return self._reading(select)

    def read_one(self, run_id: str, sequence: int) -> bytes | None:
        def select(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                "SELECT envelope FROM events WHERE run_id = ? AND sequence = ?",
                (run_id, sequence),
            ).fetchone()
            return None if row is None else row[0].encode("utf-8")

        return self._reading(select)

    def run_ids(self) -> list[str]:
        def select(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute("SELECT DISTINCT run_id FROM events ORDER BY run_id")
            return [r[0] for r in rows]

        return self._reading(select)

    def delete_run(self, run_id: str) -> int:
        def delete() -> int:
            self._set_synchronous(True)
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                (freed,) = conn.execute(
                    "SELECT COALESCE(SUM(LENGTH(CAST(envelope AS BLOB))), 0) FROM events"
                    " WHERE run_id = ?", (run_id,)).fetchone()
                conn.execute("DELETE FROM events WHERE run_id = ?", (run_id,))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return int(freed)

        return self._retrying(delete)

    def listed_sequences(self, run_id: str) -> list[int]:
        def select(conn: sqlite3.Connection) -> list[int]:
            rows = conn.execute(
                "SELECT sequence FROM events WHERE run_id = ? ORDER BY sequence", (run_id,)
            )
            return [r[0] for r in rows]

        return self._reading(select)

    def sync(self) -> None:
        # Every commit, NORMAL ones included, is already in the WAL file: one fsync of
        # that file makes them all durable, with no transaction of its own.
        wal = self.db_path + "-wal"
        if self._closed:
            return  # close() checkpointed everything into the synced database
        try:
            fd = os.open(wal, os.O_RDONLY)
        except FileNotFoundError:
            return  # no WAL: everything was checkpointed into the synced database
        except OSError as e:
            raise storage_error(e, wal) from None
        try:
            os.fsync(fd)
        except OSError as e:
            raise storage_error(e, wal) from None
        finally:
            os.close(fd)

    def close(self) -> None:
        """Close the connection; a second call does nothing. With FULL set first, the
        checkpoint SQLite runs when the last connection closes syncs the WAL (and with it
        every `durable=False` commit) before copying it into the synced database."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with self._read_lock:  # closed first: the writer's close is the last one
                if self._reader is not None:
                    self._reader.close()
                    self._reader = None
            try:
                if self._synchronous != "FULL":
                    self._conn.execute("PRAGMA synchronous=FULL")
                    self._synchronous = "FULL"
            except sqlite3.Error:
                pass  # closing anyway; the commits themselves were already made
            finally:
                self._conn.close()


def refuse_empty_file(db_path: str) -> None:
    """A 0-byte events.db is not an empty World: local_world never leaves one (it makes
    the file whole under a temporary name first), so something cut it short — a copy, a
    full disk, a truncation. SQLite would take it for a new database and write into it."""
    try:
        size = os.stat(db_path).st_size
    except FileNotFoundError:
        return
    except OSError as e:
        raise storage_error(e, db_path) from None
    if size == 0:
        raise StorageDamagedError(db_path, "SQLite: the file is empty (0 bytes): damaged, not a store "
                           "local_world wrote", "restore it from a backup, or remove it (and its "
                           "-wal and -shm files) to start an empty World there")


def create_atomically(db_path: str) -> None:
    """Make events.db, if it is missing, whole before it has its name: an empty World's
    database (WAL mode, its tables) built under a temporary name, synced, then linked into
    place (no replace: a concurrent creator's file wins) and the folder synced. A crash
    leaves a temporary file, never a 0-byte or half-made events.db."""
    if os.path.exists(db_path):
        return
    folder = os.path.dirname(db_path)
    temp = os.path.join(folder, f".tmp-{uuid.uuid4().hex}-{os.path.basename(db_path)}")
    try:
        conn = sqlite3.connect(temp, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            for statement in EVENTS_SCHEMA:
                conn.execute(statement)
            SqliteCatalogue.create_schema(conn)
        finally:
            conn.close()  # a clean close folds the WAL back and removes it
        fd = os.open(temp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(temp, db_path)
        except FileExistsError:
            pass
        REAL_POSIX.fsync_dir(folder)
    except sqlite3.Error as e:
        raise sqlite_storage_error(db_path, e) from None
    except OSError as e:
        raise storage_error(e, db_path) from None
    finally:
        for leftover in (temp, temp + "-wal", temp + "-shm"):
            try:
                os.unlink(leftover)
            except FileNotFoundError:
                pass


def connect_read_only(db_path: str) -> sqlite3.Connection:
    """A connection that cannot write, for a World opened read-only. SQLite opens a WAL
    database read-only only when its -wal and -shm files exist or can be made; on a
    read-only filesystem with no -wal (the last writer closed cleanly, so every event is
    in events.db) the file is opened as immutable, which needs neither."""
    def connect(options: str) -> sqlite3.Connection:
        conn = sqlite3.connect(f"file:{urllib.parse.quote(db_path)}?{options}", uri=True,
                               timeout=30.0, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone()
        except sqlite3.Error:
            conn.close()
            raise
        return conn

    if not os.path.exists(db_path):
        raise StorageError(db_path, "no such file: nothing was written there yet",
                           "give the data dir a World wrote")
    try:
        return connect("mode=ro")
    except sqlite3.OperationalError as e:
        if getattr(e, "sqlite_errorname", "") != "SQLITE_CANTOPEN":
            raise sqlite_storage_error(db_path, e) from None
        if os.path.exists(db_path + "-wal"):
            raise StorageError(db_path, "SQLite cannot open its -wal file read-only without "
                               "its -shm file", "copy the data dir somewhere writable and "
                               "read the copy (the -wal holds events not in events.db)") from None
    except sqlite3.Error as e:
        raise sqlite_storage_error(db_path, e) from None
    try:
        return connect("mode=ro&immutable=1")
    except sqlite3.Error as e:
        raise sqlite_storage_error(db_path, e) from None
