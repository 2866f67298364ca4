"""The World: one set of event rules over small storage primitives.

Order of an append: receipt lookup → artifact-reference validation → sequence
allocation. Written here once; event stores only publish and read bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import re
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..errors import (
    DocumentCorruptError,
    EventLogCorruptError,
    IdempotencyConflictError,
    LittleWorkflowError,
    RunFinishedError,
    StorageError,
    WorldBusyError,
    WorldPathError,
)
from . import incarnations, run_deletion
from .artifacts import ArtifactStore
from .catalogue import summary_change
from .clock import SYSTEM_CLOCK, Clock
from .event_stores import EventStore, PendingAppend
from .ids import (
    ARTIFACT_REF_PREFIX,
    canonical_json,
    event_id,
    json_string,
    outer_loop_lock_name,
    run_lock_name,
    utc_now_iso,
    validate_run_id,
)
from .locks import CrossProcessLocks, held
from .models import ArtifactManifest, Event, FrozenDict, FrozenList, thaw
from .publish import Publisher, is_temp_name
from .queue_slots import Slot, take_slot
from .shared_state import RunLedger, StorageState, release_dropped, release_when_safe
from .slots import StepSlots
from .storage_errors import read_only_error, storage_error

if TYPE_CHECKING:
    from .views import ChangeJournal

#: A payload value whose canonical JSON is larger than this is stored as an artifact and
#: referenced as `{"$ref": "artifact://…"}` (DESIGN §10: bounded events).
INLINE_LIMIT = 64 * 1024
REF_KEY = "$ref"
#: Bytes of a spilled value's stand-in, `{"$ref":"artifact://art_<16 hex>"}`.
REF_SIZE = len('{"$ref":"artifact://art_0123456789abcdef"}')
#: Terminal events: nothing is appended after them, except the outer loop's record.
AFTER_END_ALLOWED = frozenset({"outer_loop.cycle_completed"})
#: How long `World.close()` waits, by default, for runs in flight to give their locks back.
CLOSE_WAIT_SECONDS = 10.0
#: How many times `update_document` reads again after losing a race to another writer.
UPDATE_ATTEMPTS = 200
SLOT_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,100}")


class EventPayloadError(LittleWorkflowError, TypeError):
    def __init__(self, run_id: str, type_: str, problem: str):
        self.run_id, self.type = run_id, type_
        super().__init__(f"run {run_id}: payload of {type_!r} event is not JSON: {problem}")


def frozen_json(value: Any, where: str = "payload", refs: set[str] | None = None) -> Any:
    """A deep-frozen copy of a JSON value; anything that is not JSON raises TypeError.
    Collects every `artifact://` string (keys included) into `refs` on the way."""
    if type(value) is dict or type(value) is FrozenDict:  # the common case, made cheap
        out = {}
        for k, v in value.items():
            if type(k) is not str:
                return _frozen_json(value, where, refs)
            if refs is not None and k.startswith(ARTIFACT_REF_PREFIX):
                refs.add(k)
            t = type(v)
            if t is str:
                if refs is not None and v.startswith(ARTIFACT_REF_PREFIX):
                    refs.add(v)
                out[k] = v
            elif t is int or t is bool or v is None:
                out[k] = v
            else:
                out[k] = frozen_json(v, where, refs)
        return FrozenDict(out)
    return _frozen_json(value, where, refs)


def _frozen_json(value: Any, where: str, refs: set[str] | None) -> Any:
    if isinstance(value, str):
        if refs is not None and value.startswith(ARTIFACT_REF_PREFIX):
            refs.add(value)
        return value
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{where} is {value!r}, which JSON cannot hold")
        return value
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{where} has a non-string key {k!r}")
            if refs is not None and k.startswith(ARTIFACT_REF_PREFIX):
                refs.add(k)
            out[k] = frozen_json(v, where, refs)
        return FrozenDict(out)
    if isinstance(value, (list, tuple)):
        return FrozenList([frozen_json(v, where, refs) for v in value])
    raise TypeError(f"{where} holds a {type(value).__name__}, which is not JSON")


def _envelope_bytes(event: Event, payload_json: str, type_json: str) -> bytes:
    """The stored envelope, reusing the payload's one canonical encoding."""
    key = "null" if event.append_idempotency_key is None else json.dumps(
        event.append_idempotency_key, ensure_ascii=False)
    return (
        f'{{"eventId":"{event.event_id}","runId":"{event.run_id}","sequence":{event.sequence},'
        f'"type":{type_json},"payload":{payload_json},"createdAt":"{event.created_at}",'
        f'"appendIdempotencyKey":{key},"requestDigest":"{event.request_digest}"}}'
    ).encode("utf-8")


