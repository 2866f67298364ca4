"""Object stores (S3 through s3fs), experimental.

S3 has no rename, so temp + move cannot publish atomically. Every immutable file is
instead published with one conditional PUT (`If-None-Match: *`): the first writer wins,
a loser gets 412 and re-reads. Listings bypass s3fs's per-instance cache, so another
writer's (another host's) events are seen.

Run locks are fenced leases (see `ObjectStoreLocks`). Errors are mapped precisely: only
a 412 `PreconditionFailed` means "already there" (a 409 `ConditionalRequestConflict`,
a concurrent conditional write, is retried); anything else — access denied, a missing
bucket, a bad request, an unreachable endpoint — is a `StorageError` naming the object.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import threading
import time
import uuid
from email.utils import parsedate_to_datetime
from typing import Any

from little_workflow.errors import (
    LeaseLostError,
    RunLockedError,
    StorageError,
    StorageNotFoundError,
    StoragePermissionError,
    StorageUnreachableError,
)
from little_workflow.world.ids import utc_now_iso
from little_workflow.world.publish import Publisher, is_temp_name


def _lease_from_env() -> float:
    """`LW_LEASE_SECONDS` overrides the default lease (e.g. a short one in tests)."""
    raw = os.environ.get("LW_LEASE_SECONDS")
    if raw is None or not raw.strip():
        return 30.0
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"LW_LEASE_SECONDS must be a number of seconds, not {raw!r}") from None
    if not value > 0:
        raise ValueError(f"LW_LEASE_SECONDS must be positive, not {raw!r}")
    return value


#: Default lease of a run lock (30 s, or `LW_LEASE_SECONDS`). Read when a World is
#: built, so tests may lower it.
LEASE_SECONDS = _lease_from_env()
#: Codes that mean the credentials or the policy refuse the request.
AUTH_CODES = {
    "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken",
    "ExpiredToken", "TokenRefreshRequired", "AuthorizationHeaderMalformed",
    "InvalidSecurity", "AllAccessDisabled", "AccountProblem",
}
CONFLICT_RETRIES = 10


def _store_error_types() -> tuple[type[BaseException], ...]:
    """What a failed request raises: s3fs's translated OSErrors, botocore's own errors
    (no connection, timeouts) and aiohttp's. Anything else is a bug and stays as it is."""
    types: list[type[BaseException]] = [OSError]
    try:
        from botocore.exceptions import BotoCoreError, ClientError

        types += [BotoCoreError, ClientError]
    except ImportError:  # pragma: no cover - s3fs depends on botocore
        pass
    try:
        from aiohttp import ClientError as HttpClientError

        types.append(HttpClientError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(types)


STORE_ERRORS = _store_error_types()


# ---- error mapping -------------------------------------------------------------------

def s3_error_code(e: BaseException) -> tuple[str, int] | None:
    """(code, HTTP status) of the S3 error response behind `e` (s3fs keeps botocore's
    ClientError as `__cause__`), or None when no response came back (network)."""
    seen: set[int] = set()
    current: BaseException | None = e
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response = getattr(current, "response", None)
        if isinstance(response, dict) and "Error" in response:
            code = str(response["Error"].get("Code", ""))
            status = int(response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
            return code, status
        current = current.__cause__ or current.__context__
    return None


def precondition_failed(e: BaseException) -> bool:
    """True only for a 412 PreconditionFailed (the object exists / changed)."""
    found = s3_error_code(e)
    return found is not None and (found[0] == "PreconditionFailed" or found[1] == 412)


def conditional_conflict(e: BaseException) -> bool:
    """A 409 ConditionalRequestConflict: a concurrent conditional write; try again."""
    found = s3_error_code(e)
    return found is not None and found[0] == "ConditionalRequestConflict"


def no_such_key(e: BaseException) -> bool:
    found = s3_error_code(e)
    return found is not None and found[0] in ("NoSuchKey", "NotFound", "404")


def storage_error(e: BaseException, path: str, doing: str) -> StorageError:
    """A typed error naming the bucket and key for any failure that is not a precondition:
    no response is `StorageUnreachableError`, refused credentials or policy
    `StoragePermissionError`, a missing bucket `StorageNotFoundError`; any other answer a
    plain `StorageError` with its code."""
    where = f"s3://{path}"
    bucket = path.partition("/")[0]
    found = s3_error_code(e)
    if found is None:
        return StorageUnreachableError(
            where, f"could not reach the object store while {doing}: {type(e).__name__}: {e}",
            "check the endpoint and the network")
    code, status = found
    if code in AUTH_CODES or status == 403:
        return StoragePermissionError(
            where, f"access denied while {doing} ({code}, HTTP {status}): {e}",
            f"check the credentials and the policy of bucket {bucket!r}")
    if code == "NoSuchBucket":
        return StorageNotFoundError(where, f"bucket {bucket!r} does not exist (while {doing})",
                                    "create it or fix the world URL")
    return StorageError(where, f"{doing} failed: {code} (HTTP {status}): {e}")


class ObjectStorePublisher(Publisher):
    blocking = True
    prefers_listing = True
    empty_folders_stay = False  # no folders: a prefix is gone with its last key
    remove_tells_absence = False  # DeleteObject answers 204 whether or not the key was there
    atomic_publication = "yes: one conditional PUT (If-None-Match: *)"
    multi_writer = "yes: processes and hosts (the store arbitrates)"

    def __init__(self, fs: Any):
        self.fs = fs

    def publish_if_absent(self, path: str, data: bytes, *, durable: bool = True) -> bool:
        for attempt in range(CONFLICT_RETRIES):
            try:
                self.fs.pipe_file(path, data, mode="create")
            except STORE_ERRORS as e:
                if precondition_failed(e):
                    return False
                if conditional_conflict(e) and attempt + 1 < CONFLICT_RETRIES:
                    time.sleep(0.05 * (attempt + 1))
                    continue
                raise storage_error(e, path, "publishing") from e
            return True
        raise AssertionError("unreachable")

    def replace(self, path: str, data: bytes, *, durable: bool = True) -> None:
        try:
            self.fs.pipe_file(path, data)  # one PUT: readers see the old or the new object
        except STORE_ERRORS as e:
            raise storage_error(e, path, "writing") from e

    def read(self, path: str) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(path))
        except IsADirectoryError:
            return None
        except FileNotFoundError as e:
            found = s3_error_code(e)
            if found is not None and found[0] == "NoSuchBucket":
                raise storage_error(e, path, "reading") from e
            return None
        except STORE_ERRORS as e:
            raise storage_error(e, path, "reading") from e

    def ensure_dir(self, path: str, *, durable: bool = True) -> None:
        return None  # object stores have no directories

    def list_names(self, path: str) -> list[str]:
        try:
            entries = self.fs.ls(path, detail=False, refresh=True)
        except FileNotFoundError as e:
            found = s3_error_code(e)
            if found is not None and found[0] == "NoSuchBucket":
                raise storage_error(e, path, "listing") from e
            return []
        except STORE_ERRORS as e:
            raise storage_error(e, path, "listing") from e
        names = {str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries}
        return sorted(n for n in names if n and not is_temp_name(n))

    def list_page(self, path: str, start_after: str, limit: int) -> list[str] | None:
        """One `ListObjectsV2` request from `start_after` on (`StartAfter`, `MaxKeys`, no
        delimiter: keys at any depth): a page of a nested index costs one request,
        whatever it holds."""
        bucket, _, key = self.fs._strip_protocol(path).strip("/").partition("/")
        prefix = key.rstrip("/") + "/"
        args: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": limit}
        if start_after:
            args["StartAfter"] = prefix + start_after
        try:
            answer = self.fs.call_s3("list_objects_v2", **args)
        except STORE_ERRORS as e:
            raise storage_error(e, path, "listing") from e
        names = [item["Key"][len(prefix):] for item in answer.get("Contents", [])]
        return [n for n in names if n and not is_temp_name(n.rsplit("/", 1)[-1])]

    # Versioned documents: the ETag is the version; a write names it (`If-Match`), or
    # asks that nothing be there (`If-None-Match: *`), and the store arbitrates.
    versioned_across_processes = True

    def read_versioned(self, path: str) -> tuple[bytes, str] | None:
        """One GET: the bytes and their ETag, from the same response."""
        from fsspec.asyn import sync

        bucket, _, key = self.fs._strip_protocol(path).strip("/").partition("/")

        async def get() -> tuple[bytes, str]:
            answer = await self.fs._call_s3("get_object", Bucket=bucket, Key=key)
            body = answer["Body"]
            try:
                return bytes(await body.read()), str(answer["ETag"])
            finally:
                body.close()

        try:
            return sync(self.fs.loop, get)
        except FileNotFoundError as e:
            found = s3_error_code(e)
            if found is not None and found[0] == "NoSuchBucket":
                raise storage_error(e, path, "reading") from e
            return None
        except STORE_ERRORS as e:
            raise storage_error(e, path, "reading") from e

    def replace_if(self, path: str, data: bytes, version: str | None, *,
                   durable: bool = True) -> bool:
        """One conditional PUT: False on 412 (another writer's version is there). A 409
        (a concurrent conditional write still in flight) is asked again."""
        bucket, _, key = self.fs._strip_protocol(path).strip("/").partition("/")
        condition = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}
        for attempt in range(CONFLICT_RETRIES):
            try:
                self.fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data,
                                ContentType="application/json", **condition)
            except STORE_ERRORS as e:
                if precondition_failed(e) or (version is not None and no_such_key(e)):
                    return False
                if conditional_conflict(e) and attempt + 1 < CONFLICT_RETRIES:
                    time.sleep(0.05 * (attempt + 1))
                    continue
                raise storage_error(e, path, "writing") from e
            return True
        raise AssertionError("unreachable")

    def cross_process_locks(self, root: str) -> "ObjectStoreLocks":
        return ObjectStoreLocks(self.fs, f"{root}/locks", lease_seconds=LEASE_SECONDS)


