"""just-bash filesystems over fsspec: directory views, read-only views, single-file views.

just-bash (a pure-Python bash) talks to an async `IFileSystem`; these classes implement
it over any fsspec filesystem, so a bash step sees the World's own files on memory, local
disk or an object store — and never the host. Paths are normalised before they reach
fsspec and `..` stops at the view's root, so nothing outside a mount can be named.
Symlinks are not offered (they are the usual way out of a sandbox).
"""

from __future__ import annotations

import posixpath
import time
from typing import Any

from just_bash.types import FsStat


def _norm(path: str) -> str:
    """Absolute, normalised, and clamped at '/': '/../../etc' is '/etc' inside the view."""
    parts: list[str] = []
    for part in (path or "/").split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
            continue
        parts.append(part)
    return "/" + "/".join(parts)


def _err(code: str, what: str, path: str) -> OSError:
    cls = {"ENOENT": FileNotFoundError, "EISDIR": IsADirectoryError,
           "ENOTDIR": NotADirectoryError, "EEXIST": FileExistsError}.get(code, OSError)
    return cls(f"{code}: {what}, '{path}'")


class FsspecBashFS:
    """A directory of an fsspec filesystem as a just-bash filesystem rooted at '/'."""

    def __init__(self, fs: Any, root: str):
        self.fs = fs
        self.root = root.rstrip("/")
        self._dirs: set[str] = set()  # directories made in this view (object stores have none)

    # -- helpers ---------------------------------------------------------------------------

    def _real(self, path: str) -> str:
        rel = _norm(path)
        return self.root + (rel if rel != "/" else "")

    def _isdir(self, path: str) -> bool:
        real = self._real(path)
        if _norm(path) == "/" or _norm(path) in self._dirs:
            return True
        try:
            return bool(self.fs.isdir(real))
        except (FileNotFoundError, NotADirectoryError):
            return False

    def _isfile(self, path: str) -> bool:
        try:
            return bool(self.fs.isfile(self._real(path)))
        except (FileNotFoundError, NotADirectoryError):
            return False

    # -- reads -----------------------------------------------------------------------------

    async def read_file_bytes(self, path: str) -> bytes:
        if self._isdir(path):
            raise _err("EISDIR", "illegal operation on a directory, read", path)
        try:
            return bytes(self.fs.cat_file(self._real(path)))
        except (FileNotFoundError, NotADirectoryError):
            raise _err("ENOENT", "no such file or directory, open", path) from None

    async def read_file(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read_file_bytes(path)).decode(encoding, errors="replace")

    async def exists(self, path: str) -> bool:
        return self._isdir(path) or self._isfile(path)

    async def is_file(self, path: str) -> bool:
        return self._isfile(path)

    async def is_directory(self, path: str) -> bool:
        return self._isdir(path)

    async def stat(self, path: str) -> FsStat:
        if self._isdir(path):
            return FsStat(is_directory=True, mode=0o755, size=0, mtime=time.time())
        try:
            info = self.fs.info(self._real(path))
        except (FileNotFoundError, NotADirectoryError):
            raise _err("ENOENT", "no such file or directory, stat", path) from None
        return FsStat(is_file=True, mode=0o644, size=int(info.get("size") or 0), mtime=time.time())

    async def lstat(self, path: str) -> FsStat:
        return await self.stat(path)

    async def readdir(self, path: str) -> list[str]:
        if not self._isdir(path):
            if self._isfile(path):
                raise _err("ENOTDIR", "not a directory, scandir", path)
            raise _err("ENOENT", "no such file or directory, scandir", path)
        try:
            entries = self.fs.ls(self._real(path), detail=False)
        except FileNotFoundError:
            entries = []
        names = {posixpath.basename(str(e).rstrip("/")) for e in entries}
        prefix = _norm(path).rstrip("/") + "/"
        names |= {d[len(prefix):].split("/")[0] for d in self._dirs if d.startswith(prefix)}
        return sorted(n for n in names if n and not n.startswith(".tmp-"))

    async def readdir_with_file_types(self, path: str) -> list[Any]:
        from just_bash.fs.in_memory_fs import DirentEntry

        out = []
        for name in await self.readdir(path):
            child = posixpath.join(_norm(path), name)
            is_dir = self._isdir(child)
            out.append(DirentEntry(name=name, is_file=not is_dir, is_directory=is_dir,
                                   is_symbolic_link=False))
        return out

    async def readlink(self, path: str) -> str:
        raise _err("EINVAL", "invalid argument, readlink", path)

    async def realpath(self, path: str) -> str:
        if not await self.exists(path):
            raise _err("ENOENT", "no such file or directory, realpath", path)
        return _norm(path)

    def resolve_path(self, base: str, path: str) -> str:
        return _norm(path if path.startswith("/") else posixpath.join(base, path))

    def get_all_paths(self) -> list[str]:
        return []

    # -- writes ----------------------------------------------------------------------------

    def _write(self, path: str, data: bytes) -> None:
        if self._isdir(path):
            raise _err("EISDIR", "illegal operation on a directory, open", path)
        real = self._real(path)
        self.fs.makedirs(posixpath.dirname(real), exist_ok=True)
        self.fs.pipe_file(real, data)

    async def write_file(self, path: str, content: str | bytes, encoding: str = "utf-8") -> None:
        self._write(path, content.encode(encoding) if isinstance(content, str) else bytes(content))

    async def append_file(self, path: str, content: str | bytes) -> None:
        data = content.encode("utf-8") if isinstance(content, str) else bytes(content)
        try:
            old = bytes(self.fs.cat_file(self._real(path)))
        except FileNotFoundError:
            old = b""
        self._write(path, old + data)

    async def mkdir(self, path: str, recursive: bool = False) -> None:
        norm = _norm(path)
        if self._isfile(path):
            raise _err("EEXIST", "file already exists, mkdir", path)
        if self._isdir(path):
            if recursive:
                return
            raise _err("EEXIST", "directory already exists, mkdir", path)
        if not recursive and not self._isdir(posixpath.dirname(norm)):
            raise _err("ENOENT", "no such file or directory, mkdir", path)
        self.fs.makedirs(self._real(path), exist_ok=True)
        while norm != "/":
            self._dirs.add(norm)
            norm = posixpath.dirname(norm)

    async def rm(self, path: str, recursive: bool = False, force: bool = False) -> None:
        if _norm(path) == "/":
            raise _err("EPERM", "operation not permitted, rm", path)
        if not await self.exists(path):
            if force:
                return
            raise _err("ENOENT", "no such file or directory, rm", path)
        if self._isdir(path):
            if not recursive and await self.readdir(path):
                raise _err("ENOTEMPTY", "directory not empty, rm", path)
            try:
                self.fs.rm(self._real(path), recursive=True)
            except FileNotFoundError:
                pass
            norm = _norm(path)
            self._dirs = {d for d in self._dirs if d != norm and not d.startswith(norm + "/")}
        else:
            self.fs.rm_file(self._real(path))

    async def cp(self, src: str, dest: str, recursive: bool = False) -> None:
        if self._isdir(src):
            if not recursive:
                raise _err("EISDIR", "is a directory, cp", src)
            await self.mkdir(dest, recursive=True)
            for name in await self.readdir(src):
                await self.cp(posixpath.join(_norm(src), name), posixpath.join(_norm(dest), name), True)
            return
        data = await self.read_file_bytes(src)
        if self._isdir(dest):
            dest = posixpath.join(_norm(dest), posixpath.basename(_norm(src)))
        self._write(dest, data)

    async def mv(self, src: str, dest: str) -> None:
        await self.cp(src, dest, recursive=True)
        await self.rm(src, recursive=True)

    async def link(self, existing_path: str, new_path: str) -> None:
        if await self.exists(new_path):
            raise _err("EEXIST", "file already exists, link", new_path)
        self._write(new_path, await self.read_file_bytes(existing_path))

    async def chmod(self, path: str, mode: int) -> None:
        if not await self.exists(path):
            raise _err("ENOENT", "no such file or directory, chmod", path)

    async def utimes(self, path: str, atime: float, mtime: float) -> None:
        if not await self.exists(path):
            raise _err("ENOENT", "no such file or directory, utimes", path)

    async def symlink(self, target: str, link_path: str) -> None:
        raise _err("EPERM", "symbolic links are not allowed here, symlink", link_path)


