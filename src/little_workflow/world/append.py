"""The append protocol, written once for every World: an event's payload frozen and
digested once, then under its run's lock — receipt lookup → artifact-reference
validation → sequence allocation (never after the run's end, never by an execution
another one superseded) → handed to the EventStore in sequence order, its commit
awaited, a sequence another writer took learnt and allocated again. Each run's ledger
(shared_state.py) caches what storage holds and is read again whenever storage
disagrees: storage is the truth. Reading a run's log (`list_events`) goes through the
same ledgers."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..errors import (
    EventLogCorruptError,
    IdempotencyConflictError,
    RunFinishedError,
    StorageError,
)
from . import incarnations, run_deletion
from .artifacts import ArtifactStore
from .catalogue import summary_change
from .clock import Clock
from .event_stores import EventStore, PendingAppend
from .files import WorldFiles
from .ids import canonical_json, event_id, json_string, utc_now_iso, validate_run_id
from .models import Event, FrozenDict, thaw
from .payloads import (
    INLINE_LIMIT,
    EventPayloadError,
    envelope_bytes,
    frozen_json,
    json_size,
    spill,
    stand_in,
)
from .shared_state import RunLedger, StorageState
from .storage_errors import read_only_error, storage_error

#: Terminal events: nothing is appended after them, except the outer loop's record.
AFTER_END_ALLOWED = frozenset({"outer_loop.cycle_completed"})


class PendingEvent:
    """An append with its sequence, handed to the event store; `result()` waits for its
    commit (see `World.submit_event`)."""

    __slots__ = ("logs", "ledger", "run_id", "type", "frozen", "refs", "payload_json",
                 "type_json", "digest", "idempotency_key", "durable", "event", "ticket",
                 "receipt")

    def __init__(self, logs: RunLogs, ledger: RunLedger, run_id: str, type_: str, frozen: Any,
                 refs: set[str], payload_json: str, type_json: str, digest: str,
                 idempotency_key: str | None, durable: bool):
        self.logs, self.ledger, self.run_id, self.type = logs, ledger, run_id, type_
        self.frozen, self.refs, self.payload_json, self.type_json = frozen, refs, payload_json, type_json
        self.digest, self.idempotency_key, self.durable = digest, idempotency_key, durable
        self.event: Event | None = None
        self.ticket: PendingAppend | None = None
        self.receipt = False  # the event is one appended before under the same key

    @property
    def done(self) -> bool:
        """True when `result()` will not wait for storage."""
        return self.ticket is None or self.ticket.done

    def result(self) -> Event:
        ticket = self.ticket
        if ticket is None or ticket.published:  # committed: nothing to wait for
            self.ticket = None
            return self.event  # type: ignore[return-value]
        return self.logs.settle(self)


class RunLogs:
    """Every run's event log through one EventStore, as one World appends and reads it."""

    def __init__(self, *, events: EventStore, state: StorageState, artifacts: ArtifactStore,
                 files: WorldFiles, clock: Clock, read_only: bool):
        self.events = events
        self.state = state
        self.artifacts = artifacts
        #: The data dir's files (tombstones of runs being deleted), without the World.
        self.files = files
        self.clock = clock
        self.read_only = read_only
        #: The run catalogue (catalogue.py), kept by the store as events are committed.
        self.catalogue: Any = getattr(events, "catalogue", None)

    def submit(
        self,
        run_id: str,
        type: str,
        payload: Any,
        *,
        idempotency_key: str | None = None,
        durable: bool = True,
    ) -> PendingEvent:
        """`World.submit_event`."""
        validate_run_id(run_id)
        if self.read_only:
            raise read_only_error(self.files.data_dir)
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
            frozen = spill(frozen, lambda value, pointer: self._stored_ref(run_id, type, value, pointer))
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
            if durable and pending.receipt:
                # Committed, but maybe by a durable=False append not yet synced: this
                # caller was promised a durable event.
                self.events.sync()
            return pending

    def _allocate(self, p: PendingEvent) -> None:
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
                p.event, p.ticket, p.receipt = found, None, True
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
        data = envelope_bytes(event, p.payload_json, p.type_json)
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

    def settle(self, p: PendingEvent) -> Event:
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

    def _withdraw_if_orphaned(self, p: PendingEvent, ledger: RunLedger, sequence: int,
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
    def _stored_ref(self, run_id: str, type_: str, value: Any, pointer: str) -> FrozenDict:
        manifest = self.artifacts.write(run_id, "", f"event:{type_}:{pointer or '/'}",
                                        thaw(value), content_type="application/json",
                                        encoding="json")
        return stand_in(manifest.artifact_ref)
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

    # ---- deleting a run (run_deletion.py) ----------------------------------------------

    def finish_deletion(self, run_id: str) -> int:
        """Remove what the tombstone of `run_id` names, its log last; the bytes freed."""
        return run_deletion.finish_deletion(self.files, run_id,
                                            forget_artifact=self.state.known_artifacts.discard,
                                            remove_log=self._remove_log)

    def _finish_marked_deletion(self, run_id: str) -> bool:
        """When a run's log is first loaded: a deletion left half done (a crash mid-gc)
        is finished, so a reused run id never sees old records. True if there was one."""
        if not run_deletion.is_marked(self.files, run_id):
            return False
        self.finish_deletion(run_id)
        return True

    def _remove_log(self, run_id: str) -> int:
        if self.catalogue is not None:
            self.catalogue.forget(run_id)  # before the log: never a summary without one
        freed = self.events.delete_run(run_id)
        # This process forgets the run: a reused id allocates from sequence 1 again (an
        # append holding the old ledger sees it dropped and takes a fresh one).
        self.state.forget(run_id, wait=True)
        return freed
