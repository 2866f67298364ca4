"""Object stores (S3 through s3fs), experimental.

S3 has no rename, so temp + move cannot publish atomically. Every immutable file is
instead published with one conditional PUT (`If-None-Match: *`): the first writer wins,
a loser gets 412 and re-reads. Listings bypass s3fs's per-instance cache, so another
writer's (another host's) events are seen. Run locks are `owner.json` objects created
conditionally, renewed by their holder and released only by it (`If-Match` on the ETag).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import threading
import time
import uuid
from typing import Any

from little_workflow.errors import RunLockedError
from little_workflow.world.ids import utc_now_iso
from little_workflow.world.publish import Publisher, is_temp_name

LEASE_SECONDS = 30.0


def _precondition_failed(e: BaseException) -> bool:
    if isinstance(e, FileExistsError):
        return True
    if isinstance(e, OSError) and e.errno == errno.EINVAL:
        return True
    text = f"{e} {getattr(e, '__cause__', '')}"
    return "PreconditionFailed" in text or "412" in text


class ObjectStorePublisher(Publisher):
    blocking = True
    prefers_listing = True
    atomic_publication = "yes: one conditional PUT (If-None-Match: *)"
    multi_writer = "yes: processes and hosts (the store arbitrates)"

    def __init__(self, fs: Any):
        self.fs = fs

    def publish_if_absent(self, path: str, data: bytes, *, durable: bool = True) -> bool:
        try:
            self.fs.pipe_file(path, data, mode="create")
        except Exception as e:
            if _precondition_failed(e):
                return False
            raise
        return True

    def replace(self, path: str, data: bytes, *, durable: bool = True) -> None:
        self.fs.pipe_file(path, data)  # one PUT: readers see the old or the new object

    def read(self, path: str) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(path))
        except (FileNotFoundError, IsADirectoryError):
            return None

    def ensure_dir(self, path: str) -> None:
        return None  # object stores have no directories

    def list_names(self, path: str) -> list[str]:
        try:
            entries = self.fs.ls(path, detail=False, refresh=True)
        except FileNotFoundError:
            return []
        names = {str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries}
        return sorted(n for n in names if n and not is_temp_name(n))

    def cross_process_locks(self, root: str) -> "ObjectStoreLocks":
        return ObjectStoreLocks(self.fs, f"{root}/locks")


class ObjectStoreLocks:
    """Leased locks: `<root>/locks/<name>/owner.json` created with If-None-Match: *."""

    def __init__(self, fs: Any, locks_dir: str, lease_seconds: float = LEASE_SECONDS):
        self.fs = fs
        self.locks_dir = locks_dir
        self.lease_seconds = lease_seconds
        self._renewers: dict[str, threading.Event] = {}

    def _path(self, name: str) -> str:
        return f"{self.locks_dir}/{name}/owner.json"

    def _split(self, path: str) -> tuple[str, str]:
        bucket, _, key = path.partition("/")
        return bucket, key

    def _doc(self, token: str) -> bytes:
        return json.dumps({
            "pid": os.getpid(), "host": socket.gethostname(), "token": token,
            "createdAt": utc_now_iso(), "leaseExpiresAt": time.time() + self.lease_seconds,
        }).encode()

    def _read(self, path: str) -> tuple[dict[str, Any], str] | None:
        self.fs.invalidate_cache(path)
        try:
            # s3fs reads with If-Match on the ETag it saw, so body and ETag agree.
            with self.fs.open(path, "rb", cache_type="none") as f:
                etag = f.details["ETag"]
                body = f.read()
        except FileNotFoundError:
            return None
        try:
            return json.loads(body), etag
        except ValueError:
            return {}, etag

    def acquire(self, name: str, label: str) -> str:
        path = self._path(name)
        token = uuid.uuid4().hex
        for _ in range(20):
            try:
                self.fs.pipe_file(path, self._doc(token), mode="create")
            except Exception as e:
                if not _precondition_failed(e):
                    raise
                current = self._read(path)
                if current is None:
                    continue
                doc, etag = current
                if float(doc.get("leaseExpiresAt", 0)) > time.time():
                    raise RunLockedError(label, doc.get("pid"), f" on host {doc.get('host')}") from None
                # Expired lease: delete exactly that object (If-Match), then race to create.
                bucket, key = self._split(path)
                try:
                    self.fs.call_s3("delete_object", Bucket=bucket, Key=key, IfMatch=etag)
                except Exception:
                    pass
                continue
            self._start_renewal(name, path, token)
            return token
        raise RunLockedError(label, None, f" (could not take {path})")

    def _start_renewal(self, name: str, path: str, token: str) -> None:
        stop = threading.Event()
        self._renewers[token] = stop

        def renew() -> None:
            while not stop.wait(self.lease_seconds / 3):
                current = self._read(path)
                if current is None or current[0].get("token") != token:
                    return
                bucket, key = self._split(path)
                try:
                    self.fs.call_s3("put_object", Bucket=bucket, Key=key,
                                    Body=self._doc(token), IfMatch=current[1])
                except Exception:
                    return

        threading.Thread(target=renew, name=f"lease-{name[:8]}", daemon=True).start()

    def release(self, name: str, token: str) -> None:
        stop = self._renewers.pop(token, None)
        if stop is not None:
            stop.set()
        path = self._path(name)
        current = self._read(path)
        if current is None or current[0].get("token") != token:
            return  # not ours any more: never delete another holder's lock
        bucket, key = self._split(path)
        try:
            self.fs.call_s3("delete_object", Bucket=bucket, Key=key, IfMatch=current[1])
        except Exception as e:
            if not _precondition_failed(e):
                raise