# ---- fenced leases -------------------------------------------------------------------

def _local_clock() -> float:
    """This host's elapsed time, never its wall clock; counts suspend where it can."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic()


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


class ObjectStoreLocks:
    """Fenced leases: `<root>/locks/<name>/owner.json`.

    - The lock object carries its holder's token and a **generation** (user metadata, so a
      HEAD reads it); every takeover writes generation + 1 with `If-Match` on the ETag it
      judged, so exactly one contender wins and a generation is never reused. Release marks
      the object free (same conditional PUT) rather than deleting it, so generations keep
      growing across holders.
    - **Expiry is judged by the store's clock only**: a lease is expired when the `Date` of a
      fresh HEAD response minus the object's `LastModified` exceeds the holder's lease (plus
      1 s, both having one-second resolution). No host's wall clock is compared to another's.
    - The holder renews every lease/3 (retrying transient errors) and keeps a **local
      deadline**: start of its last successful renewal request + lease - margin (lease/3).
      `check()` raises `LeaseLostError` once past it, or once the store shows another holder,
      so a holder that cannot renew stops appending before anyone can take over. The margin
      also bounds how long an append that passed `check()` may take to land — for a holder
      that keeps running. One paused (SIGSTOP, a VM freeze) between `check()` and its PUT
      may still land that write after a takeover: the check is an optimisation, not the
      fence. The fence is the log: the taker folds such a write in as history (a step it
      recorded is not run again), and the paused holder's next append meets the taker's
      sequence (412), then a failing `check()`.
    """

    def __init__(self, fs: Any, locks_dir: str, lease_seconds: float = LEASE_SECONDS):
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        self.fs = fs
        self.locks_dir = locks_dir
        self.lease_seconds = float(lease_seconds)
        self.renew_every = self.lease_seconds / 3
        self.margin = self.lease_seconds / 3
        self._leases: dict[str, _Lease] = {}  # token -> lease
        self._guard = threading.Lock()

    def _path(self, name: str) -> str:
        return f"{self.locks_dir}/{name}/owner.json"

    @staticmethod
    def _split(path: str) -> tuple[str, str]:
        bucket, _, key = path.partition("/")
        return bucket, key

    def _put(self, path: str, token: str, generation: int, state: str, **condition: str) -> dict:
        host = socket.gethostname().encode("ascii", "replace").decode()
        body = json.dumps({
            "state": state, "token": token, "generation": generation, "pid": os.getpid(),
            "host": host, "leaseSeconds": self.lease_seconds, "writtenAt": utc_now_iso(),
        }).encode()
        bucket, key = self._split(path)
        return self.fs.call_s3(
            "put_object", Bucket=bucket, Key=key, Body=body, ContentType="application/json",
            Metadata={"state": state, "token": token, "generation": str(generation),
                      "pid": str(os.getpid()), "host": host,
                      "lease-seconds": repr(self.lease_seconds)},
            **condition,
        )

    def _head(self, path: str) -> dict | None:
        bucket, key = self._split(path)
        try:
            return self.fs.call_s3("head_object", Bucket=bucket, Key=key)
        except FileNotFoundError as e:
            if no_such_key(e) or s3_error_code(e) is None:
                return None
            raise storage_error(e, path, "reading the run lock") from e
        except STORE_ERRORS as e:
            raise storage_error(e, path, "reading the run lock") from e

    @staticmethod
    def _expired(head: dict, default_lease: float) -> bool:
        """Judged by the store's clock alone: its Date now vs its LastModified."""
        meta = head.get("Metadata") or {}
        if meta.get("state") == "free":
            return True
        date = (head.get("ResponseMetadata", {}).get("HTTPHeaders") or {}).get("date")
        modified = head.get("LastModified")
        if not date or modified is None:
            return False  # the store gave no time: never guess with ours
        try:
            lease = float(meta.get("lease-seconds", default_lease))
        except ValueError:
            lease = default_lease
        # Both times are whole seconds, so the true age is more than `age - 1`.
        age = (parsedate_to_datetime(date) - modified).total_seconds()
        return age >= lease + 1.0

    def acquire(self, name: str, label: str) -> str:
        path = self._path(name)
        token = uuid.uuid4().hex
        for attempt in range(20):
            started = _local_clock()
            try:
                response = self._put(path, token, 1, "held", IfNoneMatch="*")
                generation = 1
            except STORE_ERRORS as e:
                if conditional_conflict(e):
                    time.sleep(0.05 * (attempt + 1))
                    continue
                if not precondition_failed(e):
                    raise storage_error(e, path, f"taking the lock of {label}") from e
                head = self._head(path)
                if head is None:
                    continue  # released and removed meanwhile: race to create again
                meta = head.get("Metadata") or {}
                try:
                    prior = int(meta.get("generation", "0"))
                except ValueError:
                    prior = 0
                if not self._expired(head, self.lease_seconds):
                    pid = meta.get("pid")
                    raise RunLockedError(
                        label, int(pid) if pid and pid.isdigit() else None,
                        f" on host {meta.get('host')} (lease generation {prior})") from None
                # Free or expired: take it over, exactly that version of it (If-Match).
                started = _local_clock()
                try:
                    response = self._put(path, token, prior + 1, "held", IfMatch=head["ETag"])
                    generation = prior + 1
                except STORE_ERRORS as e2:
                    if precondition_failed(e2) or conditional_conflict(e2) or no_such_key(e2):
                        continue  # another contender won this round: look again
                    raise storage_error(e2, path, f"taking over the lock of {label}") from e2
            lease = _Lease(name=name, label=label, path=path, token=token,
                           generation=generation, etag=response["ETag"],
                           deadline=started + self.lease_seconds - self.margin)
            with self._guard:
                self._leases[token] = lease
            lease.thread = threading.Thread(target=self._renew, args=(lease,),
                                            name=f"lease-{name[:8]}", daemon=True)
            lease.thread.start()
            return token
        raise RunLockedError(label, None, f" (could not take {path})")

    def _renew(self, lease: _Lease) -> None:
        wait = self.renew_every
        while not lease.stop.wait(max(0.0, wait)):
            if _local_clock() >= lease.deadline:
                lease.lost = (f"could not renew s3://{lease.path} in time "
                              f"(last error: {lease.last_error})")
                return
            started = _local_clock()
            try:
                response = self._put(lease.path, lease.token, lease.generation, "held",
                                     IfMatch=lease.etag)
            except Exception as e:
                if precondition_failed(e) or no_such_key(e):
                    if self._adopt_own_write(lease):
                        wait = 0.0
                        continue
                    if lease.lost is not None:
                        return
                lease.last_error = f"{type(e).__name__}: {e}"
                wait = min(self.renew_every, self.lease_seconds / 10)  # transient: soon again
                continue
            with self._guard:
                lease.etag = response["ETag"]
                lease.deadline = started + self.lease_seconds - self.margin
                lease.renewals += 1
                lease.last_error = None
            wait = started + self.renew_every - _local_clock()

    def _adopt_own_write(self, lease: _Lease) -> bool:
        """After a 412: is the object still ours (an earlier renewal landed but its answer
        was lost)? Then adopt its ETag. If another holder is there, the lease is lost."""
        try:
            head = self._head(lease.path)
        except StorageError as e:
            lease.last_error = str(e)
            return False
        meta = (head or {}).get("Metadata") or {}
        if head is not None and meta.get("token") == lease.token and meta.get("state") == "held":
            lease.etag = head["ETag"]
            return True
        lease.lost = (f"another holder took s3://{lease.path} "
                      f"(generation {meta.get('generation', '?')}, host {meta.get('host', '?')})")
        return False

    def check(self, name: str, token: str) -> None:
        """Raise `LeaseLostError` unless this holder can still be sure of its lease."""
        lease = self._leases.get(token)
        if lease is None or lease.name != name:
            raise LeaseLostError(name, "this process does not hold that lease")
        if lease.lost is not None:
            raise LeaseLostError(lease.label, lease.lost)
        if _local_clock() >= lease.deadline:
            raise LeaseLostError(
                lease.label,
                f"could not renew s3://{lease.path} within {self.lease_seconds - self.margin:.1f} s "
                f"of a {self.lease_seconds:g} s lease (last error: {lease.last_error}); "
                "stopping before another host may take the run over")

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
        # No need to wait for the renewer: a renewal racing this PUT gets 412 (or makes
        # this one get 412, and it is adopted below), never resurrects the lease.
        lease.stop.set()
        if lease.lost is not None and lease.lost.startswith("another holder"):
            return
        for _ in range(3):
            try:
                self._put(lease.path, lease.token, lease.generation, "free", IfMatch=lease.etag)
                return
            except Exception as e:
                if not (precondition_failed(e) or conditional_conflict(e)):
                    return  # unreachable store: the lease expires on its own
                if not self._adopt_own_write(lease):
                    return  # not ours any more: never touch another holder's lock

