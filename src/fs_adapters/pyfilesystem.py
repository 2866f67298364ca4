"""PyFilesystem2 as an fsspec filesystem: `virtual_world(fs=PyFilesystemFS(MemoryFS()))`.

Publication (the one operation the World needs to be atomic) maps to PyFilesystem2's own
primitives: on filesystems with a system path (OSFS) the local publisher's system calls
(temp file + fsync + `link`, which fails if the name exists, + directory fsync; documents:
temp + fsync + `replace` + directory fsync), each directory on the way fsynced into its
parent; elsewhere a temp file + `move(overwrite=False)`, which MemoryFS does under its lock.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import threading
import uuid
import warnings
from glob import has_magic
from typing import Any, Iterator

from fsspec.spec import AbstractFileSystem

from little_workflow.world.kernel_locks import KernelLocks
from little_workflow.world.posix import REAL_POSIX, Posix
from little_workflow.world.publish import LocalPublisher, content_version


def _import_fs() -> Any:
    # fs 2.4.16 imports pkg_resources at import time: setuptools 80-81 warn about it
    # (and 82+ removed it, hence the pin in the `pyfs` extra).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        import fs
        import fs.errors

    return fs


@contextlib.contextmanager
def _mapped_errors(path: str) -> Iterator[None]:
    """PyFilesystem2's errors as the builtin OSErrors fsspec callers catch, with the errno
    that says what failed (the World makes its typed StorageError from it): the OS's own
    error where PyFilesystem2 wrapped one (OSFS keeps it as `exc`), else the errno of the
    PyFilesystem2 error's kind."""
    errors = _import_fs().errors
    try:
        yield
    except errors.ResourceNotFound:
        raise FileNotFoundError(errno.ENOENT, "no such file or directory", path) from None
    except (errors.DestinationExists, errors.FileExists, errors.DirectoryExists):
        raise FileExistsError(errno.EEXIST, "file exists", path) from None
    except errors.DirectoryExpected:
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", path) from None
    except errors.FileExpected:
        raise IsADirectoryError(errno.EISDIR, "is a directory", path) from None
    except errors.DirectoryNotEmpty:
        raise OSError(errno.ENOTEMPTY, "directory not empty", path) from None
    except errors.ResourceReadOnly:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), path) from None
    except errors.InsufficientStorage:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path) from None
    except (errors.PermissionDenied, errors.RemoveRootError) as e:
        code = _wrapped_errno(e) or errno.EACCES
        raise PermissionError(code, os.strerror(code), path) from None
    except errors.OperationFailed as e:
        wrapped = _wrapped_errno(e)
        if wrapped is None:
            raise
        raise OSError(wrapped, os.strerror(wrapped), path) from None


def _wrapped_errno(e: BaseException) -> int | None:
    """The errno of the OSError a PyFilesystem2 error wraps (`exc`), if any."""
    wrapped = getattr(e, "exc", None)
    return wrapped.errno if isinstance(wrapped, OSError) and wrapped.errno else None


class _WriteBuffer(io.BytesIO):
    """Collects a write and hands it to PyFilesystem2 in one call on close."""

    def __init__(self, owner: "PyFilesystemFS", path: str, exclusive: bool, initial: bytes = b""):
        super().__init__()
        self._owner, self._path, self._exclusive = owner, path, exclusive
        self._done = False
        if initial:
            self.write(initial)

    def close(self) -> None:
        if not self._done:
            self._done = True
            data = self.getvalue()
            if self._exclusive:
                if not self._owner.publish_if_absent(self._path, data):
                    super().close()
                    raise FileExistsError(errno.EEXIST, "file exists", self._path)
            else:
                self._owner._write(self._path, data)
        super().close()


