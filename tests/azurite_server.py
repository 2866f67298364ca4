"""A real Azurite (Azure Blob emulator, npm package `azurite`) on 127.0.0.1 (random port),
started and stopped by the tests. In memory: nothing is left on disk."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from typing import Any, Iterator

from external_tools import require_tool

# Azurite's well-known development account (public, documented by Microsoft).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Azurite:
    def __init__(self, running: dict[str, Any] | None = None) -> None:
        """Starts an emulator; given `running` (what `shared` wrote: port, pid, workdir),
        speaks to the one another process started instead."""
        if running is not None:
            self.process: subprocess.Popen[bytes] | None = None
            self.pid, self.port, self.workdir = running["pid"], running["port"], running["workdir"]
            self._connect()
            return
        executable = require_tool("azurite-blob")
        self.port = _free_port()
        self.workdir = tempfile.mkdtemp(prefix="azurite-")  # its debug log, if any
        # stderr goes to a file, not a pipe: a pipe nobody reads fills up after 64 KiB of
        # warnings and then blocks the emulator in the middle of a request.
        self.stderr_path = os.path.join(self.workdir, "stderr.log")
        with open(self.stderr_path, "wb") as stderr:
            self.process = subprocess.Popen(
                [executable, "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
                 "--skipApiVersionCheck", "--loose", "--inMemoryPersistence", "--silent"],
                cwd=self.workdir, stdout=subprocess.DEVNULL, stderr=stderr)
        self.pid = self.process.pid
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                with open(self.stderr_path, errors="replace") as log:
                    raise RuntimeError(f"azurite-blob exited: {log.read()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("azurite-blob did not start within 60 s") from None
                time.sleep(0.1)
        self._connect()

    def _connect(self) -> None:
        self.connection_string = (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{self.port}/{ACCOUNT};")
        self.storage_options = {"connection_string": self.connection_string}

    def filesystem(self, **options: Any) -> Any:
        """A new adlfs object, as a separate host would have (own caches, own session)."""
        from adlfs import AzureBlobFileSystem

        return AzureBlobFileSystem(skip_instance_cache=True, **{**self.storage_options, **options})

    def new_container(self) -> str:
        name = "lw-" + uuid.uuid4().hex[:20]
        self.filesystem().mkdir(name)
        return name

    def stop(self) -> None:
        # SIGKILL, not SIGTERM: it keeps everything in memory (nothing to flush), and on
        # SIGTERM it lingered until a 10 s timeout at the end of every test process.
        if self.process is None:  # started by another process: its pid is all there is
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        elif self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _reachable(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


@contextlib.contextmanager
def shared(state_dir: str) -> Iterator[Azurite]:
    """One emulator for every process that shares `state_dir` (the pytest-xdist workers of
    one run: each of its own would cost ~1.7 CPU-seconds to start and ~1 a minute idle).
    The first to ask starts it and writes its port; each user adds its pid under a file
    lock, and the last one out stops it (users that died are dropped on the way). Tests
    stay independent: each makes containers of its own."""
    state_path = os.path.join(state_dir, "azurite.json")
    with _locked(os.path.join(state_dir, "azurite.lock")):
        state = _read(state_path)
        if state is None or not _reachable(state["port"]):
            server = Azurite()
            state = {"port": server.port, "pid": server.pid, "workdir": server.workdir, "users": []}
        else:
            server = Azurite(running=state)
        state["users"] = [pid for pid in state["users"] if _alive(pid)] + [os.getpid()]
        _write(state_path, state)
    try:
        yield server
    finally:
        with _locked(os.path.join(state_dir, "azurite.lock")):
            state = _read(state_path) or {"users": []}
            state["users"] = [pid for pid in state["users"] if pid != os.getpid() and _alive(pid)]
            if state["users"]:
                _write(state_path, state)
            else:
                server.stop()
                with contextlib.suppress(FileNotFoundError):
                    os.remove(state_path)


@contextlib.contextmanager
def _locked(path: str) -> Iterator[None]:
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _read(path: str) -> dict[str, Any] | None:
    try:
        with open(path) as f:
            return dict(json.load(f))
    except FileNotFoundError:
        return None


def _write(path: str, state: dict[str, Any]) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(state, f)
    os.replace(path + ".tmp", path)


def quick_client(fs: Any, connection_string: str) -> Any:
    """Give adlfs object `fs` a client that fails fast once its network is cut (the SDK's
    default retries a refused connection for minutes)."""
    from azure.storage.blob.aio import BlobServiceClient

    fs.service_client = BlobServiceClient.from_connection_string(
        connection_string, retry_total=0, connection_timeout=1, read_timeout=5)
    return fs


class NetworkPath:
    """A host's own network path to Azurite: a TCP relay on another port. `cut()` closes
    it and every connection through it, while other hosts still reach the store."""

    def __init__(self, store: Azurite) -> None:
        self.store = store
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.connection_string = store.connection_string.replace(
            f"127.0.0.1:{store.port}/", f"127.0.0.1:{self.port}/")
        self.up = True
        self._sockets: list[socket.socket] = []
        self._guard = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def filesystem(self) -> Any:
        from adlfs import AzureBlobFileSystem

        fs = AzureBlobFileSystem(skip_instance_cache=True,
                                 connection_string=self.connection_string)
        return quick_client(fs, self.connection_string)

    def _accept(self) -> None:
        while self.up:
            try:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.store.port))
            except OSError:
                continue
            with self._guard:
                if not self.up:
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        with self._guard:
            if not self.up:
                return
            self.up = False
            try:  # wakes the accepting thread (a bare close may leave it accepting)
                self.listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.listener.close()
            for sock in self._sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()


class RequestCounter:
    """Counts the HTTP requests an adlfs filesystem sends, by method: gives `fs` a client
    whose every request passes a hook (the SDK's `raw_request_hook`)."""

    def __init__(self, fs: Any, connection_string: str) -> None:
        from azure.storage.blob.aio import BlobServiceClient

        self.by_method: dict[str, int] = {}
        fs.service_client = BlobServiceClient.from_connection_string(
            connection_string, raw_request_hook=self._sent)

    def _sent(self, request: Any) -> None:
        method = request.http_request.method
        self.by_method[method] = self.by_method.get(method, 0) + 1

    @property
    def total(self) -> int:
        return sum(self.by_method.values())

    def reset(self) -> None:
        self.by_method.clear()
