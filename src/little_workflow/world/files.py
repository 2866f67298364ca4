"""Files, folders and documents of a World, by path relative to its data dir, over its
Publisher. Everything the runtime keeps besides events and artifacts — memory files,
kept plans, workflow versions, outer-loop manifests, scratch folders, bash mounts,
tombstones — goes through these World methods, so a wrapper (tracing_world) sees every
read and write."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any, Callable, Iterator, Protocol

from ..errors import DocumentCorruptError, StorageError, WorldPathError
from .publish import Publisher, is_temp_name
from .storage_errors import storage_error

#: How many times `update_document` reads again after losing a race to another writer.
UPDATE_ATTEMPTS = 200

class FilesLike(Protocol):
    """Files, folders and documents by path relative to a World's root: what works on a
    World's files alone (run deletion, tombstones) asks for no more."""

    def path(self, *parts: str) -> str: ...
    def read_file(self, relative_path: str) -> bytes | None: ...
    def write_file(self, relative_path: str, data: bytes, *, durable: bool = True) -> None: ...
    def create_file(self, relative_path: str, data: bytes) -> bool: ...
    def remove_file(self, relative_path: str, *, durable: bool = True) -> bool: ...
    def remove_dir(self, relative_path: str) -> None: ...
    def list_dir(self, relative_path: str = "") -> list[str]: ...
    def file_info(self, relative_path: str) -> dict[str, Any] | None: ...
    def ensure_dir(self, relative_path: str) -> None: ...
    def read_document(self, relative_path: str) -> Any | None: ...
    def write_document(self, relative_path: str, doc: Any) -> None: ...
    def create_document(self, relative_path: str, doc: Any) -> bool: ...


class WorldFiles:
    """The file methods of a World (its base class)."""

    def __init__(self, publisher: Publisher, data_dir: str):
        self.publisher = publisher
        self.data_dir = data_dir

    def path(self, *parts: str) -> str:
        return "/".join((self.data_dir.rstrip("/"), *parts))

    def _file_path(self, relative_path: str) -> str:
        if not isinstance(relative_path, str):
            raise WorldPathError(f"invalid path {relative_path!r}: a string relative to the data dir")
        rel = relative_path.strip("/")
        if rel and rel[0] != "." and "/." not in rel and "//" not in rel:
            # No segment is empty or starts with a dot (so none is '.', '..' or a temp
            # name): the common case, checked without splitting the path.
            return f"{self.data_dir.rstrip('/')}/{rel}"
        parts = rel.split("/") if rel else []
        if any(p in ("", ".", "..") or is_temp_name(p) for p in parts):
            raise WorldPathError(f"invalid path {relative_path!r}: no empty, '.', '..' or temp segments")
        return self.path(*parts) if parts else self.data_dir

    def read_file(self, relative_path: str) -> bytes | None:
        """The bytes of a file, or None when there is none."""
        return self.publisher.read(self._file_path(relative_path))

    def write_file(self, relative_path: str, data: bytes, *, durable: bool = True) -> None:
        """Replace a file atomically (readers see the old or the new bytes), creating its
        folder; durable: file and directory entries synced where the backend can."""
        path = self._file_path(relative_path)
        with _storage(path):
            self.publisher.ensure_dir(path.rsplit("/", 1)[0])
            self.publisher.replace(path, bytes(data), durable=durable)

    def create_file(self, relative_path: str, data: bytes) -> bool:
        """Publish a file once: False (and nothing changed) when it already exists."""
        path = self._file_path(relative_path)
        with _storage(path):
            self.publisher.ensure_dir(path.rsplit("/", 1)[0])
            return self.publisher.publish_if_absent(path, bytes(data))

    def remove_file(self, relative_path: str, *, durable: bool = True) -> bool:
        """Remove a file; False when there was none. `durable=False`: a power cut may
        undo the removal (made durable by `sync()`, or by the next durable write there)."""
        path = self._file_path(relative_path)
        with _storage(path):
            return self.publisher.remove(path, durable=durable)

    def remove_dir(self, relative_path: str) -> None:
        """Remove an empty folder."""
        path = self._file_path(relative_path)
        with _storage(path):
            self.publisher.remove_dir(path)

    def list_dir(self, relative_path: str = "") -> list[str]:
        """Names directly in a folder (temporary names left out), sorted."""
        return self.publisher.list_names(self._file_path(relative_path))

    def file_info(self, relative_path: str) -> dict[str, Any] | None:
        """`{"type": "file" | "directory", "size": n}` or None."""
        return self.publisher.info(self._file_path(relative_path))

    def ensure_dir(self, relative_path: str) -> None:
        path = self._file_path(relative_path)
        with _storage(path):
            self.publisher.ensure_dir(path)

    def read_document(self, relative_path: str) -> Any | None:
        raw = self.read_file(relative_path)
        if raw is None:
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise DocumentCorruptError(self._file_path(relative_path), str(e)) from None

    def write_document(self, relative_path: str, doc: Any) -> None:
        """Replace a small JSON document atomically (temp, fsync, rename, dir fsync)."""
        self.write_file(relative_path, _document_bytes(doc))

    def create_document(self, relative_path: str, doc: Any) -> bool:
        """Publish a JSON document once; False when it already exists."""
        return self.create_file(relative_path, _document_bytes(doc))

    def update_document(self, relative_path: str, change: Callable[[Any], Any], *,
                        durable: bool = True) -> Any:
        """Read-modify-write a small JSON document with no lost update: `change(doc)`
        (None when there is none) returns the new document; it is written only if the
        document is still the one read (compare-and-swap: the store's conditional write
        on object stores, a kernel lock of the folder on the local disk, a lock of the
        process elsewhere), else `change` is called again on what is there now. A
        `change` that returns its argument unchanged writes nothing. Returns the document
        as written (or as found)."""
        path = self._file_path(relative_path)
        for attempt in range(UPDATE_ATTEMPTS):
            with _storage(path):
                found = self.publisher.read_versioned(path)
            doc = None
            if found is not None:
                try:
                    doc = json.loads(found[0])
                except ValueError as e:
                    raise DocumentCorruptError(path, str(e)) from None
            new = change(doc)
            if new == doc:
                return doc
            with _storage(path):
                if self.publisher.replace_if(path, _document_bytes(new),
                                             found[1] if found is not None else None,
                                             durable=durable):
                    return new
            # Another writer got there first: read again (a little later when it keeps
            # happening, so contenders spread out).
            if attempt >= 3:
                time.sleep(min(0.05, 0.001 * 2 ** (attempt - 3)))
        raise StorageError(path, f"could not update the document after {UPDATE_ATTEMPTS} "
                           "attempts: other writers changed it every time",
                           "try again; if it persists, something rewrites it in a loop")


@contextlib.contextmanager
def _storage(path: str) -> Iterator[None]:
    """The storage failing (disk full, read-only) becomes one StorageError naming the file."""
    try:
        yield
    except (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError):
        raise
    except OSError as e:
        raise storage_error(e, path) from None


def _document_bytes(doc: Any) -> bytes:
    return json.dumps(doc, ensure_ascii=False, indent=2, sort_keys=True).encode()
