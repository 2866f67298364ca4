"""Run locks and fences.

In-process: one run id (or outer-loop fence) is held at most once at a time per World
storage. Across processes (local_world): `locks/<name>/` created exclusively with
`owner.json {pid, token, createdAt}`; a lock whose owner pid is gone is taken over at
once, a lock dir with no readable owner.json is respected for a grace window (its owner
may be between mkdir and writing owner.json), and taking over a stale lock is itself
done behind a recovery lock so two recoverers cannot both win.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import time
import uuid
from typing import Iterator, Protocol

from ..errors import RunLockedError
from .ids import utc_now_iso
from .shared_state import StorageState
from .storage_errors import read_only_error

OWNERLESS_GRACE_SECONDS = 30.0


class CrossProcessLocks(Protocol):
    def acquire(self, name: str, label: str) -> str: ...
    def release(self, name: str, token: str) -> None: ...


@contextlib.contextmanager
def held(state: StorageState, name: str, label: str, backend: CrossProcessLocks | None) -> Iterator[str]:
    """Hold lock `name` (a run id hash or fence hash) for the body; `label` is what
    errors name (the run id or outer-loop id)."""
    token = uuid.uuid4().hex
    with state.lock:
        if name in state.active_runs:
            raise RunLockedError(label, os.getpid(), " (in this process)")
        state.active_runs[name] = token
    try:
        backend_token = backend.acquire(name, label) if backend is not None else None
        check = getattr(backend, "check", None)
        if check is not None:  # a leased lock fences every append of its holder
            state.fences[label] = lambda: check(name, backend_token)
        try:
            yield token
        finally:
            if check is not None:
                state.fences.pop(label, None)
            if backend is not None and backend_token is not None:
                backend.release(name, backend_token)
    finally:
        with state.lock:
            if state.active_runs.get(name) == token:
                del state.active_runs[name]


def boot_time() -> float:
    """When this machine booted (seconds since the epoch; 0.0 where unknown)."""
    try:
        with open("/proc/stat", "rb") as f:
            for line in f:
                if line.startswith(b"btime "):
                    return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def made_before_this_boot(age_seconds: float) -> bool:
    """A file this old was written before the machine last booted (by a process that is
    gone for sure). btime has one-second resolution: allow one second."""
    booted = boot_time()
    return booted > 0 and time.time() - age_seconds < booted - 1


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def process_start_time(pid: int) -> str:
    """The kernel's start time of a process (clock ticks since boot), or "" where unknown:
    with the boot id it tells a reused pid from the process that wrote a lock."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b") ", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return ""


_identity: dict[int, dict[str, object]] = {}  # pid -> identity (a forked child has its own)


def this_process() -> dict[str, object]:
    """What identifies this process for real: a pid alone is reused, and containers that
    share a data dir can each have the same pid. (Read once per process: none of it
    changes while the process lives.)"""
    pid = os.getpid()
    me = _identity.get(pid)
    if me is None:
        me = _identity[pid] = {"pid": pid, "host": socket.gethostname(), "bootId": _boot_id(),
                               "startTime": process_start_time(pid)}
    return dict(me)


def owner_state(owner: dict) -> str:
    """"self", "alive", "dead" or "unknown" (another host: cannot be checked from here)."""
    me = this_process()
    pid = owner.get("pid")
    if not isinstance(pid, int):
        return "dead"
    if owner.get("host", me["host"]) != me["host"] or owner.get("bootId", me["bootId"]) != me["bootId"]:
        # Another machine or container, or this machine before a reboot (same host name,
        # other boot id: every process of that boot is gone).
        if owner.get("host", me["host"]) == me["host"]:
            return "dead"
        return "unknown"
    started = owner.get("startTime")
    if pid == me["pid"] and (not started or started == me["startTime"]):
        return "self"
    if not pid_alive(pid):
        return "dead"
    if started and process_start_time(pid) not in ("", started):
        return "dead"  # the pid was reused by a newer process
    return "alive"


def directory_lock_holder(locks_dir: str, name: str) -> str:
    """Who holds the directory lock `name` (local_world): "none" when it is not held, else
    `owner_state` of its owner — "self", "alive", "dead" (a killed process's lock, taken
    over by the next one to ask) or "unknown" (another host, or no readable owner yet)."""
    lock_dir = os.path.join(locks_dir, name)
    if not os.path.isdir(lock_dir):
        return "none"
    try:
        with open(os.path.join(lock_dir, "owner.json"), "rb") as f:
            owner = json.load(f)
    except (OSError, ValueError):
        return "unknown"
    return owner_state(owner) if isinstance(owner, dict) else "unknown"


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (killed, not yet reaped by its parent) holds nothing any more.
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().split(b") ", 1)[1][:1] != b"Z"
    except (OSError, IndexError):
        return True


class ReadOnlyLocks:
    """The locks of a World opened read-only: taking one is a write, refused."""

    def __init__(self, locks_dir: str):
        self.locks_dir = locks_dir

    def acquire(self, name: str, label: str) -> str:
        raise read_only_error(self.locks_dir)

    def release(self, name: str, token: str) -> None:
        return None


