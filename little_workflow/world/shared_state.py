"""In-process state shared by every World over the same storage.

Keyed by **filesystem-object identity + normalized data root** (local_world: realpath of
the data dir). fsspec's own `__eq__`/`__hash__` compare cache tokens — two private
MemoryFileSystems can compare equal — so identity (`id()`) is the key, and the object is
kept alive here so that its id is never reused by another filesystem.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any


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

    def note(self, sequence: int, key: str | None, digest: str) -> None:
        if sequence > self.last_sequence:
            self.last_sequence = sequence
        if key is not None:
            self.receipts.setdefault(key, (sequence, digest))


@dataclass
class StorageState:
    key: tuple[Any, ...]
    owner: Any  # the filesystem object: holding it keeps id(owner) unique
    lock: threading.Lock = field(default_factory=threading.Lock)
    ledgers: dict[str, RunLedger] = field(default_factory=dict)
    active_runs: dict[str, str] = field(default_factory=dict)  # run id / fence -> token
    known_artifacts: set[str] = field(default_factory=set)
    named_locks: dict[str, threading.Lock] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)  # e.g. the one SQLite store

    def ledger(self, run_id: str) -> RunLedger:
        ledger = self.ledgers.get(run_id)
        if ledger is None:
            with self.lock:
                ledger = self.ledgers.setdefault(run_id, RunLedger())
        return ledger

    def named_lock(self, name: str) -> threading.Lock:
        with self.lock:
            return self.named_locks.setdefault(name, threading.Lock())


_states: dict[tuple[Any, ...], StorageState] = {}
_states_guard = threading.Lock()


def storage_state_for(fs: Any, root: str, *, local_dir: str | None = None) -> StorageState:
    if local_dir is not None:
        key: tuple[Any, ...] = ("local", os.path.realpath(local_dir))
    else:
        from fsspec.implementations.local import LocalFileSystem

        norm = normalize_root(root)
        if isinstance(fs, LocalFileSystem):
            # Two spellings of one directory are one storage.
            key = ("local-fsspec", os.path.realpath(norm))
        else:
            key = (id(fs), norm)
    with _states_guard:
        state = _states.get(key)
        if state is None:
            state = _states[key] = StorageState(key=key, owner=fs)
        return state
