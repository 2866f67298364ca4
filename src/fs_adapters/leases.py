"""Fenced leases on an object store: the run-lock protocol of S3 and Azure Blob.

1. A lock is one object `<locks>/<name>/owner.json` {state, token, generation, pid, host, lease}.
2. Take: create it if absent (`If-None-Match: *`) at generation 1. Found: if free, or expired
   by the store's clock alone (`Date` of a fresh look − `Last-Modified` ≥ lease + 1 s),
   replace exactly the version judged (`If-Match` its ETag) at generation + 1; else
   RunLockedError. One contender wins; a generation is never reused.
3. Renew every lease/3 (`If-Match` on the last ETag); a refused write still bearing our token
   (its answer lost) is adopted, another token means the lease is lost.
4. `check()` fails past start of the last renewal that landed + lease − lease/3 (this host's
   elapsed clock): a holder that cannot renew stops before the store can expire it.
5. Release marks it free (`If-Match`), never deletes it, so generations only rise.
6. The check is an optimisation, the log is the fence (its incarnations refuse a stale writer).
A store supplies `LeaseStore`: create if absent, replace if unchanged, look.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import threading
import time
import uuid
from typing import ClassVar, Protocol

from little_workflow.errors import (
    LeaseLostError,
    RunLockedError,
    StorageError,
    StorageUnreachableError,
)
from little_workflow.world.ids import utc_now_iso

#: How many times `acquire` looks again after losing a race for the lock object.
ACQUIRE_ROUNDS = 20
#: Writes without an answer (timeouts) an acquire tries before it gives up.
UNANSWERED_ROUNDS = 3


def lease_from_env(default: float = 30.0) -> float:
    """`LW_LEASE_SECONDS` overrides the default lease (e.g. a short one in tests)."""
    raw = os.environ.get("LW_LEASE_SECONDS")
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"LW_LEASE_SECONDS must be a number of seconds, not {raw!r}") from None
    if not value > 0:
        raise ValueError(f"LW_LEASE_SECONDS must be positive, not {raw!r}")
    return value


#: Default lease of a run lock (30 s, or `LW_LEASE_SECONDS`). Each adapter module copies
#: it into its own `LEASE_SECONDS`, read when a World is built, so tests may lower it.
LEASE_SECONDS = lease_from_env()


@dataclasses.dataclass(frozen=True)
class LockRecord:
    """What a lock object says. Read leniently: a field the store lost is None."""

    state: str  # "held" or "free"
    token: str
    generation: int
    pid: int | None = None
    host: str | None = None
    lease_seconds: float | None = None

    FIELD_NAMES: ClassVar[tuple[str, ...]] = (
        "state", "token", "generation", "pid", "host", "lease_seconds")

    def body(self) -> bytes:
        """The object's bytes, for people and tools reading the lock (the fields a look
        relies on travel as metadata, which a HEAD returns)."""
        return json.dumps({
            "state": self.state, "token": self.token, "generation": self.generation,
            "pid": self.pid, "host": self.host, "leaseSeconds": self.lease_seconds,
            "writtenAt": utc_now_iso(),
        }).encode()

    def fields(self) -> dict[str, str]:
        return {"state": self.state, "token": self.token, "generation": str(self.generation),
                "pid": str(self.pid), "host": self.host or "",
                "lease_seconds": repr(self.lease_seconds)}

    @classmethod
    def from_fields(cls, fields: dict[str, str]) -> LockRecord:
        def number(raw: str | None, kind: type[int] | type[float]) -> int | float | None:
            try:
                return kind(raw) if raw is not None else None
            except ValueError:
                return None

        generation = number(fields.get("generation"), int)
        pid = number(fields.get("pid"), int)
        lease = number(fields.get("lease_seconds"), float)
        return cls(state=fields.get("state", ""), token=fields.get("token", ""),
                   generation=int(generation or 0), pid=int(pid) if pid is not None else None,
                   host=fields.get("host"), lease_seconds=lease)


@dataclasses.dataclass(frozen=True)
class LockVersion:
    """One version of a lock object as the store showed it."""

    etag: str
    record: LockRecord
    age: float | None  # seconds since it was written, by the store's clock; None: no time given


class LockChanged(Exception):
    """The condition failed: the object exists (create), or is not the version named or
    is gone (replace). Another writer got there first."""


class TryAgain(Exception):
    """The store asks to repeat the request (a concurrent conditional write, a busy or
    timed-out server); nothing is known to have changed."""


class LeaseStore(Protocol):
    """The primitives a store supplies. Anything but `LockChanged`/`TryAgain` is a
    `StorageError` naming the object."""

    def url(self, path: str) -> str: ...
    def create(self, path: str, record: LockRecord) -> str:
        """Write `record` only if no object is there; its new ETag."""
    def replace(self, path: str, record: LockRecord, etag: str) -> str:
        """Write `record` only over the version `etag`; its new ETag."""
    def look(self, path: str) -> LockVersion | None:
        """The object now (None: there is none), with its age by the store's clock."""