class DirectoryLocks:
    """Cross-process locks as exclusively created directories (local disk)."""

    def __init__(self, locks_dir: str, grace_seconds: float = OWNERLESS_GRACE_SECONDS):
        self.locks_dir = locks_dir
        self.grace_seconds = grace_seconds

    def _owner(self, lock_dir: str) -> dict | None:
        try:
            doc = json.loads(_read_small(os.path.join(lock_dir, "owner.json")))
            if isinstance(doc, dict) and isinstance(doc.get("pid"), int) and doc.get("token"):
                return doc
        except (OSError, ValueError):
            pass
        return None

    def acquire(self, name: str, label: str) -> str:
        lock_dir = os.path.join(self.locks_dir, name)
        token = uuid.uuid4().hex
        # owner.json is written *before* the lock directory exists, then renamed into it
        # right after the mkdir: a killed process can leave an ownerless lock dir only in
        # the two system calls between mkdir and rename.
        # No fsync: a lock matters only to the processes of this boot, which all see the
        # same page cache. After a power cut every lock is stale whatever reached the disk:
        # an owner.json names the old boot id (a dead owner), and a lock dir without a
        # readable owner.json is older than the boot (taken over at once, no grace).
        # Plain system calls, not Python file objects: a run takes and gives back its lock
        # at every start and every execution, and the file objects' bookkeeping (stat,
        # seek, isatty, the text layer) was most of its cost.
        staged = os.path.join(self.locks_dir, f".owner-{token}.tmp")
        _write_new(staged, json.dumps(
            {**this_process(), "token": token, "createdAt": utc_now_iso()}).encode())
        try:
            for _ in range(50):
                try:
                    os.mkdir(lock_dir)
                except FileExistsError:
                    self._respect_or_recover(name, lock_dir, label)
                    continue
                os.rename(staged, os.path.join(lock_dir, "owner.json"))
                staged = ""
                return token
            raise RunLockedError(label, None, f" (could not take {lock_dir})")
        finally:
            if staged:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(staged)

    def _respect_or_recover(self, name: str, lock_dir: str, label: str) -> None:
        """The lock dir exists: raise if its holder may be alive, else take it over."""
        owner = self._owner(lock_dir)
        if owner is not None:
            state = owner_state(owner)
            if state in ("alive", "unknown"):
                where = f" on host {owner.get('host')}" if state == "unknown" else ""
                raise RunLockedError(label, owner["pid"], where)
            # Dead owner — or this very process, whose in-process lock is free, so the
            # directory is a leftover of an earlier holder in here.
            self._recover(name, lock_dir, owner["token"])
            return
        age = self._age(lock_dir)
        if age is None:
            return  # vanished meanwhile: try again
        if age < self.grace_seconds and not made_before_this_boot(age):
            raise RunLockedError(
                label, None, f" (lock {lock_dir} is being created, no owner.json yet)")
        self._recover(name, lock_dir, None)

    @staticmethod
    def _age(path: str) -> float | None:
        try:
            return time.time() - os.stat(path).st_mtime
        except FileNotFoundError:
            return None

    def _recover(self, name: str, lock_dir: str, stale_token: str | None) -> None:
        recovery_dir = os.path.join(self.locks_dir, name + ".recovery")
        try:
            os.mkdir(recovery_dir)
        except FileExistsError:
            age = self._age(recovery_dir)
            if age is not None and age > self.grace_seconds:
                # A recoverer died mid-recovery; its recovery lock is itself stale.
                shutil.rmtree(recovery_dir, ignore_errors=True)
            time.sleep(0.01)
            return
        try:
            owner = self._owner(lock_dir)
            still_stale = (owner is None and stale_token is None) or (
                owner is not None and owner["token"] == stale_token
            )
            if still_stale:
                # Rename first so the lock name frees atomically, then delete at leisure.
                trash = os.path.join(self.locks_dir, f".stale-{uuid.uuid4().hex}")
                try:
                    os.rename(lock_dir, trash)
                except FileNotFoundError:
                    return
                shutil.rmtree(trash, ignore_errors=True)
        finally:
            shutil.rmtree(recovery_dir, ignore_errors=True)

    def release(self, name: str, token: str) -> None:
        lock_dir = os.path.join(self.locks_dir, name)
        owner = self._owner(lock_dir)
        if owner is None or owner["token"] != token:
            return  # not ours any more: never remove another holder's lock
        trash = os.path.join(self.locks_dir, f".released-{token}")
        try:
            os.rename(lock_dir, trash)
        except FileNotFoundError:
            return
        try:
            # What acquire put there; anything else (someone's stray file) takes the tree walk.
            os.unlink(os.path.join(trash, "owner.json"))
            os.rmdir(trash)
        except OSError:
            shutil.rmtree(trash, ignore_errors=True)


def _write_new(path: str, data: bytes) -> None:
    """Create `path` (its folder too, the first time) holding `data`; no fsync."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o666)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, flags, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _read_small(path: str) -> bytes:
    """The whole of a small file, in one read where it fits."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        data = os.read(fd, 4096)
        if len(data) < 4096:
            return data
        chunks = [data]
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
