"""virtual_world: everything on one fsspec filesystem, one JSON file per event."""

from __future__ import annotations

import threading
from typing import Any

from .core import World
from .event_stores import FileEventStore
from .publish import publisher_for
from .shared_state import normalize_root, storage_state_for
from .storage_errors import storage_error

_url_filesystems: dict[tuple[str, str], Any] = {}
_url_guard = threading.Lock()


def filesystem_for_url(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """(filesystem, path) for an fsspec URL. One filesystem object per (protocol, options)
    in this process, so Worlds built from the same URL coordinate: fsspec caches its
    instances per thread, which would otherwise give each thread its own lock keys."""
    import fsspec
    from fsspec.core import split_protocol

    from .ids import canonical_json

    protocol, _ = split_protocol(url)
    protocol = protocol or "file"
    options = dict(storage_options or {})
    key = (protocol, canonical_json(options) if options else "")
    with _url_guard:
        fs = _url_filesystems.get(key)
        if fs is None:
            fs = fsspec.filesystem(protocol, **options)
            _url_filesystems[key] = fs
    path = fs._strip_protocol(url)
    if protocol == "memory" and not path.startswith("/"):
        path = "/" + path
    return fs, path


def virtual_world(
    fs: Any = None,
    data_dir: str | None = None,
    max_concurrent_steps: int | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    clock: Any = None,
) -> World:
    """A World on any fsspec filesystem: one JSON file per event, artifacts and
    scratch as files, all under `data_dir`.

    `fs` is a filesystem object (`data_dir` defaults to "/workflows") or an fsspec URL
    whose path is the data dir: `memory://wf` (this process only), `file:///data/wf`,
    `s3://bucket/prefix` (pass credentials and endpoint as `storage_options={...}`, given
    to fsspec). PyFilesystem2 filesystems work through
    `fs_adapters.pyfilesystem.PyFilesystemFS`. `max_concurrent_steps` caps the steps of all
    runs executing at once on this World. What each backend guarantees (atomic
    publication, durability, locks across processes) is tabled in the README. Call
    `close()` when done, or use it as a context manager."""
    if fs is None:
        raise TypeError("virtual_world needs a filesystem object or an fsspec URL")
    if isinstance(fs, str):
        fs, url_path = filesystem_for_url(fs, storage_options)
        data_dir = data_dir or url_path
    elif storage_options:
        raise TypeError("storage_options go with a URL, not with a filesystem object")
    root = normalize_root(fs._strip_protocol(data_dir or "/workflows"))
    from fsspec.implementations.local import LocalFileSystem

    if isinstance(fs, LocalFileSystem):
        import os

        root = os.path.abspath(root)
    publisher = publisher_for(fs)
    try:
        publisher.ensure_dir(root)
    except OSError as e:  # a read-only or unwritable place, a file in the way
        raise storage_error(e, root) from None
    state = storage_state_for(fs, root)
    try:
        world = World(
            kind=f"virtual({type(fs).__name__})",
            files=fs,
            data_dir=root,
            events=FileEventStore(publisher, root),
            publisher=publisher,
            state=state,
            cross_process_locks=getattr(publisher, "cross_process_locks", lambda root: None)(root),
            max_concurrent_steps=max_concurrent_steps,
            host_sources_allowed=False,
            clock=clock,
        )
        world.catalogue.ensure_built()
        return world
    except OSError as e:  # writing the catalogue's marker: the storage refused it
        state.closed()  # no World took the count
        raise storage_error(e, root) from None
    except BaseException:
        state.closed()  # no World took the count
        raise
