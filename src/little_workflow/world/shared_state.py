"""In-process state shared by every World over the same storage.

Keyed by **filesystem-object identity + normalized data root** (local_world: realpath of
the data dir). Identity is a token stored on the filesystem object (see identity.py), and
the registry holds states weakly: a state lives as long as a World uses it, so Worlds over
private filesystems are not kept alive by this module.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from .identity import object_token
from .vocabulary import RUN_ENDINGS

#: Terminal events and the status they end a run with.
TERMINAL_STATUS = RUN_ENDINGS
#: Ledgers are a cache of storage: past this many, the oldest of runs whose lock this
#: process does not hold are dropped (reading the run again restores them, receipts too).
MAX_IDLE_LEDGERS = 1024
#: Artifact ids known to exist are remembered up to this many, then forgotten at once.
MAX_KNOWN_ARTIFACTS = 65536


def normalize_root(root: str) -> str:
    root = root.replace("\\", "/")
    while "//" in root:
        root = root.replace("//", "/")
    return root.rstrip("/") or "/"


@dataclass
class RunLedger:
    """What this process knows of one run's committed log: enough to allocate the next
    sequence and answer receipt lookups without reading the log on every append."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    loaded: bool = False
    last_sequence: int = 0
    receipts: dict[str, tuple[int, str]] = field(default_factory=dict)  # key -> (seq, digest)
    finished: str | None = None  # the terminal status, once the run has ended
    finished_at: int = 0  # the terminal event's sequence
    #: Bumped by every rollback: appends allocated before it carry the old epoch.
    epoch: int = 0
    #: (createdAt, requestDigest) of event 1: which incarnation of the run id this is
    #: (a run deleted and created again under the same id is another one).
    first: tuple[str, str] | None = None
    #: This process holds the run's lock: no other process can delete the run meanwhile.
    held: bool = False
    #: No longer in the storage state: whoever still has it takes the state's ledger again.
    dropped: bool = False
    last_ticket: Any = None  # the last append handed to the store (it may not be committed)
    #: (sequence, start) of every `run.started` known: the newest fences older executions.
    starts: list[tuple[int, int]] = field(default_factory=list)
    newest_start: int = 0  # the highest start in `starts` (0: none)

    def note_start(self, sequence: int, payload: Any) -> None:
        start = payload.get("start") if isinstance(payload, dict) else None
        if type(start) is int and (sequence, start) not in self.starts:
            self.starts.append((sequence, start))
            self.newest_start = max(self.newest_start, start)

    def note(self, sequence: int, key: str | None, digest: str, type_: str) -> None:
        if sequence > self.last_sequence:
            self.last_sequence = sequence
        if key is not None:
            self.receipts.setdefault(key, (sequence, digest))
        if type_ in TERMINAL_STATUS:
            self.finished = TERMINAL_STATUS[type_]
            self.finished_at = sequence

    def note_event(self, event: Any) -> None:
        if event.sequence == 1:
            self.first = (event.created_at, event.request_digest)
        if event.type == "run.started":
            self.note_start(event.sequence, event.payload)
        self.note(event.sequence, event.append_idempotency_key, event.request_digest, event.type)

    def reset(self) -> None:
        """Forget everything, to read the run again from storage; appends allocated
        before carry the old epoch."""
        self.epoch += 1
        self.loaded, self.last_sequence, self.receipts = False, 0, {}
        self.finished, self.finished_at, self.first = None, 0, None
        self.starts, self.newest_start = [], 0

    def rollback(self, epoch: int, first_lost: int) -> None:
        """Forget appends from `first_lost` on (allocated but never committed), once per
        epoch: every later append of that epoch failed with it."""
        if epoch != self.epoch:
            return
        self.epoch += 1
        self.last_sequence = min(self.last_sequence, first_lost - 1)
        self.receipts = {k: v for k, v in self.receipts.items() if v[0] < first_lost}
        self.starts = [s for s in self.starts if s[0] < first_lost]
        self.newest_start = max((start for _, start in self.starts), default=0)
        if self.finished is not None and self.finished_at >= first_lost:
            self.finished, self.finished_at = None, 0
        if first_lost <= 1:
            self.first = None


