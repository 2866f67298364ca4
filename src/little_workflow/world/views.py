"""fsspec views: folders of a World as filesystems (scratch, memory stores, bash mounts),
and a read-only wrapper (writes fail with EROFS, nothing changes).

A `WorldFileSystem` goes through the World's own file methods, so every read and write
made through it is a World call — `tracing_world` sees it, and writes are atomic
replacements with the World's durability."""

from __future__ import annotations

import errno
import io
from typing import Any, Protocol

from fsspec.spec import AbstractFileSystem


class ReadOnlyFileSystem(AbstractFileSystem):
    """Delegates reads to `fs`; every write raises PermissionError(EROFS)."""

    protocol = "readonly"
    cachable = False

    def __init__(self, fs: Any, label: str = "read-only view", **kwargs: Any):
        super().__init__(**kwargs)
        self.fs = fs
        self.label = label

    def _refuse(self, path: Any = "") -> None:
        raise PermissionError(errno.EROFS, f"{self.label} is read-only", str(path))

    def ls(self, path: str, detail: bool = True, **kw: Any) -> Any:
        return self.fs.ls(path, detail=detail, **kw)

    def info(self, path: str, **kw: Any) -> Any:
        return self.fs.info(path, **kw)

    def cat_file(self, path: str, start: Any = None, end: Any = None, **kw: Any) -> Any:
        return self.fs.cat_file(path, start=start, end=end, **kw)

    def exists(self, path: str, **kw: Any) -> bool:
        return bool(self.fs.exists(path, **kw))

    def _open(self, path: str, mode: str = "rb", **kw: Any) -> Any:
        if any(c in mode for c in "wax+"):
            self._refuse(path)
        return self.fs.open(path, mode, **kw)

    def pipe_file(self, path: str, value: Any, **kw: Any) -> None:
        self._refuse(path)

    def rm_file(self, path: str) -> None:
        self._refuse(path)

    def _rm(self, path: str) -> None:
        self._refuse(path)

    def rm(self, path: Any, *args: Any, **kw: Any) -> None:
        self._refuse(path)

    def mkdir(self, path: str, *args: Any, **kw: Any) -> None:
        self._refuse(path)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        self._refuse(path)

    def rmdir(self, path: str) -> None:
        self._refuse(path)

    def cp_file(self, path1: str, path2: str, **kw: Any) -> None:
        self._refuse(path2)

    def mv(self, path1: Any, path2: Any, *args: Any, **kw: Any) -> None:
        self._refuse(path2)

    def touch(self, path: str, truncate: bool = True, **kw: Any) -> None:
        self._refuse(path)


class ChangeJournal(Protocol):
    """Told of every change made through a view or memory store (a run journals them)."""

    def before(self, path: str, data: bytes | None) -> bool:
        """Before a write (`data`) or a removal (`None`) of `path` (relative to the view);
        False skips the change (a replay must not write)."""

    def failed(self, path: str, error: BaseException) -> None:
        """The change announced by `before` did not happen."""


def journaled(journal: ChangeJournal | None, path: str, data: bytes | None, change: Any) -> None:
    """Run `change()` between the journal's `before` and, should it fail, `failed`."""
    if journal is not None and not journal.before(path, data):
        return
    try:
        change()
    except BaseException as e:
        if journal is not None:
            journal.failed(path, e)
        raise


class _WriteOnClose(io.BytesIO):
    def __init__(self, view: "WorldFileSystem", path: str, initial: bytes = b""):
        super().__init__(initial)
        self.seek(0, io.SEEK_END)
        self._view, self._path, self._done = view, path, False

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._view.pipe_file(self._path, self.getvalue())
        super().close()


