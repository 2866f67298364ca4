"""The World: the one door to storage. A facade over the rooms that do the work — the
append protocol and the runs' logs (append.py), payloads (payloads.py), artifacts,
files and documents (files.py), locks — for the runtime, ops and tools to call."""

from __future__ import annotations

import contextlib
import re
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Iterator

from ..errors import LittleWorkflowError, WorldBusyError, WorldPathError
from . import run_deletion
from .append import AFTER_END_ALLOWED, PendingEvent, RunLogs
from .artifacts import ArtifactStore
from .clock import SYSTEM_CLOCK, Clock
from .event_stores import EventStore
from .files import WorldFiles
from .ids import outer_loop_lock_name, run_lock_name, validate_run_id
from .locks import CrossProcessLocks, held
from .models import ArtifactManifest, Event
from .payloads import (
    INLINE_LIMIT,
    REF_KEY,
    REF_SIZE,
    EventPayloadError,
    frozen_json,
    json_size,
    read_back,
    spilled_ref,
)
from .publish import Publisher
from .queue_slots import Slot, take_slot
from .shared_state import StorageState, release_dropped, release_when_safe
from .slots import StepSlots

if TYPE_CHECKING:
    from .protocol import WorldLike
    from .views import ChangeJournal

# What this module held before its rooms were split off, for code that imports it here.
__all__ = [
    "AFTER_END_ALLOWED",
    "CLOSE_WAIT_SECONDS",
    "INLINE_LIMIT",
    "REF_KEY",
    "REF_SIZE",
    "EventPayloadError",
    "PendingEvent",
    "World",
    "frozen_json",
    "json_size",
    "read_back",
    "spilled_ref",
]

#: How long `World.close()` waits, by default, for runs in flight to give their locks back.
CLOSE_WAIT_SECONDS = 10.0
SLOT_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,100}")


