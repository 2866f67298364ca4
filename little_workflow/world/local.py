"""local_world: the embedded default — SQLite/WAL events, files on the local disk."""

from __future__ import annotations

import os
import weakref

from .clock import Clock
from .core import World
from .event_stores import SqliteEventStore
from .locks import DirectoryLocks
from .posix import REAL_POSIX
from .publish import LocalPublisher
from .shared_state import storage_state_for
from .storage_errors import storage_error

LAYOUT_DIRS = ("events", "artifacts/blobs", "runs", "locks", "outer-loops", "memory", "workflow-versions")


def local_world(
    data_dir: str = ".little-workflow",
    max_concurrent_steps: int | None = None,
    *,
    clock: Clock | None = None,
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
    naming the path when the dir cannot be created or is not writable."""
    from fsspec.implementations.local import LocalFileSystem

    root = os.path.abspath(os.fspath(data_dir))
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
        )
        world.catalogue.ensure_built()
        return world
    except BaseException:
        state.closed()  # no World took the count
        raise
