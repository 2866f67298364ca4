"""A real moto S3 server on 127.0.0.1 (random port), started and stopped by the tests."""

from __future__ import annotations

import functools
import socket
import threading
import uuid
from typing import Any

_atomic_writes = threading.Lock()


def _make_conditional_writes_atomic() -> None:
    """moto 5.2 checks `If-Match` / `If-None-Match` and then writes in two separate
    steps while its threaded server handles requests at once, so two racing conditional
    PUTs can both succeed — real S3 never lets that happen, and it showed up as a lost
    compare-and-swap update in our tests (tests/test_s3_emulator.py proves the fix).
    One lock around each object write and delete makes the check-and-write one step."""
    from moto.s3.responses import S3Response

    for name in ("put_object", "delete_object"):
        original = getattr(S3Response, name)
        if getattr(original, "_lw_atomic", False):
            continue

        @functools.wraps(original)
        def atomic(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            with _atomic_writes:
                return _original(self, *args, **kwargs)

        atomic._lw_atomic = True  # type: ignore[attr-defined]
        setattr(S3Response, name, atomic)


def list_moto_modules_once() -> None:
    """moto's server picks the service of every request under one lock by listing moto's
    package folder (`os.listdir` and an `isdir` per entry: ~180 system calls a request,
    one request at a time). The folder does not change while tests run: list it once.
    Client and server CPU per request 7.7 -> 6.1 ms (HEAD, PUT, GET alternating)."""
    import moto.backends

    if getattr(moto.backends.list_of_moto_modules, "_lw_once", False):
        return
    modules = tuple(moto.backends.list_of_moto_modules())

    def list_of_moto_modules() -> tuple[str, ...]:
        return modules

    list_of_moto_modules._lw_once = True  # type: ignore[attr-defined]
    moto.backends.list_of_moto_modules = list_of_moto_modules


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoS3:
    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        _make_conditional_writes_atomic()
        list_moto_modules_once()
        self.port = _free_port()
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.storage_options = {
            "key": "testing", "secret": "testing",
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"},
        }

    def filesystem(self) -> Any:
        """A new s3fs object, as a separate host would have (own caches, own session)."""
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options)

    def new_bucket(self) -> str:
        name = "lw-" + uuid.uuid4().hex[:20]
        self.filesystem().call_s3("create_bucket", Bucket=name)
        return name

    def stop(self) -> None:
        self.server.stop()


class NetworkPath:
    """Another endpoint to the same moto store (moto keeps its state per process): a
    host whose network to the store can be cut with `cut()`, while others still reach it."""

    def __init__(self, store: MotoS3) -> None:
        from moto.server import ThreadedMotoServer

        self.port = _free_port()
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()
        self.storage_options = {
            **store.storage_options,
            "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{self.port}",
                              "region_name": "us-east-1"},
            # Once cut, give up quickly instead of retrying for seconds.
            "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 1},
        }
        self.up = True

    def filesystem(self) -> Any:
        import s3fs

        fs = s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options)
        fs.retries = 1
        return fs

    def cut(self) -> None:
        if self.up:
            self.up = False
            self.server.stop()


class RequestCounter:
    """Counts the HTTP requests an s3fs filesystem sends (botocore's `before-send` event
    on its aiobotocore client), by method."""

    def __init__(self, fs: Any) -> None:
        fs.connect()
        self.by_method: dict[str, int] = {}
        fs.s3.meta.events.register("before-send", self._sent)

    def _sent(self, request: Any = None, **_: Any) -> None:
        method = getattr(request, "method", "?")
        self.by_method[method] = self.by_method.get(method, 0) + 1

    @property
    def total(self) -> int:
        return sum(self.by_method.values())

    def reset(self) -> None:
        self.by_method.clear()


def put_objects_directly(bucket: str, objects: dict[str, bytes]) -> None:
    """Write objects straight into the in-process moto backend (no HTTP): a cheap way to
    fill a bucket with many objects. Only for a MotoS3 server started in this process."""
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.s3.models import s3_backends

    backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
    for key, data in objects.items():
        backend.put_object(bucket, key, data)