class WorldFileSystem(AbstractFileSystem):
    """A folder of a World (`root`, relative to its data dir) as an fsspec filesystem."""

    protocol = "world"
    root_marker = ""
    cachable = False

    def __init__(self, world: Any, root: str, *, journal: ChangeJournal | None = None,
                 **kwargs: Any):
        super().__init__(**kwargs)
        self.world = world
        self.root = root.strip("/")
        self.journal = journal
        world.ensure_dir(self.root)

    @classmethod
    def _strip_protocol(cls, path: Any) -> str:
        path = str(path)
        if path.startswith("world://"):
            path = path[len("world://"):]
        return path.strip("/")

    def _rel(self, path: str) -> str:
        path = self._strip_protocol(path)
        if ".." in path.split("/"):
            raise PermissionError(errno.EACCES, "paths may not leave the view", path)
        return f"{self.root}/{path}" if path else self.root

    def ls(self, path: str = "", detail: bool = True, **kw: Any) -> Any:
        path = self._strip_protocol(path)
        info = self.info(path)
        if info["type"] == "file":
            entries = [info]
        else:
            prefix = f"{path}/" if path else ""
            entries = [self.info(prefix + name) for name in self.world.list_dir(self._rel(path))]
        return entries if detail else [e["name"] for e in entries]

    def info(self, path: str, **kw: Any) -> dict[str, Any]:
        path = self._strip_protocol(path)
        found = self.world.file_info(self._rel(path))
        if found is None:
            if not path:  # the view's own folder: made by its first write, empty until then
                return {"type": "directory", "size": 0, "name": ""}
            raise FileNotFoundError(path)
        return {**found, "name": path}

    def cat_file(self, path: str, start: Any = None, end: Any = None, **kw: Any) -> bytes:
        data = self.world.read_file(self._rel(path))
        if data is None:
            raise FileNotFoundError(path)
        return data[start:end] if (start is not None or end is not None) else data

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kw: Any) -> None:
        rel = self._rel(path)
        data = bytes(value)
        if mode == "create" and self.world.read_file(rel) is not None:
            raise FileExistsError(path)
        journaled(self.journal, self._strip_protocol(path), data,
                  lambda: self.world.write_file(rel, data))

    def _open(self, path: str, mode: str = "rb", **kw: Any) -> Any:
        if mode == "rb":
            return io.BytesIO(self.cat_file(path))
        if mode in ("wb", "xb"):
            if mode == "xb" and self.world.read_file(self._rel(path)) is not None:
                raise FileExistsError(path)
            return _WriteOnClose(self, path)
        if mode == "ab":
            return _WriteOnClose(self, path, self.world.read_file(self._rel(path)) or b"")
        raise ValueError(f"world views open files in rb, wb, xb or ab mode, not {mode!r}")

    def rm_file(self, path: str) -> None:
        rel = self._rel(path)
        if self.world.read_file(rel) is None:
            raise FileNotFoundError(path)
        journaled(self.journal, self._strip_protocol(path), None,
                  lambda: self.world.remove_file(rel))

    def _rm(self, path: str) -> None:
        if self.info(path)["type"] == "directory":
            self.rmdir(path)
        else:
            self.rm_file(path)

    def rm(self, path: Any, recursive: bool = False, maxdepth: Any = None) -> None:
        # fsspec's rm would call rm_file on directories too: remove files first, then
        # folders, deepest first.
        found = self.expand_path(path, recursive=recursive, maxdepth=maxdepth)
        for p in sorted(found, key=lambda p: p.count("/"), reverse=True):
            self._rm(p)

    def rmdir(self, path: str) -> None:
        if self.world.list_dir(self._rel(path)):
            raise OSError(errno.ENOTEMPTY, "directory not empty", path)
        self.world.remove_dir(self._rel(path))

    def mkdir(self, path: str, create_parents: bool = True, **kw: Any) -> None:
        self.world.ensure_dir(self._rel(path))

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        if not exist_ok and self.world.file_info(self._rel(path)) is not None:
            raise FileExistsError(path)
        self.world.ensure_dir(self._rel(path))

    def cp_file(self, path1: str, path2: str, **kw: Any) -> None:
        if self.info(path1)["type"] == "directory":
            self.makedirs(path2, exist_ok=True)
        else:
            self.pipe_file(path2, self.cat_file(path1))

    def mv(self, path1: Any, path2: Any, recursive: bool = False, maxdepth: Any = None, **kw: Any) -> None:
        # Copy then remove, each step a World call: a crash in between leaves both
        # copies, never neither.
        for src in self.expand_path(path1, recursive=True) if recursive else [path1]:
            src = self._strip_protocol(src)
            dst = self._strip_protocol(path2) + src[len(self._strip_protocol(path1)):]
            self.cp_file(src, dst)
        self.rm(path1, recursive=True)

    def created(self, path: str) -> Any:
        return None

    def modified(self, path: str) -> Any:
        return None
