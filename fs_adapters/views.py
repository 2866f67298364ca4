"""fsspec views: a read-only wrapper (writes fail with EROFS, nothing changes)."""

from __future__ import annotations

import errno
from typing import Any

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
