"""A power-cut model under the publisher's system calls (after SQLite's `src/test6.c`).

`PowerCutPosix` is a `Posix` layer (see `little_workflow.world.posix`) that performs every
call on the real files and, beside them, keeps what POSIX promises would survive a power
cut. After its `cut_after`-th operation it "loses power": that operation's caller, and
every later call, gets `SimulatedCrash` (a BaseException), and the real directory tree is
rewritten to what survives, so a fresh World opened on it afterwards sees what a machine
rebooting after the cut would see.

The model (deliberately the weakest POSIX guarantees, nothing a filesystem adds):

- A file's bytes are durable only up to its last `fsync`. A file never fsynced comes back
  empty — or, with `torn=True`, holding a prefix (half) of its unsynced bytes.
- A directory entry — a name created (`create_exclusive`, `mkdir`), added (`link`), moved
  (`replace`) or removed (`unlink`, `rmdir`) — is durable only once that directory is
  fsynced (`fsync_dir`). At the cut, unsynced names disappear and unsynced removals and
  renames are undone (the old name comes back, holding its file's durable bytes). A
  directory that disappears takes everything under it along.
- Hard links share one file: fsync of any name makes the bytes durable under every name.
- Counted operations are the ones that change state: create_exclusive, write, fsync,
  fsync_dir, link, replace, mkdir, rmdir, unlink. Reads (read, listdir, isdir, stat) are
  not counted but are refused after the cut; `close` always closes the real descriptor.
- Whatever existed on disk when the model first touched a directory counts as durable.
  Names that appear in a touched directory behind the model's back (made through another
  path, e.g. an fsspec `makedirs` or a scratch view) are unsynced until the next
  `fsync_dir` of that directory; such a file's bytes count as never synced.
- Writes are sequential from offset 0 (what the publisher does); directories are never
  renamed through this layer (the publisher never does). An unsynced `rmdir` is undone:
  the directory comes back with its own durable entries.
- Calls are serialized under one lock, so the cut falls between two whole operations.
  Real fsyncs are skipped unless `sync_for_real=True`: the model decides what survives.
"""

from __future__ import annotations

import os
import shutil
import threading
from typing import Any

from fsspec.implementations.local import LocalFileSystem

from ..world.posix import Posix
from .faults import SimulatedCrash


class _File:
    """One inode: the bytes written so far and the bytes last fsynced."""

    __slots__ = ("data", "synced")

    def __init__(self, data: bytes = b"", synced: bytes = b""):
        self.data, self.synced = data, synced


class _Dir:
    __slots__ = ()


_DIR = _Dir()
_Entry = _File | _Dir


