"""Fault injection for reliability tests — reusable by users testing their own workflows.

`FaultyFileSystem` wraps any fsspec filesystem and counts storage operations; on the
N-th it "crashes": raises `SimulatedCrash` and refuses every later operation, as a power
cut would, optionally leaving a partially written file behind. `faulty_local_world`
does the same to local_world's storage primitives (SQLite commits, file publication).

`SimulatedCrash` derives from BaseException, so `except Exception` in workflow or step
code cannot swallow it — like a real crash, it ends the run where it stands.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

from fsspec.spec import AbstractFileSystem

from ..world.event_stores import SqliteEventStore
from ..world.publish import Publisher, publisher_for, temp_name_for


class SimulatedCrash(BaseException):
    """The storage 'lost power' at operation `index`."""

    def __init__(self, index: int, operation: str):
        self.index, self.operation = index, operation
        super().__init__(f"simulated crash at storage operation #{index} ({operation})")


_READ_OPERATIONS = ("read ", "ls ", "info ", "exists ", "list ", "sqlite select ", "open(rb) ")


@dataclass
class FaultPlan:
    """Crash at operation number `crash_at` (1-based; None never crashes). With
    `partial=True` a write that crashes leaves half of its bytes in a file first.

    With `error` set (an errno such as `errno.ENOSPC` or `errno.EROFS`) there is no crash:
    from operation `crash_at` on, every *write* fails with `OSError(error)` naming its
    file, as a full disk or a read-only filesystem would. Reads still work; a World
    opened without the plan afterwards sees the disk with space again. With `times` set
    too, only that many writes fail (a transient failure); later ones work again."""

    crash_at: int | None = None
    partial: bool = False
    error: int | None = None
    times: int | None = None
    count: int = 0
    crashed: bool = False
    failed: int = 0
    operations: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def tick(self, operation: str, path: str = "") -> bool:
        """Count one operation; True when this one is where the crash happens."""
        with self.lock:
            if self.crashed:
                raise SimulatedCrash(self.count, f"{operation} after the crash")
            self.count += 1
            self.operations.append(operation)
            if self.crash_at is None or self.count < self.crash_at:
                return False
            if self.error is None:
                self.crashed = True
                return True
            if operation.startswith(_READ_OPERATIONS):
                return False
            if self.times is not None and self.failed >= self.times:
                return False
            self.failed += 1
            name = path or operation.partition(" ")[2]
        raise OSError(self.error, os.strerror(self.error), name)

    def crash(self, operation: str) -> SimulatedCrash:
        return SimulatedCrash(self.count, operation)


class FaultyFileSystem(AbstractFileSystem):
    """An fsspec filesystem that forwards to `fs` and crashes on the planned operation.

    It offers `publish_if_absent` (built on the wrapped filesystem's own publication
    primitive), so a World over it publishes exactly as it would over `fs`."""

    protocol = "faulty"
    cachable = False

    def __init__(self, fs: Any, plan: FaultPlan, **kwargs: Any):
        super().__init__(**kwargs)
        self.fs = fs
        self.plan = plan
        self._publisher: Publisher = publisher_for(fs)
        self.blocking = self._publisher.blocking

    def _strip_protocol(self, path: Any) -> Any:  # type: ignore[override]
        return self.fs._strip_protocol(path)

    def _op(self, name: str, path: str = "", data: bytes | None = None) -> None:
        if self.plan.tick(f"{name} {path}"):
            if self.plan.partial and data:
                # What a torn write leaves: half the bytes under a temporary name, which
                # every reader must ignore.
                try:
                    self.fs.pipe_file(temp_name_for(path), data[: len(data) // 2])
                except OSError:
                    pass  # deliberate: the crash below is the fault; no torn file is left
            raise self.plan.crash(f"{name} {path}")

    # what the World uses
    def publish_if_absent(self, path: str, data: bytes, *, durable: bool = True) -> bool:
        self._op("publish", path, data)
        return self._publisher.publish_if_absent(path, data, durable=durable)

    def replace(self, path: str, data: bytes, *, durable: bool = True) -> None:  # type: ignore[override]
        self._op("replace", path, data)
        self._publisher.replace(path, data, durable=durable)

    # fsspec primitives
    def cat_file(self, path: str, start: Any = None, end: Any = None, **kw: Any) -> bytes:
        self._op("read", path)
        return bytes(self.fs.cat_file(path, start=start, end=end, **kw))

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kw: Any) -> None:
        if self.plan.tick(f"write {path}"):
            if self.plan.partial:
                try:
                    self.fs.pipe_file(path, bytes(value)[: len(value) // 2])
                except OSError:
                    pass  # deliberate: the crash below is the fault; no torn file is left
            raise self.plan.crash(f"write {path}")
        self.fs.pipe_file(path, value, mode=mode, **kw)

    def ls(self, path: str, detail: bool = True, **kw: Any) -> Any:
        self._op("ls", path)
        return self.fs.ls(path, detail=detail, **kw)

    def info(self, path: str, **kw: Any) -> Any:
        self._op("info", path)
        return self.fs.info(path, **kw)

    def exists(self, path: str, **kw: Any) -> bool:
        self._op("exists", path)
        return bool(self.fs.exists(path, **kw))

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        self._op("makedirs", path)
        self.fs.makedirs(path, exist_ok=exist_ok)

    def mkdir(self, path: str, create_parents: bool = True, **kw: Any) -> None:
        self._op("mkdir", path)
        self.fs.mkdir(path, create_parents=create_parents, **kw)

    def rm_file(self, path: str) -> None:
        self._op("rm", path)
        self.fs.rm_file(path)

    def rmdir(self, path: str) -> None:
        self._op("rmdir", path)
        self.fs.rmdir(path)

    def _rm(self, path: str) -> None:
        self.rm_file(path)

    def cp_file(self, path1: str, path2: str, **kw: Any) -> None:
        self._op("cp", path2)
        self.fs.cp_file(path1, path2, **kw)

    def mv(self, path1: Any, path2: Any, *args: Any, **kw: Any) -> None:
        self._op("mv", str(path2))
        self.fs.mv(path1, path2, *args, **kw)

    def _open(self, path: str, mode: str = "rb", **kw: Any) -> Any:
        self._op(f"open({mode})", path)
        return self.fs.open(path, mode, **kw)


class _FaultyPublisher(Publisher):
    def __init__(self, inner: Publisher, plan: FaultPlan):
        self.inner, self.plan, self.fs = inner, plan, inner.fs
        self.blocking = inner.blocking
        self.empty_folders_stay = inner.empty_folders_stay

    def _op(self, name: str, path: str, data: bytes | None = None) -> None:
        if self.plan.tick(f"{name} {path}"):
            if self.plan.partial and data:
                try:
                    with open(temp_name_for(path), "wb") as f:
                        f.write(data[: len(data) // 2])
                except OSError:
                    pass  # deliberate: the crash below is the fault; no torn file is left
            raise self.plan.crash(f"{name} {path}")

    def publish_if_absent(self, path: str, data: bytes, *, durable: bool = True) -> bool:
        self._op("publish", path, data)
        return self.inner.publish_if_absent(path, data, durable=durable)

    def replace(self, path: str, data: bytes, *, durable: bool = True) -> None:
        self._op("replace", path, data)
        self.inner.replace(path, data, durable=durable)

    def read(self, path: str) -> bytes | None:
        self._op("read", path)
        return self.inner.read(path)

    def ensure_dir(self, path: str, *, durable: bool = True) -> None:
        self._op("ensure_dir", path)
        self.inner.ensure_dir(path, durable=durable)

    def list_names(self, path: str) -> list[str]:
        self._op("list", path)
        return self.inner.list_names(path)

    def remove(self, path: str, *, durable: bool = True) -> bool:
        self._op("remove", path)
        return self.inner.remove(path, durable=durable)

    def info(self, path: str) -> dict[str, Any] | None:
        self._op("info", path)
        return self.inner.info(path)

    def remove_dir(self, path: str, *, durable: bool = True) -> bool:
        self._op("rmdir", path)
        return self.inner.remove_dir(path, durable=durable)


class _FaultySqliteEventStore(SqliteEventStore):
    """local_world's event store with every row insert and read counted by the plan. A
    fault inside a commit fails the whole transaction (every append batched into it)."""

    def __init__(self, db_path: str, plan: FaultPlan):
        self._plan = plan
        super().__init__(db_path)

    def insert_row(self, row: tuple) -> bool:
        if self._plan.tick(f"sqlite insert {row[0]}#{row[1]}", self.db_path):
            raise self._plan.crash(f"sqlite insert {row[0]}#{row[1]}")
        return super().insert_row(row)

    def read_after(self, run_id: str, after: int) -> Any:
        if self._plan.tick(f"sqlite select {run_id}>{after}"):
            raise self._plan.crash(f"sqlite select {run_id}")
        return super().read_after(run_id, after)

    def delete_run(self, run_id: str) -> int:
        if self._plan.tick(f"sqlite delete {run_id}", self.db_path):
            raise self._plan.crash(f"sqlite delete {run_id}")
        return int(super().delete_run(run_id))


def faulty_local_world(data_dir: str, plan: FaultPlan, **kwargs: Any) -> Any:
    """local_world whose storage primitives (SQLite commits and reads, file publication)
    go through `plan`. A crash leaves the files as a killed process would."""
    import os
    import uuid

    from fsspec.implementations.local import LocalFileSystem

    from ..world.core import World
    from ..world.local import LAYOUT_DIRS
    from ..world.locks import DirectoryLocks
    from ..world.publish import LocalPublisher
    from ..world.shared_state import StorageState

    root = os.path.abspath(data_dir)
    for sub in LAYOUT_DIRS:
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    store = _FaultySqliteEventStore(os.path.join(root, "events", "events.db"), plan)
    # A separate in-process state: the crashed "process" must not share caches or locks
    # with the World that resumes afterwards.
    state = StorageState(key=("faulty", root, uuid.uuid4().hex))
    state.opened()  # counted for the World below, as storage_state_for would
    state.closers.append(store.close)
    fs = LocalFileSystem()
    return World(
        kind="local(faulty)",
        files=fs,
        data_dir=root,
        events=store,
        publisher=_FaultyPublisher(LocalPublisher(fs), plan),
        state=state,
        cross_process_locks=DirectoryLocks(os.path.join(root, "locks")),
        max_concurrent_steps=kwargs.get("max_concurrent_steps"),
        host_sources_allowed=True,
    )
