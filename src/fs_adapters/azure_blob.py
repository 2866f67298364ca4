"""Azure Blob Storage (through adlfs), experimental.

Like S3, Blob Storage has no rename; every immutable file is published with one
conditional Put Blob (`If-None-Match: *`, what adlfs sends for `pipe_file(...,
mode="create")`): the first writer wins, a loser gets 409 `BlobAlreadyExists` (or 412
`ConditionNotMet`) and re-reads. Any other failure — authentication, a missing
container, an unreachable endpoint — is a `StorageError` naming the blob.

Run locks are fenced leases (`fs_adapters/leases.py`, the protocol S3 uses too):
`AzureLockBlobs` supplies Put Blob with `If-None-Match: *` or `If-Match` on an ETag, and
Get Blob Properties, whose `Date` header and `Last-Modified` give a lock's age by the
store's clock. So workers on any number of hosts may share one container.

Registered for the `abfs`/`az` protocols through the `little_workflow.publishers` entry
point (and on import), so the World never imports this module.
"""

from __future__ import annotations

import time
from email.utils import parsedate_to_datetime
from typing import Any, Awaitable, Callable

from little_workflow.errors import (
    StorageError,
    StorageNotFoundError,
    StoragePermissionError,
    StorageUnreachableError,
)
from little_workflow.world.publish import Publisher, is_temp_name, register_publisher

from . import leases
from .leases import LeasedLocks, LockChanged, LockRecord, LockVersion, TryAgain

PROTOCOLS = ("abfs", "az", "abfss")
EXISTS_CODES = {"BlobAlreadyExists", "ConditionNotMet"}
RETRYABLE_CODES = {"ServerBusy", "OperationTimedOut", "InternalError"}
RETRIES = 5
#: Default lease of a run lock (30 s, or `LW_LEASE_SECONDS`). Read when a World is
#: built, so tests may lower it.
LEASE_SECONDS = leases.LEASE_SECONDS


def azure_error(e: BaseException) -> tuple[str, int] | None:
    """(error code, HTTP status) of the Azure response behind `e` (adlfs raises its own
    FileExistsError/FileNotFoundError with the SDK's error as context), or None."""
    seen: set[int] = set()
    current: BaseException | None = e
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        status = getattr(current, "status_code", None)
        if status is not None:
            code = getattr(current, "error_code", None)
            code = getattr(code, "value", code)  # the SDK's StorageErrorCode enum, or a str
            if code is None:
                response = getattr(current, "response", None)
                headers = getattr(response, "headers", None) or {}
                code = headers.get("x-ms-error-code", "")
            return str(code or ""), int(status)
        current = current.__cause__ or current.__context__
    return None


def already_exists(e: BaseException) -> bool:
    found = azure_error(e)
    return found is not None and (found[0] in EXISTS_CODES or found[1] == 412)


def storage_error(e: BaseException, path: str, doing: str) -> StorageError:
    """A typed error naming the container and blob: no response is
    `StorageUnreachableError`, refused credentials `StoragePermissionError`, a missing
    container `StorageNotFoundError`; any other answer a plain `StorageError`."""
    where = f"az://{path}"
    container = path.partition("/")[0]
    found = azure_error(e)
    first_line = str(e).splitlines()[0] if str(e) else type(e).__name__
    if found is None:
        cls = StorageUnreachableError if isinstance(e, NO_ANSWER_ERRORS) else StorageError
        return cls(where, f"{doing} failed: {type(e).__name__}: {first_line}",
                   "check the account URL and the network")
    code, status = found
    if status in (401, 403) or "Authentication" in code or "Authorization" in code:
        return StoragePermissionError(
            where, f"access denied while {doing} ({code or 'no code'}, HTTP {status}): "
            f"{first_line}", f"check the credentials for container {container!r}")
    if code == "ContainerNotFound":
        return StorageNotFoundError(where, f"container {container!r} does not exist (while {doing})",
                                    "create it or fix the world URL")
    return StorageError(where, f"{doing} failed: {code} (HTTP {status}): {first_line}")


