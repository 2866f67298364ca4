"""The system calls the local publisher makes, behind one small object.

`LocalPublisher` (and the PyFilesystem2 adapter on OSFS) touch the disk only through a
`Posix` instance, so a test can put another one underneath — the power-cut model in
`little_workflow.testing.powercut` performs the same calls on the real files and records
which of their effects POSIX promises to keep (as SQLite's `test6.c` does for its VFS).

What durability needs from these calls (POSIX, not one filesystem's habits): a file's
bytes survive a power cut only after `fsync` of that file, and a directory entry
(create, link, rename, unlink, mkdir, rmdir) only after `fsync_dir` of the directory holding it.
`makedirs` therefore fsyncs every directory it creates into its parent.
"""

from __future__ import annotations

import os


class Posix:
    """The real system calls (the default)."""

    def create_exclusive(self, path: str, mode: int = 0o644) -> int:
        """Open a new file for writing; `FileExistsError` if the name exists."""
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)

    def write(self, fd: int, data: bytes) -> None:
        """Write all of `data` at the file's current offset."""
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def close(self, fd: int) -> None:
        os.close(fd)

    def fsync_dir(self, path: str) -> None:
        """Make the entries of directory `path` (names created, linked, renamed or
        removed in it) durable."""
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def link(self, src: str, dst: str) -> None:
        """A second name for `src`; `FileExistsError` if `dst` exists (never replaces)."""
        os.link(src, dst)

    def replace(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def mkdir(self, path: str) -> None:
        os.mkdir(path)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def rmdir(self, path: str) -> None:
        os.rmdir(path)

    def stat(self, path: str) -> os.stat_result:
        return os.stat(path)

    def read(self, path: str) -> bytes:
        with open(path, "rb") as f:
            return f.read()

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def isdir(self, path: str) -> bool:
        return os.path.isdir(path)

    def makedirs(self, path: str) -> None:
        """Create `path` and any missing parents, each new directory fsynced into its
        parent before this returns (a name published inside must not hang from a
        directory that a power cut forgets)."""
        missing = []
        current = os.path.abspath(path)
        while not self.isdir(current):
            missing.append(current)
            parent = os.path.dirname(current)
            if parent == current:
                break
            current = parent
        for directory in reversed(missing):
            try:
                self.mkdir(directory)
            except FileExistsError:
                # Another writer made it; it may not have synced it yet, so sync anyway.
                if not self.isdir(directory):
                    raise
            self.fsync_dir(os.path.dirname(directory))


#: The process-wide real system calls.
REAL_POSIX = Posix()
