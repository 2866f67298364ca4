"""Failures of the storage itself, turned into a typed error naming the file: one mapping
per source — OS errors by errno (`storage_error`), SQLite errors by result code
(`sqlite_storage_error`). The object-store adapters map their stores' answers in their
own modules (`fs_adapters.object_store`, `fs_adapters.azure_blob`)."""

from __future__ import annotations

import errno
import os
import sqlite3

from ..errors import (
    StorageDamagedError,
    StorageError,
    StorageFullError,
    StorageIOError,
    StorageNotADatabaseError,
    StorageNotFoundError,
    StoragePermissionError,
    StorageReadOnlyError,
)

FULL_HINT = "the disk is full: free some space and run again"
PERMISSION_HINT = "check the data dir's permissions"
READ_ONLY_HINT = "the data dir is on a read-only filesystem"

_BY_ERRNO: dict[int, tuple[type[StorageError], str]] = {
    errno.ENOSPC: (StorageFullError, FULL_HINT),
    errno.EDQUOT: (StorageFullError, "the disk quota is exhausted: free some space and run again"),
    errno.EFBIG: (StorageFullError, "the file size limit was reached"),
    errno.EROFS: (StorageReadOnlyError, READ_ONLY_HINT),
    errno.EACCES: (StoragePermissionError, PERMISSION_HINT),
    errno.EPERM: (StoragePermissionError, PERMISSION_HINT),
    errno.EIO: (StorageIOError, "the disk failed an I/O operation"),
    errno.ENOENT: (StorageNotFoundError, ""),
}


def storage_error(e: OSError, path: str) -> StorageError:
    """`e` as the StorageError its errno says (`StorageFullError` for ENOSPC, …; the base
    class when none fits), naming `e.filename` (or `path` when the error names none) and
    keeping `e.errno`. A StorageError is returned as it is."""
    if isinstance(e, StorageError):
        return e
    cls, hint = _BY_ERRNO.get(e.errno or 0, (StorageError, ""))
    problem = e.strerror or str(e) or type(e).__name__
    error = cls(str(e.filename or path), problem, hint)
    error.errno = e.errno
    return error


def read_only_error(path: str) -> StorageError:
    """A write asked of a World opened with `local_world(..., read_only=True)`."""
    return StorageReadOnlyError(path, "the World is open read-only (local_world(..., read_only=True))",
                        "open it without read_only=True, on a writable data dir, to write")


def is_storage_failure(e: BaseException) -> bool:
    """An OSError that is the storage failing (not a missing file, which callers handle)."""
    return isinstance(e, OSError) and not isinstance(
        e, (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError))


DAMAGED_HINT = ("nothing more is written to it: `little verify` lists the runs that can still "
                "be read; restore it from a backup or move it away")

# SQLite's primary result codes (extended ones, e.g. SQLITE_IOERR_WRITE, fold onto them).
_BY_SQLITE_CODE: dict[str, tuple[type[StorageError], str]] = {
    "SQLITE_CORRUPT": (StorageDamagedError, DAMAGED_HINT),
    "SQLITE_NOTADB": (StorageNotADatabaseError, "restore it from a backup or move it away"),
    "SQLITE_READONLY": (StorageReadOnlyError, "the data dir is read-only: check its permissions"),
    "SQLITE_FULL": (StorageFullError, FULL_HINT),
    "SQLITE_IOERR": (StorageIOError, "the disk failed an I/O operation"),
    "SQLITE_PERM": (StoragePermissionError, PERMISSION_HINT),
    "SQLITE_AUTH": (StoragePermissionError, PERMISSION_HINT),
}


def sqlite_storage_error(db_path: str, e: sqlite3.Error) -> StorageError:
    """`e` as the StorageError its SQLite result code says, naming `db_path`."""
    name = getattr(e, "sqlite_errorname", "") or ""
    primary = "_".join(name.split("_")[:2])  # SQLITE_IOERR_WRITE -> SQLITE_IOERR
    cls, hint = _BY_SQLITE_CODE.get(primary, (StorageError, ""))
    if primary in ("SQLITE_CANTOPEN", "SQLITE_READONLY"):
        cls, hint = _why_not_writable(db_path, cls, hint)
    return cls(db_path, f"SQLite: {e}", hint)


def _why_not_writable(db_path: str, cls: type[StorageError],
                      hint: str) -> tuple[type[StorageError], str]:
    """SQLite says only "unable to open database file" or "attempt to write a readonly
    database" (it opens a file it may not write read-only): the folder says why —
    missing, on a read-only filesystem, or not writable by this user (SQLite also
    creates its -wal and -shm files beside the database)."""
    folder = os.path.dirname(os.path.abspath(db_path))
    if not os.path.isdir(folder):
        return StorageNotFoundError, "check that the data dir exists"
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        return StorageReadOnlyError, READ_ONLY_HINT
    if not os.access(folder, os.W_OK) or (
            os.path.exists(db_path) and not os.access(db_path, os.R_OK | os.W_OK)):
        return StoragePermissionError, PERMISSION_HINT
    if cls is StorageError:
        return cls, "check that the data dir exists and is writable"
    return cls, hint