class World(WorldFiles):
    """The storage surface the runtime uses. Build one with `local_world()` or
    `virtual_world()`; callers never depend on the on-disk layout."""

    def __init__(
        self,
        *,
        kind: str,
        files: Any,
        data_dir: str,
        events: EventStore,
        publisher: Publisher,
        state: StorageState,
        cross_process_locks: CrossProcessLocks | None,
        max_concurrent_steps: int | None,
        host_sources_allowed: bool,
        clock: Clock | None = None,
        read_only: bool = False,
        slot_locks: CrossProcessLocks | None = None,
    ):
        if max_concurrent_steps is not None and max_concurrent_steps < 1:
            raise ValueError("max_concurrent_steps must be a positive integer or None")
        super().__init__(publisher, data_dir)
        self.kind = kind
        self.files = files
        self.events = events
        self.state = state
        self.clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self.artifacts = ArtifactStore(publisher, data_dir, state, clock=self.clock)
        #: Every run's log: the append protocol and the ledgers that cache it (append.py).
        self.logs = RunLogs(events=events, state=state, artifacts=self.artifacts,
                            files=WorldFiles(publisher, data_dir), clock=self.clock,
                            read_only=read_only)
        #: The run catalogue (catalogue.py): `lw.list_runs` reads it a page at a time.
        self.catalogue: Any = getattr(events, "catalogue", None)
        self.max_concurrent_steps = max_concurrent_steps
        #: The World-wide cap on step functions running at once, in any thread or loop.
        self.step_slots = StepSlots(max_concurrent_steps)
        self.host_sources_allowed = host_sources_allowed
        #: Opened for reading only (local_world(..., read_only=True)): every write refused.
        self.read_only = read_only
        self._cross_process_locks = cross_process_locks
        # Queue slots (queue_slots.py): the run locks' backend unless the World names one
        # (local_world's run locks check pids; its slots are kernel locks).
        self._slot_locks = slot_locks if slot_locks is not None else cross_process_locks
        # Run ids (and outer-loop fences) whose lock a caller holds through this World,
        # counted: close() waits for them instead of dropping their locks.
        self._in_flight: dict[str, int] = {}
        self._in_flight_changed = threading.Condition()
        # `state` comes counted for this World (storage_state_for). A World dropped
        # without close() still gives its share of the storage back, at the next safe
        # point (a finalizer may run while this thread holds the state's lock).
        self._finalizer = weakref.finalize(self, release_when_safe, state)

    def __repr__(self) -> str:
        return f"<World {self.kind} {self.data_dir}>"

    def close(self, *, timeout: float = CLOSE_WAIT_SECONDS) -> None:
        """Release this World; the last World over a storage closes what they shared
        (local_world: the SQLite connection). Closing twice is harmless.

        Runs in flight through this World (another thread's `run_workflow`, a Worker's
        pool) hold their run locks: close waits up to `timeout` seconds for them to give
        the locks back, then raises `WorldBusyError` naming them and stays open. Dropping
        those locks would let another World — in this process, or another process that
        takes this pid's lock dir for stale — run the same run alongside."""
        started = time.monotonic()
        with self._in_flight_changed:
            if not self._in_flight_changed.wait_for(lambda: not self._in_flight, timeout):
                raise WorldBusyError(self.data_dir, sorted(self._in_flight),
                                     round(time.monotonic() - started, 3))
            released = self._finalizer.detach() is not None
        if released:
            self.state.closed()
        release_dropped()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __enter__(self) -> "World":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def storage_key(self) -> int:
        """The same for every World over one storage in this process (they share one
        storage state), different for different storages."""
        return id(self.state)

    @property
    def blocking(self) -> bool:
        """True when appends may block for long (fsync, network)."""
        return self.events.blocking

    # ---- events (append.py) -----------------------------------------------------------

    def append_event(
        self,
        run_id: str,
        type: str,
        payload: Any,
        *,
        idempotency_key: str | None = None,
        durable: bool = True,
    ) -> Event:
        """Append one event. `durable=False` lets a store skip its fsync for this one
        event (the next durable append makes it durable too); it still survives the
        process being killed."""
        return self.submit_event(run_id, type, payload, idempotency_key=idempotency_key,
                                 durable=durable).result()

    def submit_event(
        self,
        run_id: str,
        type: str,
        payload: Any,
        *,
        idempotency_key: str | None = None,
        durable: bool = True,
    ) -> PendingEvent:
        """`append_event` in two halves: this one allocates the sequence and hands the
        event to the store in order; `.result()` waits for the commit and returns the
        Event. Appends of one run submitted before any of them waits share one commit
        on stores that batch (local_world). A keyed append is committed before this
        returns."""
        return self.logs.submit(run_id, type, payload, idempotency_key=idempotency_key,
                                durable=durable)

    def sync(self) -> None:
        """Make every event appended so far durable — `durable=False` appends included."""
        self.logs.sync()

    def resolve_refs(self, value: Any) -> Any:
        """A plain copy of a payload value with every spilled `{"$ref": "artifact://…"}`
        read back (see `read_back`)."""
        return read_back(value, self.read_artifact)

    def list_events(self, run_id: str, *, after: int = 0) -> list[Event]:
        return self.logs.list_events(run_id, after=after)

    def read_event(self, run_id: str, sequence: int) -> Event:
        return self.logs.read_event(run_id, sequence)

    def list_runs(self) -> list[str]:
        return sorted(self.events.run_ids())

    def log_size(self, run_id: str) -> int:
        """Bytes of a run's stored events (what deleting its log frees)."""
        return sum(len(data) for _, data in self.events.read_after(run_id, 0))

    def delete_run(self, run_id: str) -> int:
        """Delete a run — events, artifacts, `runs/<runId>/` — under its lock; the bytes
        freed. Crash-safe: a tombstone `gc/<runId>.json` goes first and is removed last,
        and a marked run is finished off before anything reads or appends to it."""
        validate_run_id(run_id)
        with self.run_lock(run_id):
            if not run_deletion.is_marked(self, run_id):
                run_deletion.mark_for_deletion(
                    self, run_id, [m.artifact_id for m in self.list_artifacts(run_id)])
            return self.finish_deletion(run_id)

    def finish_deletion(self, run_id: str) -> int:
        """Finish a deletion begun (`run_deletion.mark_for_deletion`): remove what the
        run's tombstone names, its log last; the bytes freed (0 without a tombstone).
        The caller holds the run's lock."""
        return self.logs.finish_deletion(run_id)

    # ---- artifacts ------------------------------------------------------------------

    def write_artifact(
        self,
        run_id: str,
        step_path: str,
        name: str,
        payload: Any,
        *,
        content_type: str = "application/json",
        encoding: str = "json",
    ) -> ArtifactManifest:
        return self.artifacts.write(
            run_id, step_path, name, payload, content_type=content_type, encoding=encoding
        )

    def read_artifact(self, ref: str) -> Any:
        return self.artifacts.read(ref)

    def list_artifacts(self, run_id: str | None = None) -> list[ArtifactManifest]:
        manifests = []
        for aid in self.artifacts.list_ids():
            try:
                m = self.artifacts.read_manifest(aid)
            except LittleWorkflowError:
                continue
            if run_id is None or m.run_id == run_id:
                manifests.append(m)
        return sorted(manifests, key=lambda m: (m.created_at, m.artifact_id))

    # ---- locks ----------------------------------------------------------------------

    @contextlib.contextmanager
    def run_lock(self, run_id: str) -> Iterator[str]:
        validate_run_id(run_id)
        with self._holding(run_id), held(self.state, run_lock_name(run_id), run_id,
                                         self._cross_process_locks) as t:
            # While the lock is held no other process can delete the run; once it is
            # given back this process forgets the run (a cache of runs in use only).
            ledger = self.state.ledger(run_id)
            ledger.held = True
            try:
                yield t
            finally:
                ledger.held = False
                self.state.forget(run_id, ledger)

    @contextlib.contextmanager
    def fence_lock(self, outer_loop_id: str) -> Iterator[str]:
        name = outer_loop_lock_name(outer_loop_id)
        with self._holding(f"outer loop {outer_loop_id}"), held(
                self.state, name, outer_loop_id, self._cross_process_locks) as t:
            yield t

    def take_slot(self, name: str, label: str) -> Slot | None:
        """Hold the named slot (a place within a queue's limit) if nobody does, in any
        process or host: a `Slot` to `release()`, or None. Kernel locks on the local
        disk, fenced leases on object stores, this process elsewhere (queue_slots.py)."""
        if not SLOT_NAME_RE.fullmatch(name):
            raise WorldPathError(f"invalid slot name {name!r}: [A-Za-z0-9_-]{{1,100}}")
        return take_slot(self.state, self._slot_locks, name, label)

    def take_number(self, name: str) -> int:
        """The next number (1, 2, …) of the World's counter `name`, never given twice by
        any process or host, and durable no later than the next durable append made
        after it returns — so a record that carries it (a queued run's enqueue order in
        its `run.created`) never outlives it. On local_world one commit in events.db with
        no sync of its own (the record's synced commit, later in the same WAL, makes it
        durable with it); elsewhere the document `<name>.json` `{next}`, changed by a
        durable compare-and-swap — where a local_world counter also starts, the first
        time, so a counter kept there before goes on from where it was."""
        take = getattr(self.events, "take_number", None)
        if take is None:
            doc = self.update_document(
                f"{name}.json", lambda d: {"next": _counter_next(d) + 1})
            return int(doc["next"]) - 1
        return int(take(name, lambda: _counter_next(self.read_document(f"{name}.json"))))

    @contextlib.contextmanager
    def _holding(self, label: str) -> Iterator[None]:
        """Count `label` in flight until its lock is released (see close())."""
        with self._in_flight_changed:
            self._in_flight[label] = self._in_flight.get(label, 0) + 1
        try:
            yield
        finally:
            with self._in_flight_changed:
                left = self._in_flight.pop(label) - 1
                if left:
                    self._in_flight[label] = left
                self._in_flight_changed.notify_all()

    # ---- memory -----------------------------------------------------------------------

    def memory(
        self,
        scope: str,
        key: str | None = None,
        *,
        workflow_id: str | None = None,
        pipeline_key: str | None = None,
    ) -> Any:
        """A memory store: `world.memory("org")`, `world.memory("workflow", workflow_id)`,
        `world.memory("pipeline", pipeline_key)`. Writable from here (pre-populating)."""
        return memory_store_of(self, scope, key, workflow_id=workflow_id,
                               pipeline_key=pipeline_key)

    # ---- files, folders and documents: WorldFiles (files.py) -----------------------------

    def file_view(self, relative_root: str, *, read_only: bool = False,
                  journal: ChangeJournal | None = None) -> Any:
        """A folder of this World as an fsspec filesystem whose every operation is a call
        of this World's file methods (scratch folders, memory stores, bash mounts)."""
        return file_view_of(self, relative_root, read_only=read_only, journal=journal)