class PowerCutPosix(Posix):
    """Real system calls plus a record of what survives; the power goes after
    operation number `cut_after` (1-based; None: never)."""

    def __init__(self, cut_after: int | None = None, *, torn: bool = False,
                 sync_for_real: bool = False):
        self.cut_after, self.torn, self.sync_for_real = cut_after, torn, sync_for_real
        self.count = 0
        self.operations: list[str] = []
        self.cut = False
        self._lock = threading.RLock()
        self._current: dict[str, dict[str, _Entry]] = {}  # directory -> entries now
        self._durable: dict[str, dict[str, _Entry]] = {}  # directory -> entries at last fsync
        self._fds: dict[int, _File] = {}

    # ---- bookkeeping ----------------------------------------------------------------------

    def _check(self, what: str) -> None:
        if self.cut:
            raise SimulatedCrash(self.count, f"{what} after the power cut")

    def _done(self, what: str) -> None:
        self.count += 1
        self.operations.append(what)
        if self.cut_after is not None and self.count >= self.cut_after:
            self._power_cut()
            raise SimulatedCrash(self.count, what)

    def _entries(self, directory: str) -> dict[str, _Entry]:
        """The model of `directory`, loaded from disk (as durable) on first touch."""
        entries = self._current.get(directory)
        if entries is None:
            entries = {}
            for name in os.listdir(directory):
                full = os.path.join(directory, name)
                if os.path.isdir(full) and not os.path.islink(full):
                    entries[name] = _DIR
                else:
                    with open(full, "rb") as f:
                        data = f.read()
                    entries[name] = _File(data, data)
            self._current[directory] = entries
            self._durable[directory] = dict(entries)
        return entries

    @staticmethod
    def _adopt(directory: str, entries: dict[str, _Entry]) -> None:
        """Bring the model of `directory` in line with names made or removed behind its
        back (their bytes were never fsynced through the model)."""
        names = set(os.listdir(directory))
        for name in set(entries) - names:
            del entries[name]
        for name in names - set(entries):
            full = os.path.join(directory, name)
            if os.path.isdir(full) and not os.path.islink(full):
                entries[name] = _DIR
            else:
                with open(full, "rb") as f:
                    entries[name] = _File(f.read(), b"")

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        path = os.path.abspath(path)
        return os.path.dirname(path), os.path.basename(path)

    # ---- the calls ------------------------------------------------------------------------

    def create_exclusive(self, path: str, mode: int = 0o644) -> int:
        with self._lock:
            self._check(f"create {path}")
            directory, name = self._split(path)
            entries = self._entries(directory)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            entries[name] = self._fds[fd] = _File()
            self._done(f"create {path}")
            return fd

    def write(self, fd: int, data: bytes) -> None:
        with self._lock:
            self._check("write")
            super().write(fd, data)
            node = self._fds[fd]
            node.data += bytes(data)
            self._done(f"write {len(data)} bytes")

    def fsync(self, fd: int) -> None:
        with self._lock:
            self._check("fsync")
            if self.sync_for_real:
                os.fsync(fd)
            node = self._fds[fd]
            node.synced = node.data
            self._done("fsync")

    def close(self, fd: int) -> None:
        with self._lock:
            self._fds.pop(fd, None)
            os.close(fd)

    def fsync_dir(self, path: str) -> None:
        with self._lock:
            self._check(f"fsync_dir {path}")
            directory = os.path.abspath(path)
            entries = self._entries(directory)
            self._adopt(directory, entries)
            if self.sync_for_real:
                super().fsync_dir(directory)
            self._durable[directory] = dict(entries)
            self._done(f"fsync_dir {path}")

    def link(self, src: str, dst: str) -> None:
        with self._lock:
            self._check(f"link {dst}")
            (sdir, sname), (ddir, dname) = self._split(src), self._split(dst)
            node = self._entries(sdir)[sname]
            targets = self._entries(ddir)
            os.link(src, dst)
            targets[dname] = node
            self._done(f"link {dst}")

    def replace(self, src: str, dst: str) -> None:
        with self._lock:
            self._check(f"replace {dst}")
            (sdir, sname), (ddir, dname) = self._split(src), self._split(dst)
            sources, targets = self._entries(sdir), self._entries(ddir)
            if isinstance(sources.get(sname), _Dir):
                raise NotImplementedError("the power-cut model does not rename directories")
            os.replace(src, dst)
            targets[dname] = sources.pop(sname)
            self._done(f"replace {dst}")

    def mkdir(self, path: str) -> None:
        with self._lock:
            self._check(f"mkdir {path}")
            directory, name = self._split(path)
            entries = self._entries(directory)
            os.mkdir(path)
            entries[name] = _DIR
            full = os.path.abspath(path)
            self._current[full], self._durable[full] = {}, {}
            self._done(f"mkdir {path}")

    def unlink(self, path: str) -> None:
        with self._lock:
            self._check(f"unlink {path}")
            directory, name = self._split(path)
            entries = self._entries(directory)
            os.unlink(path)
            entries.pop(name, None)
            self._done(f"unlink {path}")

    def rmdir(self, path: str) -> None:
        with self._lock:
            self._check(f"rmdir {path}")
            directory, name = self._split(path)
            entries = self._entries(directory)
            os.rmdir(path)
            entries.pop(name, None)
            # The model of the removed directory stays: if its removal is not durable,
            # the cut brings it back with what was durable inside it.
            self._done(f"rmdir {path}")

    def stat(self, path: str) -> os.stat_result:
        with self._lock:
            self._check(f"stat {path}")
            return super().stat(path)

    def read(self, path: str) -> bytes:
        with self._lock:
            self._check(f"read {path}")
            return super().read(path)

    def listdir(self, path: str) -> list[str]:
        with self._lock:
            self._check(f"listdir {path}")
            return super().listdir(path)

    def isdir(self, path: str) -> bool:
        with self._lock:
            self._check(f"isdir {path}")
            return super().isdir(path)

    # ---- the cut --------------------------------------------------------------------------

    def cut_now(self) -> None:
        """Lose power now, between two operations: what was not synced is gone from the
        directory tree, and every later call raises `SimulatedCrash`."""
        with self._lock:
            self._check("cut_now")
            self._power_cut()

    def _surviving_bytes(self, node: _File) -> bytes:
        if not self.torn or node.data == node.synced:
            return node.synced
        unsynced = node.data[len(node.synced):] if node.data.startswith(node.synced) else b""
        return node.synced + unsynced[: len(unsynced) // 2]

    def _power_cut(self) -> None:
        """Rewrite every directory the model touched to its durable entries, parents
        first (a directory whose own name did not survive is removed whole)."""
        self.cut = True
        for directory in sorted(self._current, key=lambda d: d.count(os.sep)):
            if not os.path.isdir(directory):
                continue  # its name was lost with an unsynced parent entry
            durable = self._durable[directory]
            for name in os.listdir(directory):
                full = os.path.join(directory, name)
                if os.path.isdir(full) and not os.path.islink(full):
                    if not isinstance(durable.get(name), _Dir):
                        shutil.rmtree(full)
                else:
                    os.unlink(full)  # files are written back below, one inode per name
            for name, entry in durable.items():
                full = os.path.join(directory, name)
                if isinstance(entry, _Dir):
                    os.makedirs(full, exist_ok=True)
                else:
                    with open(full, "wb") as f:
                        f.write(self._surviving_bytes(entry))


class PowerCutFileSystem(LocalFileSystem):
    """fsspec's LocalFileSystem whose World publishes through `posix` (its own instance:
    never shared from fsspec's cache, so it is a separate storage for the World)."""

    cachable = False

    def __init__(self, posix: Posix, **kwargs: Any):
        super().__init__(**kwargs)
        self.posix = posix


def power_cut_filesystem(posix: Posix) -> PowerCutFileSystem:
    """A local filesystem object for `virtual_world` whose publications go through
    `posix` (e.g. a `PowerCutPosix`)."""
    return PowerCutFileSystem(posix)
