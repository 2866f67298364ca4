"""local_world: the embedded default — SQLite/WAL events, files on the local disk."""

from __future__ import annotations

import os
import weakref
from typing import Any

from ..errors import CatalogueNotBuiltError, StoragePermissionError, StorageReadOnlyError
from .clock import Clock
from .core import World
from .event_stores import SqliteEventStore
from .kernel_locks import KernelLocks
from .locks import DirectoryLocks, ReadOnlyLocks
from .posix import REAL_POSIX
from .publish import LocalPublisher, ReadOnlyPublisher
from .shared_state import storage_state_for
from .storage_errors import storage_error

LAYOUT_DIRS = ("events", "artifacts/blobs", "runs", "locks", "outer-loops", "memory", "workflow-versions")


def local_world(
    data_dir: str = ".little-workflow",
    max_concurrent_steps: int | None = None,
    *,
    clock: Clock | None = None,
    read_only: bool = False,
) -> World:
    """The embedded default World: events in SQLite (WAL, `synchronous=FULL`) at
    `<data_dir>/events/events.db`, artifacts, scratch and memory as files under
    `data_dir` (created if missing, with its layout folders). Runs survive the process
    and are locked across processes, so `little` and other programs can share the dir.

    `max_concurrent_steps`: at most this many steps of all runs on this World execute at
    once (None: no limit). `clock`: where time comes from (default: system time; tests
    pass `lw.testing.FakeClock`). Call `close()` when done, or use it as a context manager
    (`with lw.local_world("data") as world: ...`); Worlds over one data dir in a process
    share one SQLite connection, closed with the last of them. Raises `StorageError`
    naming the path when the dir cannot be created or is not writable.

    `read_only=True` opens an existing data dir for reading only — on a read-only mount
    or snapshot too: nothing is created or written (every write raises `StorageError`),
    and runs, events, artifacts and the catalogue read as usual."""
    from fsspec.implementations.local import LocalFileSystem

    root = os.path.abspath(os.fspath(data_dir))
    if read_only:
        return _open_read_only(root, max_concurrent_steps, clock, LocalFileSystem())
    if os.path.isdir(root) and not os.access(root, os.W_OK):
        on_read_only_fs = bool(os.statvfs(root).f_flag & os.ST_RDONLY)
        cls = StorageReadOnlyError if on_read_only_fs else StoragePermissionError
        raise cls(os.path.join(root, "events", "events.db"), "the data dir is read-only (" + (
            "a read-only filesystem" if on_read_only_fs else "no permission to write") + ")",
            "local_world(data_dir, read_only=True) reads it, as do the little commands that "
            "only read (runs, events, replay, verify, inspect, artifacts)")
    for sub in LAYOUT_DIRS:
        try:
            # Each new directory fsynced into its parent: events.db and every published
            # file hang from these.
            REAL_POSIX.makedirs(os.path.join(root, sub))
        except OSError as e:  # read-only or unwritable data dir, a file in the way
            raise storage_error(e, os.path.join(root, sub)) from None
    fs = LocalFileSystem()
    state = storage_state_for(fs, root, local_dir=root)
    try:
        # One SQLite connection per storage in this process: Worlds over one data dir
        # share it, and the last of them to close (or be collected) closes it.
        with state.lock:
            store = state.resources.get("sqlite")
            if store is None or store.closed:
                store = state.resources["sqlite"] = SqliteEventStore(
                    os.path.join(root, "events", "events.db")
                )
                state.closers.append(store.close)
                weakref.finalize(state, store.close)
        world = World(
            kind="local",
            files=fs,
            data_dir=root,
            events=store,
            publisher=LocalPublisher(fs),
            state=state,
            cross_process_locks=DirectoryLocks(os.path.join(root, "locks")),
            max_concurrent_steps=max_concurrent_steps,
            host_sources_allowed=True,
            clock=clock,
            # Queue slots: held by the kernel, dropped when the holder dies (no pid check).
            slot_locks=KernelLocks(os.path.join(root, "locks")),
        )
        world.catalogue.ensure_built()
        return world
    except BaseException:
        state.closed()  # no World took the count
        raise


def _open_read_only(root: str, max_concurrent_steps: int | None, clock: Clock | None,
                    fs: Any) -> World:
    db_path = os.path.join(root, "events", "events.db")
    state = storage_state_for(fs, root, local_dir=root)
    try:
        # Its own connection, not a writer's (which a World of this process may share).
        with state.lock:
            store = state.resources.get("sqlite-read-only")
            if store is None or store.closed:
                store = state.resources["sqlite-read-only"] = SqliteEventStore(
                    db_path, read_only=True)
                state.closers.append(store.close)
                weakref.finalize(state, store.close)
        if store.catalogue_needs_build:
            raise CatalogueNotBuiltError(db_path)
        return World(
            kind="local",
            files=fs,
            data_dir=root,
            events=store,
            publisher=ReadOnlyPublisher(LocalPublisher(fs)),
            state=state,
            cross_process_locks=ReadOnlyLocks(os.path.join(root, "locks")),
            max_concurrent_steps=max_concurrent_steps,
            host_sources_allowed=True,
            clock=clock,
            read_only=True,
            slot_locks=ReadOnlyLocks(os.path.join(root, "locks")),
        )
    except BaseException:
        state.closed()
        raise