def _counter_next(doc: Any) -> int:
    """The number a counter document gives next (1 when there is none)."""
    return int((doc or {}).get("next", 1)) if isinstance(doc, dict) or doc is None else 1


def memory_store_of(world: WorldLike, scope: str, key: str | None = None, *,
                    workflow_id: str | None = None, pipeline_key: str | None = None) -> Any:
    """`World.memory` over any World: the store makes its reads and writes through
    `world` (a tracing World's store is traced too)."""
    from .memory_store import MemoryStore

    key = key or workflow_id or pipeline_key
    if scope != "org" and key is None:
        raise ValueError(f"memory scope {scope!r} needs a key (workflow id or pipeline key)")
    return MemoryStore(world, scope, key)


def file_view_of(world: WorldLike, relative_root: str, *, read_only: bool = False,
                 journal: ChangeJournal | None = None) -> Any:
    """`World.file_view` over any World: every operation of the view is a call of
    `world`'s file methods."""
    # fsspec (under the views) loads with the first view, not with every World user.
    from .views import ReadOnlyFileSystem, WorldFileSystem

    view = WorldFileSystem(world, relative_root, journal=journal)
    return ReadOnlyFileSystem(view, label=relative_root) if read_only else view


if TYPE_CHECKING:
    # The type checker holds World to its door: a World is a WorldLike.
    def _door(world: World) -> WorldLike:
        return world