class BoundedSet(set):
    """A set that forgets everything once it holds `limit` members (a cache that must
    not grow with everything a long-lived process ever saw)."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def add(self, item: Any) -> None:
        if len(self) >= self.limit:
            self.clear()
        super().add(item)


@dataclass(eq=False)
class StorageState:
    key: tuple[Any, ...]
    lock: threading.Lock = field(default_factory=threading.Lock)
    ledgers: dict[str, RunLedger] = field(default_factory=dict)
    active_runs: dict[str, str] = field(default_factory=dict)  # run id / fence -> token
    known_artifacts: set[str] = field(default_factory=lambda: BoundedSet(MAX_KNOWN_ARTIFACTS))
    named_locks: dict[str, threading.Lock] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)  # e.g. the one SQLite store
    fences: dict[str, Callable[[], None]] = field(default_factory=dict)  # run id -> lease check
    open_worlds: int = 0
    closers: list[Callable[[], None]] = field(default_factory=list)

    def opened(self) -> None:
        """One more World uses this storage (`storage_state_for` counts it as it hands
        the state out, so no other thread can give the state back in between)."""
        with self.lock:
            self.open_worlds += 1

    def closed(self) -> None:
        """A World over this storage was closed: the last one closes shared resources.
        Counted down and unregistered under the registry's guard: a World being opened
        meanwhile either gets this state before it closes, or a fresh one."""
        with _states_guard:
            with self.lock:
                self.open_worlds -= 1
                if self.open_worlds > 0:
                    return
                closers, self.closers = self.closers, []
                self.resources.clear()
                self.ledgers.clear()
            if _states.get(self.key) is self:
                del _states[self.key]
        for close in closers:
            close()

    def ledger(self, run_id: str) -> RunLedger:
        ledger = self.ledgers.get(run_id)
        if ledger is None:
            with self.lock:
                ledger = self.ledgers.get(run_id)
                if ledger is None:
                    ledger = self.ledgers[run_id] = RunLedger()
                    if len(self.ledgers) > MAX_IDLE_LEDGERS:
                        self._evict_idle(ledger)
        return ledger

    def _evict_idle(self, keep: RunLedger) -> None:
        """Under self.lock: drop the oldest ledgers of runs not held here, down to half
        the limit (so eviction runs once per MAX_IDLE_LEDGERS / 2 new ledgers)."""
        for run_id, ledger in list(self.ledgers.items()):
            if len(self.ledgers) <= MAX_IDLE_LEDGERS // 2:
                return
            if ledger is not keep and not ledger.held:
                self._drop(run_id, ledger)

    def forget(self, run_id: str, ledger: RunLedger | None = None, *, wait: bool = False) -> None:
        """Drop the ledger of `run_id` (only if it is `ledger`, when given). Without
        `wait`, a ledger in use by an append is left alone. (Ledger lock before state
        lock, never the other way round while blocking.)"""
        current = self.ledgers.get(run_id)
        if current is None or (ledger is not None and current is not ledger):
            return
        if not current.lock.acquire(blocking=wait):
            return
        try:
            with self.lock:
                if self.ledgers.get(run_id) is current:
                    current.dropped = True
                    del self.ledgers[run_id]
        finally:
            current.lock.release()

    def _drop(self, run_id: str, ledger: RunLedger) -> None:
        """Under self.lock: drop a ledger no append is using."""
        if not ledger.lock.acquire(blocking=False):
            return
        try:
            ledger.dropped = True
            del self.ledgers[run_id]
        finally:
            ledger.lock.release()

    def named_lock(self, name: str) -> threading.Lock:
        with self.lock:
            return self.named_locks.setdefault(name, threading.Lock())


_states: "weakref.WeakValueDictionary[tuple[Any, ...], StorageState]" = weakref.WeakValueDictionary()
_states_guard = threading.Lock()

# Storages given back by Worlds that were dropped without close(). The garbage collector
# runs a World's finalizer in the middle of whatever allocation triggered it — possibly in
# a thread that holds `_states_guard` or the state's own lock, and `closed()` takes both:
# closing there deadlocked that thread. So a finalizer only queues (an atomic append) and
# the queue is worked off at points that hold no lock: the next World opened or closed.
_dropped: "deque[StorageState]" = deque()


def release_when_safe(state: StorageState) -> None:
    """A World's finalizer: give `state` back at the next safe point."""
    _dropped.append(state)


def release_dropped() -> None:
    """Give back the storage of every World dropped without close(). Call holding no lock."""
    while True:
        try:
            state = _dropped.popleft()
        except IndexError:
            return
        state.closed()


def storage_state_for(fs: Any, root: str, *, local_dir: str | None = None) -> StorageState:
    release_dropped()
    if local_dir is not None:
        key: tuple[Any, ...] = ("local", os.path.realpath(local_dir))
    else:
        from fsspec.implementations.local import LocalFileSystem

        norm = normalize_root(root)
        if isinstance(fs, LocalFileSystem):
            # Two spellings of one directory are one storage.
            key = ("local-fsspec", os.path.realpath(norm))
        else:
            key = (object_token(fs), norm)
    with _states_guard:
        state = _states.get(key)
        if state is None:
            state = _states[key] = StorageState(key=key)
        state.opened()  # the caller's World owns this count: it gives it back (closed())
        return state