class PendingEvent:
    """An append with its sequence, handed to the event store; `result()` waits for its
    commit (see `World.submit_event`)."""

    __slots__ = ("world", "ledger", "run_id", "type", "frozen", "refs", "payload_json",
                 "type_json", "digest", "idempotency_key", "durable", "event", "ticket")

    def __init__(self, world: "World", ledger: RunLedger, run_id: str, type_: str, frozen: Any,
                 refs: set[str], payload_json: str, type_json: str, digest: str,
                 idempotency_key: str | None, durable: bool):
        self.world, self.ledger, self.run_id, self.type = world, ledger, run_id, type_
        self.frozen, self.refs, self.payload_json, self.type_json = frozen, refs, payload_json, type_json
        self.digest, self.idempotency_key, self.durable = digest, idempotency_key, durable
        self.event: Event | None = None
        self.ticket: PendingAppend | None = None

    @property
    def done(self) -> bool:
        """True when `result()` will not wait for storage."""
        return self.ticket is None or self.ticket.done

    def result(self) -> Event:
        ticket = self.ticket
        if ticket is None or ticket.published:  # committed: nothing to wait for
            self.ticket = None
            return self.event  # type: ignore[return-value]
        return self.world._settle(self)


class World:
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
        self.kind = kind
        self.files = files
        self.data_dir = data_dir
        self.events = events
        self.publisher = publisher
        self.state = state
        self.clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self.artifacts = ArtifactStore(publisher, data_dir, state, clock=self.clock)
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
    def blocking(self) -> bool:
        """True when appends may block for long (fsync, network)."""
        return self.events.blocking

    def path(self, *parts: str) -> str:
        return "/".join((self.data_dir.rstrip("/"), *parts))

    # ---- events ---------------------------------------------------------------------

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
    ) -> "PendingEvent":
        """`append_event` in two halves: this one allocates the sequence and hands the
        event to the store in order; `.result()` waits for the commit and returns the
        Event. Appends of one run submitted before any of them waits share one commit
        on stores that batch (local_world). A keyed append is committed before this
        returns."""
        validate_run_id(run_id)
        if self.read_only:
            raise read_only_error(self.data_dir)
        if not isinstance(type, str) or not type:
            raise EventPayloadError(run_id, str(type), "the event type must be a non-empty string")
        if idempotency_key is not None and (not isinstance(idempotency_key, str) or not idempotency_key):
            raise EventPayloadError(run_id, type, "idempotency_key must be a non-empty string")
        refs: set[str] = set()
        try:
            frozen = frozen_json(payload, "payload", refs)
            payload_json = canonical_json(frozen)
        except (TypeError, ValueError) as e:
            raise EventPayloadError(run_id, type, str(e)) from None
        except RecursionError:
            raise EventPayloadError(run_id, type, "it is nested too deeply to store") from None
        if json_size(payload_json) > INLINE_LIMIT:
            frozen = self._spill(run_id, type, frozen)
            payload_json = canonical_json(frozen)
            refs = set()
            frozen_json(frozen, "payload", refs)
        type_json = json_string(type)
        # canonical_json({"type": type, "payload": payload}), built from the one encoding
        # of the payload ("payload" sorts before "type").
        digest = "sha256:" + hashlib.sha256(
            f'{{"payload":{payload_json},"type":{type_json}}}'.encode("utf-8")).hexdigest()
        while True:
            ledger = self._loaded_ledger(run_id)
            with ledger.lock:
                if ledger.dropped:
                    continue  # evicted meanwhile: take the state's ledger
                pending = PendingEvent(self, ledger, run_id, type, frozen, refs, payload_json,
                                       type_json, digest, idempotency_key, durable)
                self._allocate(pending)
                if idempotency_key is not None:
                    # A receipt is only ever seen once its event is committed.
                    pending.result()
                return pending

    def _allocate(self, p: "PendingEvent") -> None:
        """Under the run's lock: receipt lookup → artifact-reference validation →
        sequence allocation → hand the event to the store, in sequence order."""
        ledger, run_id = p.ledger, p.run_id
        if (not ledger.held and ledger.last_sequence and not self.events.checks_predecessor
                and self.events.read_one(run_id, ledger.last_sequence) is None):
            # No lock of this run is held here, so another process may have deleted it
            # (and its id been used again) since this process read it: read it again
            # rather than write after an event that is gone.
            self._reload(run_id, ledger)
        # 1. receipt lookup
        if p.idempotency_key is not None:
            found = self._receipt(run_id, ledger, p.idempotency_key, p.digest)
            if found is not None:
                p.event, p.ticket = found, None
                return
        # 2. artifact-reference validation
        for ref in p.refs:
            self.artifacts.require(ref)
        # 3. sequence allocation — never after the run's end, never by a holder that
        # may have lost its lease
        if ledger.finished is not None and p.type not in AFTER_END_ALLOWED:
            self._reload(run_id, ledger)  # the end this process remembers may be of a deleted run
            self._check_open(run_id, ledger, p.type)
        fence = self.state.fences.get(run_id)
        if fence is not None:
            fence()
        sequence = ledger.last_sequence + 1
        # The log fences every executor, lock or no lock (incarnations.py): what this
        # process knows of the run's newest start is all it read, so an append of an
        # older execution that lost its sequence is refused once it learnt what won it.
        incarnations.check_append(run_id, p.type, p.frozen, sequence, ledger.newest_start)
        created_at = utc_now_iso(self.clock.now())
        event = Event(event_id(run_id, sequence), run_id, sequence, p.type, p.frozen,
                      created_at, p.idempotency_key, p.digest)
        data = _envelope_bytes(event, p.payload_json, p.type_json)
        try:
            ticket = self.events.enqueue(run_id, sequence, data, durable=p.durable,
                                         idempotency_key=p.idempotency_key, epoch=ledger.epoch,
                                         change=summary_change(p.type, p.frozen, created_at))
        except OSError as e:  # disk full, read-only: nothing was published
            raise storage_error(e, self.events.description) from None
        if (ticket.published and sequence > 1 and not ledger.held
                and not self.events.checks_predecessor):
            self._withdraw_if_orphaned(p, ledger, sequence, data)
        # Noted before the commit, so the next append of this run can be allocated
        # (and share the commit); rolled back if this one does not commit.
        ledger.note(sequence, p.idempotency_key, p.digest, p.type)
        if p.type == "run.started":
            ledger.note_start(sequence, p.frozen)
        # Event 1's identity only from an event the store did not refuse: one refused at
        # once lost the race to another writer's event 1, which is the run's.
        if sequence == 1 and not (ticket.done and not ticket.published):
            ledger.first = (event.created_at, p.digest)
        ledger.last_ticket = ticket
        p.event, p.ticket = event, ticket

    def _settle(self, p: "PendingEvent") -> Event:
        """Wait for `p`'s commit; on a lost commit roll the ledger back to what is
        committed; on a sequence another writer took, learn what it wrote and allocate
        again."""
        ledger, run_id = p.ledger, p.run_id
        while True:
            ticket = p.ticket
            if ticket is None:
                return p.event
            try:
                published = ticket.wait()
            except BaseException as e:
                with ledger.lock:
                    ledger.rollback(ticket.epoch, ticket.first_lost)
                if isinstance(e, OSError):
                    raise storage_error(e, self.events.description) from None
                raise
            if published:
                p.ticket = None
                return p.event
            # Another writer (another process or host) took this sequence: learn what it
            # wrote, then look for our receipt again before taking the next one.
            with ledger.lock:
                if ticket.epoch == ledger.epoch:
                    ledger.rollback(ticket.epoch, ticket.first_lost)
                    before = ledger.last_sequence
                    self._catch_up(run_id, ledger)
                    # Nothing at the refused sequence: the event before it is gone (the
                    # run was deleted since this process read it). Read it again; a log
                    # that reads the same is corrupt.
                    if ledger.last_sequence == before and not self._reload(run_id, ledger):
                        raise EventLogCorruptError(
                            run_id,
                            self.events.description,
                            f"sequence {ticket.first_lost} could not be published and no "
                            "event is there",
                        )
                self._allocate(p)

    def _withdraw_if_orphaned(self, p: "PendingEvent", ledger: RunLedger, sequence: int,
                              data: bytes) -> None:
        """Under the run's lock, after publishing `sequence` holding no lock of the run:
        the check before the write saw event `sequence - 1`, but another process may have
        deleted the run (and its id been used again) between that check and the write.
        If its predecessor is gone or of another incarnation, take the event back and
        refuse, so the caller reads the run again: never a lone event past a hole."""
        run_id = p.run_id
        where = f"{self.events.description} run {run_id}"
        try:
            before = self.events.read_one(run_id, sequence - 1)
            first = before if sequence == 2 else self.events.read_one(run_id, 1)
        except OSError as e:
            raise storage_error(e, where) from None
        if before is not None and first is not None:
            if ledger.first is None:
                return
            event_1 = self._parse(run_id, [(1, first)], 0)[0]
            if (event_1.created_at, event_1.request_digest) == ledger.first:
                return
        try:
            self.events.withdraw(run_id, sequence, data)
        except OSError as e:
            raise storage_error(e, where) from None
        self._reload(run_id, ledger)
        if ledger.finished is not None and p.type not in AFTER_END_ALLOWED:
            raise RunFinishedError(run_id, ledger.finished, p.type)
        raise StorageError(where, f"the run was deleted or replaced while event {sequence} "
                           f"({p.type}) was appended; that event was taken back",
                           "read the run again before appending to it")

    def sync(self) -> None:
        """Make every event appended so far durable — `durable=False` appends included."""
        self.events.sync()

    @staticmethod
    def _check_open(run_id: str, ledger: RunLedger, type_: str) -> None:
        if ledger.finished is not None and type_ not in AFTER_END_ALLOWED:
            raise RunFinishedError(run_id, ledger.finished, type_)

    def _spill(self, run_id: str, type_: str, value: Any, pointer: str = "") -> Any:
        """Move every value larger than INLINE_LIMIT into an artifact, innermost first;
        a dict still too large then gives up its largest members, and is given up whole
        when what is left is members no larger than a reference (thousands of small
        ones). The payload itself is never given up whole: its keys are the event's
        (`stepPath`, `name`…) and every caller's value lives one level down.
        Deterministic, so a repeated append (same idempotency key) stores the same payload."""
        size = json_size(canonical_json(value))
        if size <= INLINE_LIMIT:
            return value
        if isinstance(value, dict) and not _is_ref(value):
            out = {k: self._spill(run_id, type_, v, f"{pointer}/{k}") for k, v in value.items()}
            sizes = sorted(((json_size(canonical_json(v)), k) for k, v in out.items()
                            if not _is_ref(v)), reverse=True)
            total = json_size(canonical_json(out))
            for member_size, k in sizes:
                if total <= INLINE_LIMIT or member_size <= REF_SIZE:
                    break
                out[k] = self._stored_ref(run_id, type_, out[k], f"{pointer}/{k}")
                total += REF_SIZE - member_size
            if total > INLINE_LIMIT and pointer:
                return self._stored_ref(run_id, type_, out, pointer)
            return FrozenDict(out)
        return self._stored_ref(run_id, type_, value, pointer)

    def _stored_ref(self, run_id: str, type_: str, value: Any, pointer: str) -> FrozenDict:
        manifest = self.artifacts.write(run_id, "", f"event:{type_}:{pointer or '/'}",
                                        thaw(value), content_type="application/json",
                                        encoding="json")
        return FrozenDict({REF_KEY: manifest.artifact_ref})

    def resolve_refs(self, value: Any) -> Any:
        """A plain copy of a payload value with every spilled `{"$ref": "artifact://…"}`
        read back (see `read_back`)."""
        return read_back(value, self.read_artifact)

    def _receipt(self, run_id: str, ledger: RunLedger, key: str, digest: str) -> Event | None:
        hit = ledger.receipts.get(key)
        if hit is None:
            return None
        data = self.events.read_one(run_id, hit[0])
        found = None if data is None else self._parse(run_id, [(hit[0], data)], hit[0] - 1)[0]
        if found is None or found.append_idempotency_key != key:
            # A receipt of a run deleted since (its id used again): read the run again.
            self._reload(run_id, ledger)
            hit = ledger.receipts.get(key)
            if hit is None:
                return None
            found = self.read_event(run_id, hit[0])
        if hit[1] != digest:
            raise IdempotencyConflictError(run_id, key, hit[1], digest, sequence=hit[0])
        return found

    def _loaded_ledger(self, run_id: str) -> RunLedger:
        ledger = self.state.ledger(run_id)
        if not ledger.loaded:
            with ledger.lock:
                if not ledger.loaded and not ledger.dropped:
                    self._catch_up(run_id, ledger)
                    ledger.loaded = True
            if self._finish_marked_deletion(run_id):
                ledger = self.state.ledger(run_id)
                ledger.loaded = True  # nothing of the old run is left to read
        return ledger

    def _reload(self, run_id: str, ledger: RunLedger) -> bool:
        """Under the ledger's lock: forget what this process remembers of the run and
        read it again from storage (this process's own appends committed first). True
        when that changed what the ledger knew."""
        ticket = ledger.last_ticket
        if ticket is not None and not ticket.done:
            try:
                ticket.wait()
            except Exception:
                pass  # its own caller hears of it; what matters here is what is stored
        before = (ledger.first, ledger.last_sequence, ledger.finished)
        ledger.reset()
        self._catch_up(run_id, ledger)
        ledger.loaded = True
        return (ledger.first, ledger.last_sequence, ledger.finished) != before

    def _catch_up(self, run_id: str, ledger: RunLedger) -> list[Event]:
        after = ledger.last_sequence
        events = self._parse(run_id, self._read_after(run_id, after), after)
        for e in events:
            ledger.note_event(e)
        return events

    def _read_after(self, run_id: str, after: int) -> list[tuple[int, bytes]]:
        try:
            return self.events.read_after(run_id, after)
        except OSError as e:
            raise storage_error(e, f"{self.events.description} run {run_id}") from None

    def _parse(self, run_id: str, rows: list[tuple[int, bytes]], after: int) -> list[Event]:
        out = []
        expected = after + 1
        for sequence, data in rows:
            if sequence != expected:
                # A lost event below the highest one: never resume or re-execute over it.
                raise EventLogCorruptError(
                    run_id, f"{self.events.description} run {run_id}",
                    f"event {expected} is missing: the log jumps from {expected - 1} to {sequence}")
            expected += 1
            where = f"{self.events.description} run {run_id} event {sequence}"
            try:
                envelope = json.loads(data)
                event = Event.from_envelope(envelope)
            except (ValueError, KeyError, TypeError) as e:
                raise EventLogCorruptError(run_id, where, f"unreadable event: {e}") from None
            if event.sequence != sequence or event.run_id != run_id:
                raise EventLogCorruptError(
                    run_id, where, f"holds run {event.run_id!r} sequence {event.sequence}"
                )
            out.append(event)
        return out

    def list_events(self, run_id: str, *, after: int = 0) -> list[Event]:
        validate_run_id(run_id)
        if not isinstance(after, int) or after < 0:
            raise ValueError(f"after must be a non-negative integer, not {after!r}")
        ledger = self.state.ledger(run_id)
        first_load = not ledger.loaded
        events = self._parse(run_id, self._read_after(run_id, after), after)
        if first_load and self._finish_marked_deletion(run_id):
            return []
        if after != 0 and not ledger.loaded:
            return events  # a part of the log: the ledger needs the whole of it
        with ledger.lock:
            if after == 0 and ledger.last_sequence and (
                    not events or ledger.first != (events[0].created_at, events[0].request_digest)):
                # Not the run this process remembers: it was deleted (and its id maybe
                # used again) by another process.
                self._reload(run_id, ledger)
                return self._parse(run_id, self._read_after(run_id, 0), 0)
            for e in events:
                ledger.note_event(e)
            if after == 0:
                ledger.loaded = True
        return events

    def read_event(self, run_id: str, sequence: int) -> Event:
        validate_run_id(run_id)
        data = self.events.read_one(run_id, sequence)
        if data is None:
            raise EventLogCorruptError(run_id, self.events.description, f"event {sequence} is missing")
        return self._parse(run_id, [(sequence, data)], sequence - 1)[0]

    def list_runs(self) -> list[str]:
        return sorted(self.events.run_ids())

    def delete_run(self, run_id: str) -> int:
        """Delete a run — events, artifacts, `runs/<runId>/` — under its lock; the bytes
        freed. Crash-safe: a tombstone `gc/<runId>.json` goes first and is removed last,
        and a marked run is finished off before anything reads or appends to it."""
        validate_run_id(run_id)
        with self.run_lock(run_id):
            return run_deletion.delete_run(self, run_id)

    def _finish_marked_deletion(self, run_id: str) -> bool:
        """When a run's log is first loaded: a deletion left half done (a crash mid-gc)
        is finished, so a reused run id never sees old records. True if there was one."""
        if self.read_file(run_deletion.tombstone_path(run_id)) is None:
            return False
        run_deletion.finish_deletion(self, run_id)
        return True

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
        from .memory_store import MemoryStore

        key = key or workflow_id or pipeline_key
        if scope != "org" and key is None:
            raise ValueError(f"memory scope {scope!r} needs a key (workflow id or pipeline key)")
        return MemoryStore(self, scope, key)

    # ---- files, folders and documents (paths relative to the data dir) ---------------
    # Everything the runtime keeps besides events and artifacts — memory files, kept
    # plans, workflow versions, outer-loop manifests, scratch folders, bash mounts —
    # goes through these, so a wrapper (tracing_world) sees every read and write.

    def _file_path(self, relative_path: str) -> str:
        if not isinstance(relative_path, str):
            raise WorldPathError(f"invalid path {relative_path!r}: a string relative to the data dir")
        rel = relative_path.strip("/")
        parts = rel.split("/") if rel else []
        if any(p in ("", ".", "..") or is_temp_name(p) for p in parts):
            raise WorldPathError(f"invalid path {relative_path!r}: no empty, '.', '..' or temp segments")
        return self.path(*parts) if parts else self.data_dir

    def read_file(self, relative_path: str) -> bytes | None:
        """The bytes of a file, or None when there is none."""
        return self.publisher.read(self._file_path(relative_path))

    def write_file(self, relative_path: str, data: bytes, *, durable: bool = True) -> None:
        """Replace a file atomically (readers see the old or the new bytes), creating its
        folder; durable: file and directory entries synced where the backend can."""
        path = self._file_path(relative_path)
        with _storage(path):
            self.publisher.ensure_dir(path.rsplit("/", 1)[0])
            self.publisher.replace(path, bytes(data), durable=durable)

    def create_file(self, relative_path: str, data: bytes) -> bool:
        """Publish a file once: False (and nothing changed) when it already exists."""
        path = self._file_path(relative_path)
        with _storage(path):
            self.publisher.ensure_dir(path.rsplit("/", 1)[0])
            return self.publisher.publish_if_absent(path, bytes(data))

    def remove_file(self, relative_path: str, *, durable: bool = True) -> bool:
        """Remove a file; False when there was none. `durable=False`: a power cut may
        undo the removal (made durable by `sync()`, or by the next durable write there)."""
        path = self._file_path(relative_path)
        with _storage(path):
            return self.publisher.remove(path, durable=durable)

    def remove_dir(self, relative_path: str) -> None:
        """Remove an empty folder."""
        path = self._file_path(relative_path)
        with _storage(path):
            self.publisher.remove_dir(path)

    def list_dir(self, relative_path: str = "") -> list[str]:
        """Names directly in a folder (temporary names left out), sorted."""
        return self.publisher.list_names(self._file_path(relative_path))

    def file_info(self, relative_path: str) -> dict[str, Any] | None:
        """`{"type": "file" | "directory", "size": n}` or None."""
        return self.publisher.info(self._file_path(relative_path))

    def ensure_dir(self, relative_path: str) -> None:
        path = self._file_path(relative_path)
        with _storage(path):
            self.publisher.ensure_dir(path)

    def file_view(self, relative_root: str, *, read_only: bool = False,
                  journal: ChangeJournal | None = None) -> Any:
        """A folder of this World as an fsspec filesystem whose every operation is a call
        of this World's file methods (scratch folders, memory stores, bash mounts)."""
        # fsspec (under the views) loads with the first view, not with every World user.
        from .views import ReadOnlyFileSystem, WorldFileSystem

        view = WorldFileSystem(self, relative_root, journal=journal)
        return ReadOnlyFileSystem(view, label=relative_root) if read_only else view

    def read_document(self, relative_path: str) -> Any | None:
        raw = self.read_file(relative_path)
        if raw is None:
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise DocumentCorruptError(self._file_path(relative_path), str(e)) from None

    def write_document(self, relative_path: str, doc: Any) -> None:
        """Replace a small JSON document atomically (temp, fsync, rename, dir fsync)."""
        self.write_file(relative_path, _document_bytes(doc))

    def create_document(self, relative_path: str, doc: Any) -> bool:
        """Publish a JSON document once; False when it already exists."""
        return self.create_file(relative_path, _document_bytes(doc))

    def update_document(self, relative_path: str, change: Callable[[Any], Any], *,
                        durable: bool = True) -> Any:
        """Read-modify-write a small JSON document with no lost update: `change(doc)`
        (None when there is none) returns the new document; it is written only if the
        document is still the one read (compare-and-swap: the store's conditional write
        on object stores, a kernel lock of the folder on the local disk, a lock of the
        process elsewhere), else `change` is called again on what is there now. A
        `change` that returns its argument unchanged writes nothing. Returns the document
        as written (or as found)."""
        path = self._file_path(relative_path)
        for attempt in range(UPDATE_ATTEMPTS):
            with _storage(path):
                found = self.publisher.read_versioned(path)
            doc = None
            if found is not None:
                try:
                    doc = json.loads(found[0])
                except ValueError as e:
                    raise DocumentCorruptError(path, str(e)) from None
            new = change(doc)
            if new == doc:
                return doc
            with _storage(path):
                if self.publisher.replace_if(path, _document_bytes(new),
                                             found[1] if found is not None else None,
                                             durable=durable):
                    return new
            # Another writer got there first: read again (a little later when it keeps
            # happening, so contenders spread out).
            if attempt >= 3:
                time.sleep(min(0.05, 0.001 * 2 ** (attempt - 3)))
        raise StorageError(path, f"could not update the document after {UPDATE_ATTEMPTS} "
                           "attempts: other writers changed it every time",
                           "try again; if it persists, something rewrites it in a loop")