def _store_error_types() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...]]:
    """(what a failed request raises, the part of it that means no answer came back): the
    SDK's errors, adlfs's OSErrors, aiohttp's. Anything else is a bug and stays as it is."""
    failed: list[type[BaseException]] = [OSError, TimeoutError]
    unanswered: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:
        from azure.core.exceptions import AzureError, ServiceRequestError, ServiceResponseError

        failed.append(AzureError)
        unanswered += [ServiceRequestError, ServiceResponseError]
    except ImportError:  # pragma: no cover - adlfs depends on azure-core
        pass
    try:
        from aiohttp import ClientError as HttpClientError

        failed.append(HttpClientError)
        unanswered.append(HttpClientError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(failed), tuple(unanswered)


STORE_ERRORS, NO_ANSWER_ERRORS = _store_error_types()


def _transient(e: BaseException) -> bool:
    found = azure_error(e)
    return found is not None and (found[0] in RETRYABLE_CODES or found[1] in (500, 503))


class AzureBlobPublisher(Publisher):
    blocking = True
    prefers_listing = True
    empty_folders_stay = False  # no folders: a prefix is gone with its last blob
    atomic_publication = "yes: one conditional Put Blob (If-None-Match: *)"
    multi_writer = "yes: processes and hosts (the store arbitrates; leased run locks)"

    def __init__(self, fs: Any):
        self.fs = fs

    def _retrying(self, path: str, doing: str, call: Any) -> Any:
        for attempt in range(RETRIES):
            try:
                return call()
            except (FileExistsError, FileNotFoundError):
                raise
            except STORE_ERRORS as e:
                if _transient(e) and attempt + 1 < RETRIES:
                    time.sleep(0.05 * 2**attempt)
                    continue
                raise storage_error(e, path, doing) from e

    def publish_if_absent(self, path: str, data: bytes, *, durable: bool = True) -> bool:
        try:
            self._retrying(path, "publishing", lambda: self.fs.pipe_file(path, data, mode="create"))
        except FileExistsError as e:
            if already_exists(e):
                return False
            raise storage_error(e, path, "publishing") from e
        except FileNotFoundError as e:
            raise storage_error(e, path, "publishing") from e
        return True

    def replace(self, path: str, data: bytes, *, durable: bool = True) -> None:
        try:
            # One Put Blob: readers see the old or the new blob, never a mix.
            self._retrying(path, "writing", lambda: self.fs.pipe_file(path, data))
        except FileNotFoundError as e:
            raise storage_error(e, path, "writing") from e

    def read(self, path: str) -> bytes | None:
        try:
            return bytes(self._retrying(path, "reading", lambda: self.fs.cat_file(path)))
        except FileNotFoundError as e:
            found = azure_error(e)
            if found is not None and found[0] == "ContainerNotFound":
                raise storage_error(e, path, "reading") from e
            return None

    def ensure_dir(self, path: str, *, durable: bool = True) -> None:
        return None  # blob names need no directories

    def remove_dir(self, path: str, *, durable: bool = True) -> bool:
        # No folders to remove: a prefix is gone with its last blob. (adlfs's rmdir
        # returns without a word for any path below the container, full or not.)
        return False

    # Versioned documents: the ETag is the version; a write names it (`If-Match`) or
    # asks that nothing be there (`If-None-Match: *`), through the SDK client under adlfs
    # (its `pipe_file` has no `If-Match`), and the store arbitrates.
    versioned_across_processes = True

    def _blob_call(self, path: str, doing: str, request: Any) -> Any:
        from fsspec.asyn import sync

        container, blob, _ = self.fs.split_path(path)

        async def send() -> Any:
            async with self.fs.service_client.get_blob_client(container, blob) as client:
                return await request(client)

        return self._retrying(path, doing, lambda: sync(self.fs.loop, send))

    def read_versioned(self, path: str) -> tuple[bytes, str] | None:
        """One Get Blob: the bytes and their ETag, from the same response."""
        async def download(client: Any) -> tuple[bytes, str]:
            stream = await client.download_blob()
            return bytes(await stream.readall()), str(stream.properties.etag)

        try:
            return self._blob_call(path, "reading", download)  # type: ignore[no-any-return]
        except StorageError as e:
            cause = e.__cause__
            found = azure_error(cause) if cause is not None else None
            if found is not None and found[0] == "BlobNotFound":
                return None
            raise

    def replace_if(self, path: str, data: bytes, version: str | None, *,
                   durable: bool = True) -> bool:
        """One conditional Put Blob: False on 412/409 (another writer's version is there,
        or the version named is gone)."""
        from azure.core import MatchConditions

        condition: dict[str, Any] = (
            {"overwrite": False} if version is None else
            {"overwrite": True, "etag": version, "match_condition": MatchConditions.IfNotModified})

        async def upload(client: Any) -> Any:
            return await client.upload_blob(bytes(data), **condition)

        try:
            self._blob_call(path, "writing", upload)
        except StorageError as e:
            cause = e.__cause__
            found = azure_error(cause) if cause is not None else None
            if found is not None and (found[1] == 412 or found[0] in EXISTS_CODES
                                      or (version is not None and found[0] == "BlobNotFound")):
                return False
            raise
        return True

    def list_names(self, path: str) -> list[str]:
        """The names one level under `path` (blobs and folders): one List Blobs request
        per 5,000 names. adlfs's `ls` sends two (the prefix without its slash, to find a
        blob of that name, then with it) and three for an empty prefix: one more on
        every idle sweep, as the active index is empty then."""
        from fsspec.asyn import sync

        container, blob, _ = self.fs.split_path(path)
        prefix = blob.strip("/") + "/" if blob.strip("/") else ""

        async def walk() -> list[str]:
            client = self.fs.service_client.get_container_client(container)
            async with client:
                return [item.name async for item in
                        client.walk_blobs(name_starts_with=prefix or None, delimiter="/")]

        found = self._retrying(path, "listing", lambda: sync(self.fs.loop, walk))
        names = {name[len(prefix):].rstrip("/") for name in found}
        return sorted(n for n in names if n and not is_temp_name(n))

    def cross_process_locks(self, root: str) -> AzureBlobLocks:
        return AzureBlobLocks(self.fs, f"{root}/locks", lease_seconds=LEASE_SECONDS)


# ---- fenced leases: Azure Blob's primitives (the protocol is fs_adapters/leases.py) ---

class AzureLockBlobs:
    """`LeaseStore` on Azure Blob, through the SDK client under adlfs (adlfs's
    `pipe_file` has no `If-Match`). Each request is sent once, with timeouts of a third
    of the lease: the SDK's own retries back off for tens of seconds, longer than a
    lease, and the renewer already tries again by itself."""

    def __init__(self, fs: Any, lease_seconds: float):
        self.fs = fs
        limit = max(1.0, lease_seconds / 3)
        self.request_options = {"retry_total": 0, "connection_timeout": limit,
                                "read_timeout": limit}

    def url(self, path: str) -> str:
        return f"az://{path}"

    def _call(self, path: str, doing: str, request: Callable[[Any], Awaitable[Any]]) -> Any:
        from fsspec.asyn import sync

        container, blob, _ = self.fs.split_path(path)

        async def send() -> Any:
            async with self.fs.service_client.get_blob_client(container, blob) as client:
                return await request(client)

        try:
            return sync(self.fs.loop, send)
        except STORE_ERRORS as e:
            found = azure_error(e)
            if found is not None and (found[1] == 412 or found[0] in EXISTS_CODES):
                raise LockChanged(path) from e
            if found is not None and found[0] == "BlobNotFound":
                raise FileNotFoundError(path) from e
            if _transient(e):
                raise TryAgain(path) from e
            raise storage_error(e, path, f"{doing} the run lock") from e

    def _put(self, path: str, record: LockRecord, condition: dict[str, Any]) -> str:
        async def put(client: Any) -> Any:
            return await client.upload_blob(
                record.body(), metadata=record.fields(), **condition, **self.request_options)

        return str(self._call(path, "writing", put)["etag"])

    def create(self, path: str, record: LockRecord) -> str:
        return self._put(path, record, {"overwrite": False})  # If-None-Match: *

    def replace(self, path: str, record: LockRecord, etag: str) -> str:
        from azure.core import MatchConditions

        try:
            return self._put(path, record, {"overwrite": True, "etag": etag,
                                            "match_condition": MatchConditions.IfNotModified})
        except FileNotFoundError as e:
            raise LockChanged(path) from e  # the version named is gone

    def look(self, path: str) -> LockVersion | None:
        headers: dict[str, str] = {}

        async def properties(client: Any) -> Any:
            def keep_headers(response: Any) -> None:
                headers.update(response.http_response.headers)

            return await client.get_blob_properties(raw_response_hook=keep_headers,
                                                    **self.request_options)

        try:
            found = self._call(path, "reading", properties)
        except FileNotFoundError:
            return None
        date = headers.get("Date") or headers.get("date")
        age = None
        if date and found.last_modified is not None:
            age = (parsedate_to_datetime(date) - found.last_modified).total_seconds()
        return LockVersion(etag=str(found.etag), record=LockRecord.from_fields(found.metadata or {}),
                           age=age)


class AzureBlobLocks(LeasedLocks):
    """Run locks on Azure Blob: fenced leases at `<root>/locks/<name>/owner.json` (the
    protocol, renewal and fencing: `fs_adapters.leases`)."""

    def __init__(self, fs: Any, locks_dir: str, lease_seconds: float = LEASE_SECONDS):
        super().__init__(AzureLockBlobs(fs, lease_seconds), locks_dir, lease_seconds)
        self.fs = fs


register_publisher(PROTOCOLS, AzureBlobPublisher)
