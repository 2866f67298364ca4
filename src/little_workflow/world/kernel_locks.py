"""Run locks the kernel holds: cross-process locks for virtual worlds on the local disk.

The protocol (one executor per run, on every filesystem), for a lock `name` under
`<dataDir>/locks/`:

1. open (creating) `<name>.lock` and `flock(LOCK_EX | LOCK_NB)` it. Refused: another
   process holds it — `RunLockedError` at once, naming the pid it wrote (information for
   the reader, never a decision: no pid is checked for life).
2. Got it: the path must still name the file locked (same device and inode); a holder
   releasing meanwhile unlinked it, so a lock on the unlinked file is dropped and step 1
   taken again.
3. Held: the holder writes `{pid, host, token, createdAt}` into the file.
4. Release: unlink the file, then close it (the unlock). A process that dies closes
   everything: the kernel drops its locks at once, so a killed holder's runs are free.

`flock` locks belong to the open file, not to the process (unlike POSIX `fcntl` record
locks, which drop when any descriptor of the file in the process closes): two Worlds of one
process over one folder by different paths exclude each other too. Local disks only: on a
network filesystem `flock` may be emulated with record locks.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
import time
import uuid

from ..errors import RunLockedError
from .ids import utc_now_iso
from .storage_errors import storage_error


class KernelLocks:
    """`acquire(name, label) -> token` / `release(name, token)`, as `locks.held` uses them."""

    def __init__(self, locks_dir: str):
        self.locks_dir = locks_dir
        self._held: dict[str, tuple[int, str]] = {}  # token -> (fd, path)
        self._guard = threading.Lock()

    def path(self, name: str) -> str:
        return os.path.join(self.locks_dir, f"{name}.lock")

    def acquire(self, name: str, label: str) -> str:
        path = self.path(name)
        for _ in range(100):
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:
                try:
                    os.makedirs(self.locks_dir, exist_ok=True)
                except OSError as e:
                    raise storage_error(e, self.locks_dir) from None
                continue
            except OSError as e:  # read-only, full, not a folder: the storage failing
                raise storage_error(e, path) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                owner = _owner_pid(fd, path)
                os.close(fd)
                raise RunLockedError(label, owner, f" (kernel lock {path})") from None
            except BaseException:
                os.close(fd)
                raise
            if not _still_named(fd, path):
                os.close(fd)  # released (unlinked) between our open and our lock
                continue
            token = uuid.uuid4().hex
            try:
                _write_owner(fd, token)
            except BaseException as e:
                os.close(fd)
                if isinstance(e, OSError):
                    raise storage_error(e, path) from None
                raise
            with self._guard:
                self._held[token] = (fd, path)
            return token
        raise RunLockedError(label, None, f" (could not take kernel lock {path})")

    def release(self, name: str, token: str) -> None:
        with self._guard:
            held = self._held.pop(token, None)
        if held is None:
            return
        fd, path = held
        try:
            # Unlinked while still locked: whoever opened it meanwhile sees, once it gets
            # the lock, that the path names another file (or none) and starts again.
            os.unlink(path)
        except OSError:
            # Gone already, or the folder turned read-only: the close below releases the
            # lock all the same, and a file left behind is simply locked again next time.
            pass
        finally:
            os.close(fd)


def _still_named(fd: int, path: str) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino)


#: The owner document is padded with spaces to this many bytes (JSON allows them).
OWNER_BYTES = 256


def _write_owner(fd: int, token: str) -> None:
    # No fsync: a lock matters only while its holder lives, and the kernel, not the file,
    # decides that. The content only lets a refused caller name the holder. Written over
    # what a killed holder left, padded: no truncation to zero, which makes ext4 flush the
    # file at close (its auto_da_alloc heuristic: measured, 5 ms a lock instead of 20 µs).
    doc = {"pid": os.getpid(), "host": socket.gethostname(), "token": token,
           "createdAt": utc_now_iso()}
    data = json.dumps(doc).encode().ljust(OWNER_BYTES)
    os.pwrite(fd, data, 0)
    if os.fstat(fd).st_size > len(data):
        os.ftruncate(fd, len(data))


def _owner_pid(fd: int, path: str) -> int | None:
    """The pid the holder wrote. It writes right after taking the lock, so a file still
    empty is read again a few times (at most ~50 ms) before giving up on naming it."""
    for _ in range(50):
        try:
            doc = json.loads(os.pread(fd, 4096, 0) or b"null")
        except ValueError:
            doc = None  # half written: read again
        except OSError:
            return None
        pid = doc.get("pid") if isinstance(doc, dict) else None
        if isinstance(pid, int):
            return pid
        if not _still_named(fd, path):
            return None  # released meanwhile
        time.sleep(0.001)
    return None
