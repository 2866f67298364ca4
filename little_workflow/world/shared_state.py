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

#: Terminal events and the status they end a run with.
TERMINAL_STATUS = {"run.completed": "completed", "run.failed": "failed", "run.cancelled": "cancelled"}


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

    def note(self, sequence: int, key: str | None, digest: str, type_: str) -> None:
        if sequence > self.last_sequence:
            self.last_sequence = sequence
        if key is not None:
            self.receipts.setdefault(key, (sequence, digest))
        if type_ in TERMINAL_STATUS:
            self.finished = TERMINAL_STATUS[type_]
            self.finished_at = sequence

    def rollback(self, epoch: int, first_lost: int) -> None:
        """Forget appends from `first_lost` on (allocated but never committed), once per
        epoch: every later append of that epoch failed with it."""
        if epoch != self.epoch:
            return
        self.epoch += 1
        self.last_sequence = min(self.last_sequence, first_lost - 1)
        self.receipts = {k: v for k, v in self.receipts.items() if v[0] < first_lost}
        if self.finished is not None and self.finished_at >= first_lost:
            self.finished, self.finished_at = None, 0


@dataclass(eq=False)
class StorageState:
    key: tuple[Any, ...]
    lock: threading.Lock = field(default_factory=threading.Lock)
    ledgers: dict[str, RunLedger] = field(default_factory=dict)
    active_runs: dict[str, str] = field(default_factory=dict)  # run id / fence -> token
    known_artifacts: set[str] = field(default_factory=set)
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
                ledger = self.ledgers.setdefault(run_id, RunLedger())
        return ledger

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
