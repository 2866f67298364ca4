"""Publishing a file under its final name atomically and without overwriting.

Every World writes its immutable files (events, artifact blobs and manifests) through one
`Publisher`, chosen once per filesystem. fsspec itself offers no such operation: `mv`
silently overwrites on every backend and is a copy + delete except on local disk, and
MemoryFileSystem's `mv`/`pipe_file` scan the whole store. So each backend gets the
cheapest primitive that really is atomic there.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import uuid
from abc import ABC, abstractmethod
from typing import Any, Callable, Iterable

from .identity import object_lock
from .posix import REAL_POSIX, Posix
from .shared_state import BoundedSet
from .storage_errors import read_only_error

TEMP_PREFIX = ".tmp-"
#: What removing a folder that still holds something fails with: POSIX says ENOTEMPTY or
#: EEXIST; some fsspec backends raise a bare OSError (no errno) for it.
NOT_EMPTY_ERRNOS = frozenset({errno.ENOTEMPTY, errno.EEXIST, None})


def temp_name_for(path: str) -> str:
    head, _, tail = path.rpartition("/")
    return f"{head}/{TEMP_PREFIX}{uuid.uuid4().hex}-{tail}"


def is_temp_name(name: str) -> bool:
    return name.rsplit("/", 1)[-1].startswith(TEMP_PREFIX)


class Publisher(ABC):
    """Small storage primitives over one filesystem; paths are the filesystem's own."""

    #: True when a write can block for long (fsync, network): callers on an event loop
    #: should then move it to a worker thread.
    blocking: bool = True
    #: What the conformance suite measured for this backend (README table).
    atomic_publication: str = ""
    multi_writer: str = ""
    #: True where a folder emptied of its files stays (and is listed) until removed.
    empty_folders_stay: bool = True
    #: True where `remove` of a file that is not there answers False. An object store's
    #: delete succeeds either way: it answers True (asking first would cost a request).
    remove_tells_absence: bool = True

    @abstractmethod
    def publish_if_absent(self, path: str, data: bytes, *, durable: bool = True) -> bool:
        """Make `path` hold `data`; False (and nothing changed) if `path` already exists."""

    def read(self, path: str) -> bytes | None:
        """The bytes at `path`, or None when there is no such file."""
        try:
            return bytes(self.fs.cat_file(path))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None

    def replace(self, path: str, data: bytes, *, durable: bool = True) -> None:
        """Atomically make `path` hold `data`, overwriting (mutable documents: manifests
        of outer loops, memory files). Default: temp + mv, fine where mv is atomic."""
        self.write_temp_then_move(path, data)

    def write_temp_then_move(self, path: str, data: bytes) -> None:
        tmp = temp_name_for(path)
        self.fs.pipe_file(tmp, data)
        self.fs.mv(tmp, path)

    def ensure_dir(self, path: str, *, durable: bool = True) -> None:
        """Make the directory and its parents. `durable=False`: names a power cut may
        take back (for folders whose files are not durable either)."""
        self.fs.makedirs(path, exist_ok=True)

    def sync(self) -> None:
        """Make every earlier non-durable publication durable (default: nothing to do)."""
        return None

    def make_durable(self, folder: str) -> None:
        """Make the names in `folder` durable, whoever published them (another process's
        non-durable events): default, nothing to do."""
        return None

    def cross_process_locks(self, root: str) -> Any:
        """The run locks (and outer-loop fences) of a World rooted at `root` across
        processes, or None where this backend has none: run locks then hold within the
        process only (the README's backend tables say which have them)."""
        return None

    def list_names(self, path: str) -> list[str]:
        """Names (not paths) directly under `path`, temp names excluded, sorted."""
        try:
            entries = self.fs.ls(path, detail=False)
        except FileNotFoundError:
            return []
        names = {str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries}
        return sorted(n for n in names if n and not is_temp_name(n))

    def list_page(self, path: str, start_after: str, limit: int) -> list[str] | None:
        """Up to `limit` files anywhere under `path`, as paths relative to it, that sort
        after `start_after`, in name order — one listing that starts at a key (an object
        store). None where the store has no such listing: the caller (the run catalogue)
        then lists folder by folder with `list_names`."""
        return None

    def remove(self, path: str, *, durable: bool = True) -> bool:
        """Remove the file at `path`; False when there was none (where the store can tell:
        `remove_tells_absence`). `durable=False`: a removal a power cut may undo (for
        entries whose return does no harm)."""
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            return False
        return True

    def remove_dir(self, path: str, *, durable: bool = True) -> bool:
        """Remove an empty directory; False when it is not there or not empty (always,
        where directories are not real). `durable=False`: a removal a power cut may undo."""
        try:
            self.fs.rmdir(path)
        except (FileNotFoundError, NotADirectoryError, FileExistsError):
            return False  # not there, or (s3fs) a prefix that still holds keys
        except OSError as e:
            if e.errno in NOT_EMPTY_ERRNOS:
                return False
            raise  # refused or failed: the caller hears of it (a StorageError)
        return True

    def info(self, path: str) -> dict[str, Any] | None:
        """`{"type": "file" | "directory", "size": n}`, or None when nothing is there."""
        try:
            found = self.fs.info(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        kind = "directory" if found.get("type") == "directory" else "file"
        return {"type": kind, "size": int(found.get("size") or 0) if kind == "file" else 0}

    # ---- versioned documents: compare-and-swap -----------------------------------------
    #: True where `replace_if` holds against other processes (and hosts, on an object
    #: store); False: exact among the threads of this process only.
    versioned_across_processes: bool = False

    def read_versioned(self, path: str) -> tuple[bytes, str] | None:
        """The bytes at `path` and a version tag `replace_if` accepts, or None."""
        data = self.read(path)
        return None if data is None else (data, content_version(data))

    def replace_if(self, path: str, data: bytes, version: str | None, *,
                   durable: bool = True) -> bool:
        """Make `path` hold `data` only if it still holds the version `read_versioned`
        gave (`version=None`: only if nothing is there); False, and nothing changed,
        when another writer got there first. Default: read, compare and write under a
        lock of the filesystem object — exact within this process only."""
        with object_lock(self.fs, "versioned_documents"):
            return self.replace_if_unchanged(path, data, version, durable=durable)

    def replace_if_unchanged(self, path: str, data: bytes, version: str | None, *,
                             durable: bool = True) -> bool:
        """The compare and the write of `replace_if`, for a caller that holds whatever
        keeps other writers out."""
        current = self.read_versioned(path)
        if (current[1] if current is not None else None) != version:
            return False
        if version is None:
            return self.publish_if_absent(path, data, durable=durable)
        self.replace(path, data, durable=durable)
        return True

    fs: Any


def content_version(data: bytes) -> str:
    """A version tag that changes with the content (documents whose content never
    returns to an earlier value: counters, lists that only grow, ids never reused)."""
    import hashlib

    return hashlib.sha256(data).hexdigest()


class LocalPublisher(Publisher):
    """Local disk: temp file + fsync + `os.link` (fails if the name exists) + dir fsync.

    Every system call goes through `posix` (default: the real one; a filesystem object
    may carry its own as `fs.posix`, e.g. the power-cut model of the tests)."""

    atomic_publication = "yes: temp + fsync + link (no replace) + dir fsync"
    multi_writer = "yes: processes and threads (link is atomic)"

    def __init__(self, fs: Any, posix: Posix | None = None):
        self.fs = fs
        self.posix: Posix = posix or getattr(fs, "posix", None) or REAL_POSIX
        # Folders made already (one per run's events): a cache, so bounded.
        self._known_dirs: set[str] = BoundedSet(4096)
        self._unsynced_dirs: set[str] = set()
        self._unsynced_lock = threading.Lock()

    def publish_if_absent(self, path: str, data: bytes, *, durable: bool = True) -> bool:
        directory = os.path.dirname(path)
        if directory not in self._known_dirs:
            self.posix.makedirs(directory)
            self._known_dirs.add(directory)
        tmp = temp_name_for(path)
        try:
            fd = self.posix.create_exclusive(tmp)
        except FileNotFoundError:
            # The folder was removed since we made it (gc deleted a run, maybe in
            # another process): make it again.
            self.posix.makedirs(directory)
            fd = self.posix.create_exclusive(tmp)
        try:
            try:
                self.posix.write(fd, data)
                # The bytes are always synced before the name appears: a later directory
                # fsync must never make a name durable whose content is not.
                self.posix.fsync(fd)
            finally:
                self.posix.close(fd)
            try:
                self.posix.link(tmp, path)
            except FileExistsError:
                return False
        finally:
            try:
                self.posix.unlink(tmp)
            except FileNotFoundError:
                pass
        if durable:
            # Taken off the list *before* the fsync: a non-durable change another thread
            # makes meanwhile puts the folder back on it, and no change is left unsynced.
            with self._unsynced_lock:
                self._unsynced_dirs.discard(directory)
            try:
                self.posix.fsync_dir(directory)
            except BaseException:
                with self._unsynced_lock:
                    self._unsynced_dirs.add(directory)
                raise
        else:
            # The name survives a process kill now; a power cut only once the directory
            # is synced — by the next durable publish there, or by sync().
            with self._unsynced_lock:
                self._unsynced_dirs.add(directory)
        return True

    def cross_process_locks(self, root: str) -> Any:
        """Kernel locks on `<root>/locks/` (kernel_locks.py) — on the real disk only, not
        under a model of one (the power-cut layer of the tests)."""
        if self.posix is not REAL_POSIX:
            return None
        from .kernel_locks import KernelLocks

        return KernelLocks(os.path.join(os.path.normpath(root), "locks"))

    def sync(self) -> None:
        with self._unsynced_lock:
            pending, self._unsynced_dirs = self._unsynced_dirs, set()
        ordered = sorted(pending)
        for i, directory in enumerate(ordered):
            try:
                # Removed since (an emptied catalogue bucket, a run another process
                # gc'd): nothing in it is owed a sync; its parent's is the deleter's.
                self._fsync_dir_if_present(directory)
            except BaseException:
                with self._unsynced_lock:  # not synced: still owed
                    self._unsynced_dirs.update(ordered[i:])
                raise

    def make_durable(self, folder: str) -> None:
        # File contents are synced before their names appear: the folder's fsync is all.
        self._fsync_dir_if_present(folder)

    def _fsync_dir_if_present(self, directory: str) -> None:
        try:
            self.posix.fsync_dir(directory)
        except FileNotFoundError:
            # Deleted meanwhile (gc, maybe in another process): nothing in it is owed a
            # sync, and making the removal durable is the deleter's fsync of the parent.
            pass

    def replace(self, path: str, data: bytes, *, durable: bool = True) -> None:
        directory = os.path.dirname(path)
        self.posix.makedirs(directory)
        tmp = temp_name_for(path)
        fd = self.posix.create_exclusive(tmp)
        try:
            self.posix.write(fd, data)
            if durable:
                self.posix.fsync(fd)
        finally:
            self.posix.close(fd)
        self.posix.replace(tmp, path)
        if durable:
            self.posix.fsync_dir(directory)

    def read(self, path: str) -> bytes | None:
        try:
            return self.posix.read(path)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def ensure_dir(self, path: str, *, durable: bool = True) -> None:
        if durable:
            self.posix.makedirs(path)
            return
        if path in self._known_dirs:
            return  # removed by another process since? publish_if_absent makes it again
        missing = []
        current = os.path.abspath(path)
        while not self.posix.isdir(current):
            missing.append(current)
            current = os.path.dirname(current)
        for directory in reversed(missing):
            try:
                self.posix.mkdir(directory)
            except FileExistsError:
                pass
            with self._unsynced_lock:  # its name: durable at the next sync()
                self._unsynced_dirs.add(os.path.dirname(directory))
        self._known_dirs.add(path)

    def remove(self, path: str, *, durable: bool = True) -> bool:
        try:
            self.posix.unlink(path)
        except FileNotFoundError:
            return False
        if durable:
            self._fsync_dir_if_present(os.path.dirname(path))
        else:
            with self._unsynced_lock:
                self._unsynced_dirs.add(os.path.dirname(path))
        return True

    def remove_dir(self, path: str, *, durable: bool = True) -> bool:
        try:
            self.posix.rmdir(path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError as e:
            if e.errno in NOT_EMPTY_ERRNOS:
                return False
            raise  # refused or failed (EACCES, EROFS, EIO): not "not empty"
        if durable:
            # The parent may be gone too: another gc deleting the same run at once.
            self._fsync_dir_if_present(os.path.dirname(path))
        else:
            with self._unsynced_lock:
                self._unsynced_dirs.add(os.path.dirname(path))
        self._known_dirs.discard(path)
        return True

    def info(self, path: str) -> dict[str, Any] | None:
        try:
            st = self.posix.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if stat.S_ISDIR(st.st_mode):
            return {"type": "directory", "size": 0}
        return {"type": "file", "size": st.st_size}

    def list_names(self, path: str) -> list[str]:
        try:
            names = self.posix.listdir(path)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(n for n in names if not is_temp_name(n))

    @property
    def versioned_across_processes(self) -> bool:  # type: ignore[override]
        return self.posix is REAL_POSIX

    def replace_if(self, path: str, data: bytes, version: str | None, *,
                   durable: bool = True) -> bool:
        """Compare and write while holding a kernel lock (`flock`) on the document's
        folder: every process and thread asking opens the folder itself, so they exclude
        each other, and a holder that dies drops it. (Under a model of the disk — the
        power-cut layer of the tests — the in-process lock of the base class.)"""
        if self.posix is not REAL_POSIX:
            return super().replace_if(path, data, version, durable=durable)
        import fcntl

        directory = os.path.dirname(path)
        if directory not in self._known_dirs:
            self.posix.makedirs(directory)
            self._known_dirs.add(directory)
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:  # removed since we made it (another process)
            self.posix.makedirs(directory)
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return self.replace_if_unchanged(path, data, version, durable=durable)
        finally:
            os.close(fd)  # the unlock


def fsync_dir(directory: str) -> None:
    REAL_POSIX.fsync_dir(directory)


_MEMORY_DOCUMENTS = threading.Lock()


class MemoryPublisher(Publisher):
    """fsspec MemoryFileSystem: one `dict.setdefault` on its store, atomic under the GIL.

    `pipe_file`, `open(..., "xb")`, `exists` and `mv` all scan the whole store (O(files))
    on this backend, so the store dict is used directly for the hot path.
    """

    blocking = False
    empty_folders_stay = False  # a listing sees only the files' keys
    atomic_publication = "yes: one dict insert (setdefault) under the GIL"
    multi_writer = "threads of one process (the store lives in the process)"

    def __init__(self, fs: Any):
        from fsspec.implementations.memory import MemoryFile

        self.fs = fs
        self._file_cls = MemoryFile

    def _key(self, path: str) -> str:
        return self.fs._strip_protocol(path)

    def publish_if_absent(self, path: str, data: bytes, *, durable: bool = True) -> bool:
        key = self._key(path)
        new = self._file_cls(self.fs, key, data)
        return self.fs.store.setdefault(key, new) is new

    def replace(self, path: str, data: bytes, *, durable: bool = True) -> None:
        key = self._key(path)
        self.fs.store[key] = self._file_cls(self.fs, key, data)

    def read(self, path: str) -> bytes | None:
        f = self.fs.store.get(self._key(path))
        # getvalue() hands back the stored bytes without the copy getbuffer() would make.
        return None if f is None else f.getvalue()

    def ensure_dir(self, path: str, *, durable: bool = True) -> None:
        return None  # memory files need no parent directories

    def remove(self, path: str, *, durable: bool = True) -> bool:
        return self.fs.store.pop(self._key(path), None) is not None

    def remove_dir(self, path: str, *, durable: bool = True) -> bool:
        key = self._key(path)
        found = key in self.fs.pseudo_dirs
        self.fs.pseudo_dirs[:] = [d for d in self.fs.pseudo_dirs if d != key]
        return found

    def list_names(self, path: str) -> list[str]:
        prefix = self._key(path).rstrip("/") + "/"
        names = set()
        for key in list(self.fs.store):
            if key.startswith(prefix):
                names.add(key[len(prefix):].split("/", 1)[0])
        return sorted(n for n in names if n and not is_temp_name(n))

    def replace_if(self, path: str, data: bytes, version: str | None, *,
                   durable: bool = True) -> bool:
        # Every MemoryFileSystem instance of the global store shares it (fsspec caches
        # one per thread), so the lock cannot be one instance's: one for all, held for a
        # dict read and a dict write.
        with _MEMORY_DOCUMENTS:
            return self.replace_if_unchanged(path, data, version, durable=durable)

    def list_page(self, path: str, start_after: str, limit: int) -> list[str] | None:
        """One pass over the store (a dict: every listing here costs O(files) anyway)."""
        import heapq

        prefix = self._key(path).rstrip("/") + "/"
        start = prefix + start_after
        keys = (k for k in list(self.fs.store) if k.startswith(prefix) and k > start)
        found = heapq.nsmallest(limit, keys)
        return [k[len(prefix):] for k in found if not is_temp_name(k.rsplit("/", 1)[-1])]


class ChainedPublisher(Publisher):
    """Any other fsspec filesystem: existence check, temp write and move, serialized by an
    in-process write chain (a lock per filesystem object). Safe for writers in this
    process only: the backend offers no atomic no-overwrite primitive to do better."""

    atomic_publication = "in-process only: check + temp write + mv under a lock"
    multi_writer = "threads of one process sharing the filesystem object"

    def __init__(self, fs: Any):
        self.fs = fs
        # The chain lives on the filesystem object itself: every World over that object
        # shares it, and it goes away with the object (no registry pinning filesystems).
        self._chain = object_lock(fs, "write_chain")

    def publish_if_absent(self, path: str, data: bytes, *, durable: bool = True) -> bool:
        with self._chain:
            if self.read(path) is not None:
                return False
            self.ensure_dir(path.rsplit("/", 1)[0])
            self.write_temp_then_move(path, data)
            return True

    def replace(self, path: str, data: bytes, *, durable: bool = True) -> None:
        with self._chain:
            self.ensure_dir(path.rsplit("/", 1)[0])
            self.write_temp_then_move(path, data)


class DelegatingPublisher(Publisher):
    """A filesystem that brings its own primitives (our adapters): the same names and
    signatures as a Publisher's — `publish_if_absent(path, data, *, durable=True)`,
    optionally `replace(path, data, *, durable=True)` and `sync()`, and the `blocking`
    flag."""

    def __init__(self, fs: Any):
        self.fs = fs
        self.blocking = getattr(fs, "blocking", True)
        self.atomic_publication = getattr(fs, "atomic_publication", "by the adapter")
        self.multi_writer = getattr(fs, "multi_writer", "by the adapter")

    def publish_if_absent(self, path: str, data: bytes, *, durable: bool = True) -> bool:
        return bool(self.fs.publish_if_absent(path, data, durable=durable))

    def replace(self, path: str, data: bytes, *, durable: bool = True) -> None:
        if callable(getattr(self.fs, "replace", None)):
            self.fs.replace(path, data, durable=durable)
        else:
            super().replace(path, data, durable=durable)

    def sync(self) -> None:
        # An adapter that honours durable=False brings the sync that makes up for it.
        if callable(getattr(self.fs, "sync", None)):
            self.fs.sync()

    def make_durable(self, folder: str) -> None:
        if callable(getattr(self.fs, "make_durable", None)):
            self.fs.make_durable(folder)

    def cross_process_locks(self, root: str) -> Any:
        locks = getattr(self.fs, "cross_process_locks", None)
        return locks(root) if callable(locks) else None

    def read_versioned(self, path: str) -> tuple[bytes, str] | None:
        if callable(getattr(self.fs, "read_versioned", None)):
            found = self.fs.read_versioned(path)
            return None if found is None else (bytes(found[0]), str(found[1]))
        return super().read_versioned(path)

    def replace_if(self, path: str, data: bytes, version: str | None, *,
                   durable: bool = True) -> bool:
        if callable(getattr(self.fs, "replace_if", None)):
            return bool(self.fs.replace_if(path, data, version, durable=durable))
        return super().replace_if(path, data, version, durable=durable)

    @property
    def versioned_across_processes(self) -> bool:  # type: ignore[override]
        return bool(getattr(self.fs, "versioned_across_processes", False))


class PrefixedPublisher(Publisher):
    """fsspec DirFileSystem: the inner filesystem's publisher on joined paths."""

    def __init__(self, fs: Any, inner: Publisher):
        self.fs, self.inner = fs, inner
        self.blocking = inner.blocking
        self.atomic_publication = inner.atomic_publication
        self.multi_writer = inner.multi_writer

    def _join(self, path: str) -> str:
        return str(self.fs._join(path))

    def publish_if_absent(self, path: str, data: bytes, *, durable: bool = True) -> bool:
        return self.inner.publish_if_absent(self._join(path), data, durable=durable)

    def replace(self, path: str, data: bytes, *, durable: bool = True) -> None:
        self.inner.replace(self._join(path), data, durable=durable)

    def read(self, path: str) -> bytes | None:
        return self.inner.read(self._join(path))

    def ensure_dir(self, path: str, *, durable: bool = True) -> None:
        self.inner.ensure_dir(self._join(path), durable=durable)

    def list_names(self, path: str) -> list[str]:
        return self.inner.list_names(self._join(path))

    def list_page(self, path: str, start_after: str, limit: int) -> list[str] | None:
        return self.inner.list_page(self._join(path), start_after, limit)

    @property
    def empty_folders_stay(self) -> bool:  # type: ignore[override]
        return self.inner.empty_folders_stay

    @property
    def remove_tells_absence(self) -> bool:  # type: ignore[override]
        return self.inner.remove_tells_absence

    def sync(self) -> None:
        self.inner.sync()

    def make_durable(self, folder: str) -> None:
        self.inner.make_durable(self._join(folder))

    def cross_process_locks(self, root: str) -> Any:
        return self.inner.cross_process_locks(self._join(root))

    def remove(self, path: str, *, durable: bool = True) -> bool:
        return self.inner.remove(self._join(path), durable=durable)

    def remove_dir(self, path: str, *, durable: bool = True) -> bool:
        return self.inner.remove_dir(self._join(path), durable=durable)

    def info(self, path: str) -> dict[str, Any] | None:
        return self.inner.info(self._join(path))

    def read_versioned(self, path: str) -> tuple[bytes, str] | None:
        return self.inner.read_versioned(self._join(path))

    def replace_if(self, path: str, data: bytes, version: str | None, *,
                   durable: bool = True) -> bool:
        return self.inner.replace_if(self._join(path), data, version, durable=durable)

    @property
    def versioned_across_processes(self) -> bool:  # type: ignore[override]
        return self.inner.versioned_across_processes


class ReadOnlyPublisher(Publisher):
    """Another publisher's reads; every write refused with a StorageError naming the
    path (a World opened read-only: a read-only mount, a snapshot)."""

    def __init__(self, inner: Publisher):
        self.fs, self.inner = inner.fs, inner
        self.blocking = inner.blocking
        self.atomic_publication = inner.atomic_publication
        self.multi_writer = inner.multi_writer

    def publish_if_absent(self, path: str, data: bytes, *, durable: bool = True) -> bool:
        raise read_only_error(path)

    def replace(self, path: str, data: bytes, *, durable: bool = True) -> None:
        raise read_only_error(path)

    def write_temp_then_move(self, path: str, data: bytes) -> None:
        raise read_only_error(path)

    def ensure_dir(self, path: str, *, durable: bool = True) -> None:
        raise read_only_error(path)

    def remove(self, path: str, *, durable: bool = True) -> bool:
        raise read_only_error(path)

    def remove_dir(self, path: str, *, durable: bool = True) -> bool:
        raise read_only_error(path)

    def read(self, path: str) -> bytes | None:
        return self.inner.read(path)

    def list_names(self, path: str) -> list[str]:
        return self.inner.list_names(path)

    def list_page(self, path: str, start_after: str, limit: int) -> list[str] | None:
        return self.inner.list_page(path, start_after, limit)

    @property
    def empty_folders_stay(self) -> bool:  # type: ignore[override]
        return self.inner.empty_folders_stay

    def info(self, path: str) -> dict[str, Any] | None:
        return self.inner.info(path)

    def read_versioned(self, path: str) -> tuple[bytes, str] | None:
        return self.inner.read_versioned(path)

    def replace_if(self, path: str, data: bytes, version: str | None, *,
                   durable: bool = True) -> bool:
        raise read_only_error(path)


# Publishers for other filesystems plug in by protocol: `register_publisher(...)` at
# run time, or an entry point in the group below (how fs_adapters registers the object
# stores), so this module never imports an adapter.
ENTRY_POINT_GROUP = "little_workflow.publishers"
_registered: dict[str, Callable[[Any], Publisher]] = {}


def register_publisher(protocols: str | Iterable[str], factory: Callable[[Any], Publisher]) -> None:
    """Use `factory(fs)` as the publisher of filesystems with one of these protocols."""
    for protocol in [protocols] if isinstance(protocols, str) else protocols:
        _registered[protocol] = factory


def _registered_factory(protocols: Iterable[str]) -> Callable[[Any], Publisher] | None:
    for protocol in protocols:
        if protocol in _registered:
            return _registered[protocol]
    from importlib.metadata import entry_points

    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    for protocol in protocols:
        if protocol in found:
            factory = found[protocol].load()
            _registered[protocol] = factory
            return factory  # type: ignore[no-any-return]
    return None


def publisher_for(fs: Any) -> Publisher:
    """The publication primitive for a filesystem object (decided once per World)."""
    from fsspec.implementations.dirfs import DirFileSystem
    from fsspec.implementations.local import LocalFileSystem
    from fsspec.implementations.memory import MemoryFileSystem

    if callable(getattr(fs, "publish_if_absent", None)):
        return DelegatingPublisher(fs)
    if isinstance(fs, DirFileSystem):
        return PrefixedPublisher(fs, publisher_for(fs.fs))
    if isinstance(fs, LocalFileSystem):
        return LocalPublisher(fs)
    # Only MemoryFileSystem itself: a subclass (instrumented, fault-injecting) is used
    # through its own methods, so it sees every write.
    if type(fs) is MemoryFileSystem:
        return MemoryPublisher(fs)
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    factory = _registered_factory(protocols)
    if factory is not None:
        return factory(fs)
    return ChainedPublisher(fs)
