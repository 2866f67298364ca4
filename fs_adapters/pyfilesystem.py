"""PyFilesystem2 as an fsspec filesystem: `virtual_world(fs=PyFilesystemFS(MemoryFS()))`.

Publication (the one operation the World needs to be atomic) maps to PyFilesystem2's own
primitives: on filesystems with a system path (OSFS) a temp file + `os.link`, which fails
if the name exists; elsewhere a temp file + `move(overwrite=False)`, which MemoryFS does
under its lock.
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
import uuid
import warnings
from typing import Any, Iterator

from fsspec.spec import AbstractFileSystem


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
    errors = _import_fs().errors
    try:
        yield
    except errors.ResourceNotFound:
        raise FileNotFoundError(path) from None
    except (errors.DestinationExists, errors.FileExists, errors.DirectoryExists):
        raise FileExistsError(path) from None
    except errors.DirectoryExpected:
        raise NotADirectoryError(path) from None
    except errors.FileExpected:
        raise IsADirectoryError(path) from None
    except errors.DirectoryNotEmpty:
        raise OSError(f"directory not empty: {path}") from None


class _WriteBuffer(io.BytesIO):
    """Collects a write and hands it to PyFilesystem2 in one call on close."""

    def __init__(self, owner: "PyFilesystemFS", path: str, exclusive: bool):
        super().__init__()
        self._owner, self._path, self._exclusive = owner, path, exclusive
        self._done = False

    def close(self) -> None:
        if not self._done:
            self._done = True
            data = self.getvalue()
            if self._exclusive:
                if not self._owner.publish_if_absent(self._path, data):
                    super().close()
                    raise FileExistsError(self._path)
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

    def __init__(self, pyfs: Any, **kwargs: Any):
        super().__init__(**kwargs)
        _import_fs()
        self.pyfs = pyfs
        self._lock = threading.RLock()

    @property
    def fsid(self) -> str:
        return f"pyfs-{id(self.pyfs)}"

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        path = str(path)
        if path.startswith("pyfs://"):
            path = path[len("pyfs://"):]
        path = "/" + path.lstrip("/")
        return path.rstrip("/") or "/"

    # ---- primitives -------------------------------------------------------------------

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        path = self._strip_protocol(path)
        with _mapped_errors(path):
            if self.pyfs.isfile(path):
                entries = [self.info(path)]
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

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kw: Any) -> bytes:
        path = self._strip_protocol(path)
        with _mapped_errors(path):
            data = self.pyfs.readbytes(path)
        return data[start:end] if (start is not None or end is not None) else data

    def _write(self, path: str, data: bytes) -> None:
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
                raise FileExistsError(path)
            return
        self._write(path, bytes(value))

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        if "r" in mode and "+" not in mode:
            with _mapped_errors(path):
                return io.BytesIO(self.pyfs.readbytes(path))
        if mode in ("wb", "xb"):
            if mode == "xb" and self.pyfs.exists(path):
                raise FileExistsError(path)
            return _WriteBuffer(self, path, exclusive=(mode == "xb"))
        raise ValueError(f"PyFilesystemFS does not support mode {mode!r}")

    def rm_file(self, path: str) -> None:
        path = self._strip_protocol(path)
        with _mapped_errors(path):
            self.pyfs.remove(path)

    def _rm(self, path: str) -> None:
        self.rm_file(path)

    def rmdir(self, path: str) -> None:
        path = self._strip_protocol(path)
        with _mapped_errors(path):
            self.pyfs.removedir(path)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        with _mapped_errors(path):
            if create_parents:
                self.pyfs.makedirs(path, recreate=True)
            else:
                self.pyfs.makedir(path)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        path = self._strip_protocol(path)
        with _mapped_errors(path):
            self.pyfs.makedirs(path, recreate=exist_ok)

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        p1, p2 = self._strip_protocol(path1), self._strip_protocol(path2)
        with _mapped_errors(p1):
            if self.pyfs.isdir(p1):
                self.pyfs.makedirs(p2, recreate=True)
            else:
                self._write(p2, self.pyfs.readbytes(p1))

    def mv(self, path1: str, path2: str, recursive: bool = False, maxdepth: Any = None, **kw: Any) -> None:
        p1, p2 = self._strip_protocol(path1), self._strip_protocol(path2)
        with _mapped_errors(p1):
            if self.pyfs.isdir(p1):
                self.pyfs.movedir(p1, p2, create=True)
            else:
                self.pyfs.makedirs(self._parent(p2), recreate=True)
                self.pyfs.move(p1, p2, overwrite=True)

    def created(self, path: str) -> Any:
        return self.pyfs.getinfo(self._strip_protocol(path), namespaces=["details"]).created

    def modified(self, path: str) -> Any:
        return self.pyfs.getinfo(self._strip_protocol(path), namespaces=["details"]).modified

    # ---- what the World needs -------------------------------------------------------------

    def publish_if_absent(self, path: str, data: bytes, *, durable: bool = True) -> bool:
        """Make `path` hold `data` unless it exists; atomic, never overwrites."""
        path = self._strip_protocol(path)
        parent = self._parent(path)
        tmp = self._join(parent, f".tmp-{uuid.uuid4().hex}-{path.rsplit('/', 1)[-1]}")
        errors = _import_fs().errors
        self._write(tmp, bytes(data))
        try:
            if self.pyfs.hassyspath(tmp):
                src, dst = self.pyfs.getsyspath(tmp), self.pyfs.getsyspath(path)
                with open(src, "rb+") as f:
                    os.fsync(f.fileno())
                try:
                    os.link(src, dst)
                except FileExistsError:
                    return False
                dir_fd = os.open(os.path.dirname(dst), os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
                return True
            try:
                self.pyfs.move(tmp, path, overwrite=False)
            except errors.DestinationExists:
                return False
            return True
        finally:
            with contextlib.suppress(errors.ResourceNotFound):
                self.pyfs.remove(tmp)

    def replace(self, path: str, data: bytes, *, durable: bool = True) -> None:
        path = self._strip_protocol(path)
        tmp = self._join(self._parent(path), f".tmp-{uuid.uuid4().hex}")
        self._write(tmp, bytes(data))
        with _mapped_errors(path):
            if self.pyfs.hassyspath(tmp):
                os.replace(self.pyfs.getsyspath(tmp), self.pyfs.getsyspath(path))
            else:
                self.pyfs.move(tmp, path, overwrite=True)