class ReadOnlyBashFS:
    """Every write fails with EROFS inside bash; nothing changes on the filesystem."""

    _WRITES = ("write_file", "append_file", "mkdir", "rm", "cp", "mv", "link", "chmod",
               "utimes", "symlink")

    def __init__(self, inner: Any, label: str = "read-only mount"):
        self._inner = inner
        self._label = label

    def __getattr__(self, name: str) -> Any:
        if name in self._WRITES:
            async def refuse(*args: Any, **kwargs: Any) -> None:
                target = args[-1] if name in ("cp", "mv", "link", "symlink") and len(args) > 1 else (args[0] if args else "")
                raise OSError(f"EROFS: read-only file system ({self._label}), {name} '{target}'")

            return refuse
        return getattr(self._inner, name)


class SingleFileBashFS:
    """Reveals exactly one file of an fsspec filesystem, mounted at the file's own path."""

    def __init__(self, fs: Any, real_path: str, *, read_only: bool = True):
        self.fs = fs
        self.real_path = real_path
        self.read_only = read_only

    def _check(self, path: str) -> None:
        if _norm(path) != "/":
            raise _err("ENOENT", "no such file or directory, open", path)

    async def read_file_bytes(self, path: str) -> bytes:
        self._check(path)
        try:
            return bytes(self.fs.cat_file(self.real_path))
        except FileNotFoundError:
            raise _err("ENOENT", "no such file or directory, open", path) from None

    async def read_file(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read_file_bytes(path)).decode(encoding, errors="replace")

    async def exists(self, path: str) -> bool:
        return _norm(path) == "/"

    async def is_file(self, path: str) -> bool:
        return _norm(path) == "/"

    async def is_directory(self, path: str) -> bool:
        return False

    async def stat(self, path: str) -> FsStat:
        self._check(path)
        size = len(await self.read_file_bytes(path))
        return FsStat(is_file=True, mode=0o444 if self.read_only else 0o644, size=size, mtime=time.time())

    lstat = stat

    async def readdir(self, path: str) -> list[str]:
        raise _err("ENOTDIR", "not a directory, scandir", path)

    async def readdir_with_file_types(self, path: str) -> list[Any]:
        raise _err("ENOTDIR", "not a directory, scandir", path)

    async def write_file(self, path: str, content: str | bytes, encoding: str = "utf-8") -> None:
        self._check(path)
        if self.read_only:
            raise OSError(f"EROFS: read-only file system, open '{path}'")
        self.fs.pipe_file(self.real_path, content.encode(encoding) if isinstance(content, str) else content)

    async def append_file(self, path: str, content: str | bytes) -> None:
        old = await self.read_file_bytes(path)
        await self.write_file(path, old + (content.encode() if isinstance(content, str) else content))

    async def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise OSError("EPERM: operation not permitted on a single-file mount")

    mkdir = rm = cp = mv = link = chmod = utimes = symlink = _refuse

    async def readlink(self, path: str) -> str:
        raise _err("EINVAL", "invalid argument, readlink", path)

    async def realpath(self, path: str) -> str:
        self._check(path)
        return "/"

    def resolve_path(self, base: str, path: str) -> str:
        return _norm(path if path.startswith("/") else posixpath.join(base, path))

    def get_all_paths(self) -> list[str]:
        return []