@contextlib.contextmanager
def _storage(path: str) -> Iterator[None]:
    """The storage failing (disk full, read-only) becomes one StorageError naming the file."""
    try:
        yield
    except (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError):
        raise
    except OSError as e:
        raise storage_error(e, path) from None


def _document_bytes(doc: Any) -> bytes:
    return json.dumps(doc, ensure_ascii=False, indent=2, sort_keys=True).encode()


def json_size(text: str) -> int:
    """Bytes of `text` in UTF-8, exact where it matters against INLINE_LIMIT: a text short
    enough that even four bytes a character stay under the limit (nearly every payload)
    is measured by its length, with no encoding."""
    n = len(text)
    if 4 * n <= INLINE_LIMIT or text.isascii():
        return n
    return len(text.encode("utf-8", "surrogatepass"))


def spilled_ref(value: Any) -> str | None:
    """The artifact ref when `value` is the stand-in of a spilled value,
    `{"$ref": "artifact://…"}`; None for anything else."""
    if isinstance(value, dict) and len(value) == 1:
        ref = value.get(REF_KEY)
        if isinstance(ref, str) and ref.startswith(ARTIFACT_REF_PREFIX):
            return ref
    return None


def _is_ref(value: Any) -> bool:
    return spilled_ref(value) is not None


def read_back(value: Any, read_artifact: Callable[[str], Any]) -> Any:
    """A plain (mutable) copy of a payload value as it was appended: every spilled part
    read back through `read_artifact`, also parts spilled inside a spilled part (a dict
    that gave up members, then was given up by its parent). One walk, as `thaw` makes:
    a value with nothing spilled costs its copy and no read (measured: as `thaw`)."""

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            if len(value) == 1 and REF_KEY in value:
                ref = spilled_ref(value)
                if ref is not None:
                    return walk(read_artifact(ref))
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(value)