def local_clock() -> float:
    """This host's elapsed time, never its wall clock; counts suspend where it can."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic()


def this_host() -> str:
    return socket.gethostname().encode("ascii", "replace").decode()


@dataclasses.dataclass
class _Lease:
    name: str
    label: str
    path: str
    token: str
    generation: int
    etag: str
    deadline: float  # local clock: after it, the lease may have expired at the store
    stop: threading.Event = dataclasses.field(default_factory=threading.Event)
    lost: str | None = None
    last_error: str | None = None
    renewals: int = 0
    thread: threading.Thread | None = None


class LeasedLocks:
    """Run locks as fenced leases on `store` (the protocol above), one object per lock
    under `locks_dir`. The World's `CrossProcessLocks`, plus `check` (its fence) and
    `generation`."""

    def __init__(self, store: LeaseStore, locks_dir: str, lease_seconds: float = LEASE_SECONDS):
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        self.store = store
        self.locks_dir = locks_dir
        self.lease_seconds = float(lease_seconds)
        self.renew_every = self.lease_seconds / 3
        self.margin = self.lease_seconds / 3
        self._leases: dict[str, _Lease] = {}  # token -> lease
        self._guard = threading.Lock()

    def _path(self, name: str) -> str:
        return f"{self.locks_dir}/{name}/owner.json"

    def _record(self, token: str, generation: int, state: str) -> LockRecord:
        return LockRecord(state=state, token=token, generation=generation, pid=os.getpid(),
                          host=this_host(), lease_seconds=self.lease_seconds)

    def _expired(self, found: LockVersion) -> bool:
        """Judged by the store's clock alone: how long ago, by its clock, it was written."""
        if found.record.state == "free":
            return True
        if found.age is None:
            return False  # the store gave no time: never guess with ours
        # Both times are whole seconds, so the true age is more than `age - 1`.
        return found.age >= (found.record.lease_seconds or self.lease_seconds) + 1.0

    def acquire(self, name: str, label: str) -> str:
        path = self._path(name)
        token = uuid.uuid4().hex
        # A write that got no answer may have landed: from the first such write on, the
        # lease may already run at the store, so the deadline counts from it.
        unanswered: float | None = None
        last_unanswered: StorageUnreachableError | None = None
        no_answers = 0
        for attempt in range(ACQUIRE_ROUNDS):
            started = local_clock() if unanswered is None else unanswered
            try:
                etag = self.store.create(path, self._record(token, 1, "held"))
                generation = 1
            except TryAgain:
                time.sleep(0.05 * (attempt + 1))
                continue
            except StorageUnreachableError as e:
                unanswered, last_unanswered = started, e
                no_answers += 1
                if no_answers >= UNANSWERED_ROUNDS:
                    raise  # the store is down, not slow
                time.sleep(0.05 * (attempt + 1))
                continue
            except LockChanged:
                found = self.store.look(path)
                if found is None:
                    continue  # released and removed meanwhile: race to create again
                prior = found.record
                if prior.token == token and prior.state == "held":
                    # Our own earlier write landed, its answer was lost: keep it.
                    etag, generation = found.etag, prior.generation
                elif not self._expired(found):
                    raise RunLockedError(
                        label, prior.pid,
                        f" on host {prior.host} (lease generation {prior.generation})") from None
                else:
                    # Free or expired: take it over, exactly that version of it.
                    if unanswered is None:
                        started = local_clock()
                    try:
                        etag = self.store.replace(
                            path, self._record(token, prior.generation + 1, "held"), found.etag)
                        generation = prior.generation + 1
                    except (LockChanged, TryAgain):
                        continue  # another contender won this round: look again
                    except StorageUnreachableError as e:
                        unanswered, last_unanswered = started, e
                        no_answers += 1
                        if no_answers >= UNANSWERED_ROUNDS:
                            raise  # the store is down, not slow
                        continue  # the next round finds out whether it landed
            lease = _Lease(name=name, label=label, path=path, token=token,
                           generation=generation, etag=etag,
                           deadline=started + self.lease_seconds - self.margin)
            with self._guard:
                self._leases[token] = lease
            lease.thread = threading.Thread(target=self._renew, args=(lease,),
                                            name=f"lease-{name[:8]}", daemon=True)
            lease.thread.start()
            return token
        if last_unanswered is not None:
            raise last_unanswered
        raise RunLockedError(label, None, f" (could not take {self.store.url(path)})")

    def _renew(self, lease: _Lease) -> None:
        wait = self.renew_every
        while not lease.stop.wait(max(0.0, wait)):
            if local_clock() >= lease.deadline:
                lease.lost = (f"could not renew {self.store.url(lease.path)} in time "
                              f"(last error: {lease.last_error})")
                return
            started = local_clock()
            try:
                etag = self.store.replace(
                    lease.path, self._record(lease.token, lease.generation, "held"), lease.etag)
            except LockChanged:
                if self._adopt_own_write(lease):
                    wait = 0.0
                    continue
                if lease.lost is not None:
                    return
                wait = min(self.renew_every, self.lease_seconds / 10)
                continue
            except (StorageError, TryAgain) as e:  # try again soon, until the deadline
                lease.last_error = f"{type(e).__name__}: {e}"
                wait = min(self.renew_every, self.lease_seconds / 10)
                continue
            with self._guard:
                lease.etag = etag
                lease.deadline = started + self.lease_seconds - self.margin
                lease.renewals += 1
                lease.last_error = None
            wait = started + self.renew_every - local_clock()

    def _adopt_own_write(self, lease: _Lease) -> bool:
        """After a refused conditional write: is the object still ours (an earlier write
        landed but its answer was lost)? Then adopt its ETag. If another holder is there,
        the lease is lost."""
        try:
            found = self.store.look(lease.path)
        except (StorageError, TryAgain) as e:
            lease.last_error = str(e) or type(e).__name__
            return False
        if found is not None and found.record.token == lease.token and found.record.state == "held":
            lease.etag = found.etag
            return True
        record = found.record if found is not None else None
        lease.lost = (f"another holder took {self.store.url(lease.path)} "
                      f"(generation {record.generation if record else '?'}, "
                      f"host {record.host if record else '?'})")
        return False

    def check(self, name: str, token: str) -> None:
        """Raise `LeaseLostError` unless this holder can still be sure of its lease."""
        lease = self._leases.get(token)
        if lease is None or lease.name != name:
            raise LeaseLostError(name, "this process does not hold that lease")
        if lease.lost is not None:
            raise LeaseLostError(lease.label, lease.lost)
        if local_clock() >= lease.deadline:
            raise LeaseLostError(
                lease.label,
                f"could not renew {self.store.url(lease.path)} within "
                f"{self.lease_seconds - self.margin:.1f} s of a {self.lease_seconds:g} s lease "
                f"(last error: {lease.last_error}); stopping before another host may take "
                "the run over")

    def generation(self, token: str) -> int:
        """The generation (fencing number) this holder took the lock at."""
        lease = self._leases.get(token)
        if lease is None:
            raise LeaseLostError("?", "this process does not hold that lease")
        return lease.generation

    def release(self, name: str, token: str) -> None:
        """Mark the lock free if it is still ours. Best effort: if the store cannot be
        reached, the lease simply expires."""
        with self._guard:
            lease = self._leases.pop(token, None)
        if lease is None:
            return
        # No need to wait for the renewer: a renewal racing this write is refused (or makes
        # this one refused, and it is adopted below), never resurrects the lease.
        lease.stop.set()
        if lease.lost is not None and lease.lost.startswith("another holder"):
            return
        for _ in range(3):
            try:
                self.store.replace(lease.path, self._record(lease.token, lease.generation, "free"),
                                   lease.etag)
                return
            except (LockChanged, TryAgain):
                if not self._adopt_own_write(lease):
                    return  # not ours any more: never touch another holder's lock
            except StorageError:  # unreachable store: the lease expires on its own
                return
