"""Object stores (S3 through s3fs), experimental.

S3 has no rename, so temp + move cannot publish atomically. Every immutable file is
instead published with one conditional PUT (`If-None-Match: *`): the first writer wins,
a loser gets 412 and re-reads. Listings bypass s3fs's per-instance cache, so another
writer's (another host's) events are seen.

Run locks are fenced leases (`fs_adapters/leases.py`; `S3LockObjects` supplies S3's
conditional PUTs and HEAD). Errors are mapped precisely: only
a 412 `PreconditionFailed` means "already there" (a 409 `ConditionalRequestConflict`,
a concurrent conditional write, is retried); anything else — access denied, a missing
bucket, a bad request, an unreachable endpoint — is a `StorageError` naming the object.
"""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime
from typing import Any

from little_workflow.errors import (
    StorageError,
    StorageNotFoundError,
    StoragePermissionError,
    StorageUnreachableError,
)
from little_workflow.world.publish import Publisher, is_temp_name

from . import leases
from .leases import LeasedLocks, LockChanged, LockRecord, LockVersion, TryAgain

#: Default lease of a run lock (30 s, or `LW_LEASE_SECONDS`). Read when a World is
#: built, so tests may lower it.
LEASE_SECONDS = leases.LEASE_SECONDS
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
        """One GET (s3fs's `cat_file` sends a HEAD for the size first, and for a missing
        key a LIST too, to look for a folder of that name)."""
        found = self.read_versioned(path)
        return None if found is None else found[0]

    def ensure_dir(self, path: str, *, durable: bool = True) -> None:
        return None  # object stores have no directories

    def list_names(self, path: str) -> list[str]:
        """The names one level under `path` (keys and folders): one `ListObjectsV2`
        request per 1,000 names. s3fs's `ls` lists the parent too when a prefix is
        empty (to tell a missing folder from a file): a second request on every idle
        sweep, as the active index is empty then."""
        bucket, _, key = self.fs._strip_protocol(path).strip("/").partition("/")
        prefix = key.rstrip("/") + "/" if key else ""
        args: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
        names: set[str] = set()
        while True:
            try:
                answer = self.fs.call_s3("list_objects_v2", **args)
            except STORE_ERRORS as e:
                raise storage_error(e, path, "listing") from e
            names.update(item["Key"][len(prefix):] for item in answer.get("Contents", []))
            names.update(p["Prefix"][len(prefix):].rstrip("/")
                         for p in answer.get("CommonPrefixes", []))
            if not answer.get("IsTruncated"):
                break
            args["ContinuationToken"] = answer["NextContinuationToken"]
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


# ---- fenced leases: S3's primitives (the protocol is fs_adapters/leases.py) -----------

#: S3 user metadata names of a lock's fields (a HEAD returns them).
_METADATA_NAMES = {"lease_seconds": "lease-seconds"}


class S3LockObjects:
    """`LeaseStore` on S3: conditional PUTs (`If-None-Match: *`, `If-Match`) and HEAD,
    whose `Date` header and `LastModified` give a lock's age by the store's clock."""

    def __init__(self, fs: Any):
        self.fs = fs

    def url(self, path: str) -> str:
        return f"s3://{path}"

    def _put(self, path: str, record: LockRecord, **condition: str) -> str:
        bucket, _, key = path.partition("/")
        try:
            response = self.fs.call_s3(
                "put_object", Bucket=bucket, Key=key, Body=record.body(),
                ContentType="application/json",
                Metadata={_METADATA_NAMES.get(k, k): v for k, v in record.fields().items()},
                **condition)
        except STORE_ERRORS as e:
            if precondition_failed(e) or ("IfMatch" in condition and no_such_key(e)):
                raise LockChanged(path) from e
            if conditional_conflict(e):
                raise TryAgain(path) from e
            raise storage_error(e, path, "writing the run lock") from e
        return str(response["ETag"])

    def create(self, path: str, record: LockRecord) -> str:
        return self._put(path, record, IfNoneMatch="*")

    def replace(self, path: str, record: LockRecord, etag: str) -> str:
        return self._put(path, record, IfMatch=etag)

    def look(self, path: str) -> LockVersion | None:
        bucket, _, key = path.partition("/")
        try:
            head = self.fs.call_s3("head_object", Bucket=bucket, Key=key)
        except FileNotFoundError as e:
            if no_such_key(e) or s3_error_code(e) is None:
                return None
            raise storage_error(e, path, "reading the run lock") from e
        except STORE_ERRORS as e:
            raise storage_error(e, path, "reading the run lock") from e
        meta = head.get("Metadata") or {}
        record = LockRecord.from_fields(
            {k: meta[_METADATA_NAMES.get(k, k)] for k in LockRecord.FIELD_NAMES
             if _METADATA_NAMES.get(k, k) in meta})
        date = (head.get("ResponseMetadata", {}).get("HTTPHeaders") or {}).get("date")
        modified = head.get("LastModified")
        age = None
        if date and modified is not None:
            age = (parsedate_to_datetime(date) - modified).total_seconds()
        return LockVersion(etag=str(head["ETag"]), record=record, age=age)


class ObjectStoreLocks(LeasedLocks):
    """Run locks on S3: fenced leases at `<root>/locks/<name>/owner.json` (the protocol,
    renewal and fencing: `fs_adapters.leases`)."""

    def __init__(self, fs: Any, locks_dir: str, lease_seconds: float = LEASE_SECONDS):
        super().__init__(S3LockObjects(fs), locks_dir, lease_seconds)
        self.fs = fs
