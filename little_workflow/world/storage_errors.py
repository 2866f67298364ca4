"""OS failures of the storage itself, turned into one typed error naming the file."""

from __future__ import annotations

import errno

from ..errors import StorageError

_HINTS = {
    errno.ENOSPC: "the disk is full: free some space and run again",
    errno.EDQUOT: "the disk quota is exhausted: free some space and run again",
    errno.EROFS: "the data dir is on a read-only filesystem",
    errno.EACCES: "check the data dir's permissions",
    errno.EPERM: "check the data dir's permissions",
    errno.EFBIG: "the file size limit was reached",
    errno.EIO: "the disk failed an I/O operation",
}


def storage_error(e: OSError, path: str) -> StorageError:
    """`e` as a StorageError naming `e.filename` (or `path` when the error names none).
    A StorageError is returned as it is."""
    if isinstance(e, StorageError):
        return e
    problem = e.strerror or str(e) or type(e).__name__
    return StorageError(str(e.filename or path), problem, _HINTS.get(e.errno or 0, ""))


def is_storage_failure(e: BaseException) -> bool:
    """An OSError that is the storage failing (not a missing file, which callers handle)."""
    return isinstance(e, OSError) and not isinstance(
        e, (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError))