class PyFilesystemFS(AbstractFileSystem):
    """An fsspec filesystem over any PyFilesystem2 `FS` object."""

    protocol = "pyfs"
    cachable = False  # fsspec would otherwise hand back one instance for equal-looking FS reprs
    root_marker = "/"
    blocking = True
    atomic_publication = "yes: temp + link (system path) or move(overwrite=False) under the FS lock"
    multi_writer = "threads of one process; OSFS also processes (link)"

    def __init__(self, pyfs: Any, posix: Posix | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        _import_fs()
        self.pyfs = pyfs
        self._lock = threading.RLock()
        # With a system path: the system calls for durable publication (tests pass a
        # power-cut model), and the directories known to be durable in their parent.
        self.posix = posix or REAL_POSIX
        self._local = LocalPublisher(self, posix=self.posix)
        self._durable_dirs: set[str] = set()

    @property
    def fsid(self) -> str:
        return f"pyfs-{id(self.pyfs)}"

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        path = str(path)
        if path.startswith("pyfs://"):
            path = path[len("pyfs://") :]
        path = "/" + path.lstrip("/")
        return path.rstrip("/") or "/"

    # ---- primitives -------------------------------------------------------------------
    # fsspec semantics, as its own abstract test suite checks them: directories are real,
    # `rm(recursive=True)` removes them, errors are the builtin OSError subclasses.

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        path = self._strip_protocol(path)
        with _mapped_errors(path):
            info = self.pyfs.getinfo(path, namespaces=["details"])
            if not info.is_dir:
                entries = [self._entry(path, info)]
            else:
                entries = [
                    self._entry(self._join(path, i.name), i)
                    for i in self.pyfs.scandir(path, namespaces=["details"])
                ]
        entries.sort(key=lambda e: e["name"])
        return entries if detail else [e["name"] for e in entries]

    @staticmethod
    def _join(base: str, name: str) -> str:
        return (base.rstrip("/") + "/" + name) if base != "/" else "/" + name

    @staticmethod
    def _entry(path: str, info: Any) -> dict[str, Any]:
        return {
            "name": path,
            "size": info.size if not info.is_dir else 0,
            "type": "directory" if info.is_dir else "file",
        }

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        path = self._strip_protocol(path)
        with _mapped_errors(path):
            return self._entry(path, self.pyfs.getinfo(path, namespaces=["details"]))

    def exists(self, path: str, **kwargs: Any) -> bool:
        return bool(self.pyfs.exists(self._strip_protocol(path)))

    def isdir(self, path: str) -> bool:
        return bool(self.pyfs.isdir(self._strip_protocol(path)))

    def isfile(self, path: str) -> bool:
        return bool(self.pyfs.isfile(self._strip_protocol(path)))

    def cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kw: Any
    ) -> bytes:
        path = self._strip_protocol(path)
        with _mapped_errors(path):
            data = self.pyfs.readbytes(path)
        return data[start:end] if (start is not None or end is not None) else data

    def _write(self, path: str, data: bytes) -> None:
        """Write `path` whole, creating missing parent directories."""
        with _mapped_errors(path):
            try:
                self.pyfs.writebytes(path, data)
            except _import_fs().errors.ResourceNotFound:
                self.pyfs.makedirs(self._parent(path), recreate=True)
                self.pyfs.writebytes(path, data)

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        if mode == "create":
            if not self.publish_if_absent(path, value):
                raise FileExistsError(errno.EEXIST, "file exists", path)
            return
        self._write(path, bytes(value))

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        if mode == "rb":
            with _mapped_errors(path):
                return io.BytesIO(self.pyfs.readbytes(path))
        if mode not in ("wb", "xb", "ab"):
            raise ValueError(f"PyFilesystemFS does not support mode {mode!r}")
        if self.pyfs.isdir(path):
            raise IsADirectoryError(errno.EISDIR, "is a directory", path)
        if mode == "xb" and self.pyfs.exists(path):
            raise FileExistsError(errno.EEXIST, "file exists", path)
        initial = b""
        if mode == "ab" and self.pyfs.isfile(path):
            with _mapped_errors(path):
                initial = self.pyfs.readbytes(path)
        return _WriteBuffer(self, path, exclusive=(mode == "xb"), initial=initial)

    def rm_file(self, path: str) -> None:
        """Delete one file (IsADirectoryError on a directory: use `rmdir` or `rm`)."""
        path = self._strip_protocol(path)
        with _mapped_errors(path):
            self.pyfs.remove(path)

    def _rm(self, path: str) -> None:
        self.rm_file(path)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        """Delete files and directories; a directory needs `recursive=True` unless empty."""
        paths = self.expand_path(path, recursive=recursive, maxdepth=maxdepth)
        for p in reversed(paths):  # sorted, so children come before their directory
            with _mapped_errors(p):
                if self.pyfs.isdir(p):
                    if p == "/":
                        continue  # the root stays, as on every fsspec filesystem
                    self.pyfs.removedir(p)
                else:
                    self.pyfs.remove(p)

    def rmdir(self, path: str) -> None:
        path = self._strip_protocol(path)
        with _mapped_errors(path):
            self.pyfs.removedir(path)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        with _mapped_errors(path):
            if create_parents:
                self.pyfs.makedirs(path, recreate=False)
            else:
                self.pyfs.makedir(path)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        path = self._strip_protocol(path)
        if self.pyfs.isfile(path):
            raise FileExistsError(errno.EEXIST, "a file has that name", path)
        with _mapped_errors(path):
            self.pyfs.makedirs(path, recreate=exist_ok)

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        p1, p2 = self._strip_protocol(path1), self._strip_protocol(path2)
        with _mapped_errors(p1):
            is_dir = self.pyfs.isdir(p1)
            data = None if is_dir else self.pyfs.readbytes(p1)
        if data is None:
            self.makedirs(p2, exist_ok=True)
        else:
            self._write(p2, data)

    def mv(
        self, path1: Any, path2: Any, recursive: bool = False, maxdepth: Any = None, **kw: Any
    ) -> None:
        """One file onto a name that is not a directory: PyFilesystem2's own `move`
        (overwrites; a rename on OSFS). Anything else: fsspec's copy + rm."""
        if isinstance(path1, str) and isinstance(path2, str) and not has_magic(path1):
            p1, p2 = self._strip_protocol(path1), self._strip_protocol(path2)
            if p1 == p2:
                return
            if self.pyfs.isfile(p1) and not path2.endswith("/") and not self.pyfs.isdir(p2):
                with _mapped_errors(p1):
                    self.pyfs.makedirs(self._parent(p2), recreate=True)
                    self.pyfs.move(p1, p2, overwrite=True)
                return
        super().mv(path1, path2, recursive=recursive, maxdepth=maxdepth, **kw)

    def created(self, path: str) -> Any:
        path = self._strip_protocol(path)
        with _mapped_errors(path):
            return self.pyfs.getinfo(path, namespaces=["details"]).created

    def modified(self, path: str) -> Any:
        path = self._strip_protocol(path)
        with _mapped_errors(path):
            return self.pyfs.getinfo(path, namespaces=["details"]).modified

    # ---- what the World needs -------------------------------------------------------------

    def publish_if_absent(self, path: str, data: bytes, *, durable: bool = True) -> bool:
        """Make `path` hold `data` unless it exists; atomic, never overwrites."""
        path = self._strip_protocol(path)
        if self.pyfs.hassyspath(path):
            self._durable_parent(path)
            return self._local.publish_if_absent(self.pyfs.getsyspath(path), bytes(data),
                                                 durable=durable)
        parent = self._parent(path)
        tmp = self._join(parent, f".tmp-{uuid.uuid4().hex}-{path.rsplit('/', 1)[-1]}")
        errors = _import_fs().errors
        self._write(tmp, bytes(data))
        try:
            try:
                with _mapped_errors(path):
                    self.pyfs.move(tmp, path, overwrite=False)
            except FileExistsError:
                return False
            return True
        finally:
            with contextlib.suppress(errors.ResourceNotFound):
                self.pyfs.remove(tmp)

    def replace(self, path: str, data: bytes, *, durable: bool = True) -> None:
        path = self._strip_protocol(path)
        if self.pyfs.hassyspath(path):
            self._durable_parent(path)
            self._local.replace(self.pyfs.getsyspath(path), bytes(data), durable=durable)
            return
        tmp = self._join(self._parent(path), f".tmp-{uuid.uuid4().hex}")
        self._write(tmp, bytes(data))
        with _mapped_errors(path):
            self.pyfs.move(tmp, path, overwrite=True)

    def read_versioned(self, path: str) -> tuple[bytes, str] | None:
        try:
            data = bytes(self.cat_file(path))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        return data, content_version(data)

    def replace_if(self, path: str, data: bytes, version: str | None, *,
                   durable: bool = True) -> bool:
        """Compare and write: with a system path, under a kernel lock of the folder (as
        on the local disk, across processes); elsewhere under this object's lock."""
        path = self._strip_protocol(path)
        if self.pyfs.hassyspath(path):
            self._durable_parent(path)
            return self._local.replace_if(self.pyfs.getsyspath(path), bytes(data), version,
                                          durable=durable)
        with self._lock:
            current = self.read_versioned(path)
            if (current[1] if current is not None else None) != version:
                return False
            if version is None:
                return self.publish_if_absent(path, data, durable=durable)
            self.replace(path, data, durable=durable)
            return True

    @property
    def versioned_across_processes(self) -> bool:
        return self.posix is REAL_POSIX and bool(self.pyfs.hassyspath("/"))

    def sync(self) -> None:
        """Make every `durable=False` publication so far durable (with a system path:
        the directory fsyncs they skipped)."""
        self._local.sync()

    def make_durable(self, path: str) -> None:
        """Make the names in folder `path` durable, whoever published them (another
        process's `durable=False` events, before a run summary folds them)."""
        path = self._strip_protocol(path)
        if self.pyfs.hassyspath(path):
            self._local.make_durable(self.pyfs.getsyspath(path))

    def cross_process_locks(self, root: str) -> Any:
        """Kernel locks under the data dir where it has a system path (OSFS) on the real
        disk; elsewhere None (run locks in the process only)."""
        root = self._strip_protocol(root)
        if self.posix is not REAL_POSIX or not self.pyfs.hassyspath(root):
            return None
        return KernelLocks(os.path.join(self.pyfs.getsyspath(root), "locks"))

    def _durable_parent(self, path: str) -> None:
        """Create `path`'s parent directories as needed and make each one's name durable in
        its own parent, up to the filesystem's root: once per directory and instance, so
        directories made earlier without an fsync (`makedirs`, another process) count."""
        root = os.path.abspath(self.pyfs.getsyspath("/"))
        directory = os.path.dirname(os.path.abspath(self.pyfs.getsyspath(path)))
        pending = []
        while directory not in self._durable_dirs and directory != root \
                and directory.startswith(root):
            pending.append(directory)
            directory = os.path.dirname(directory)
        for directory in reversed(pending):
            if not self.posix.isdir(directory):
                try:
                    self.posix.mkdir(directory)
                except FileExistsError:
                    pass
            self.posix.fsync_dir(os.path.dirname(directory))
            self._durable_dirs.add(directory)
