"""The World: one set of event rules over small storage primitives.

Order of an append: receipt lookup → artifact-reference validation → sequence
allocation. Written here once; event stores only publish and read bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from typing import Any, Iterator

from ..errors import (
    DocumentCorruptError,
    EventLogCorruptError,
    IdempotencyConflictError,
    LittleWorkflowError,
)
from .artifacts import ArtifactStore
from .event_stores import EventStore
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
from .models import ArtifactManifest, Event, FrozenDict, FrozenList
from .publish import Publisher
from .shared_state import RunLedger, StorageState
from .storage_errors import storage_error


class EventPayloadError(LittleWorkflowError, TypeError):
    def __init__(self, run_id: str, type_: str, problem: str):
        self.run_id, self.type = run_id, type_
        super().__init__(f"run {run_id}: payload of {type_!r} event is not JSON: {problem}")


def frozen_json(value: Any, where: str = "payload", refs: set[str] | None = None) -> Any:
    """A deep-frozen copy of a JSON value; anything that is not JSON raises TypeError.
    Collects every `artifact://` string (keys included) into `refs` on the way."""
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
    ):
        if max_concurrent_steps is not None and max_concurrent_steps < 1:
            raise ValueError("max_concurrent_steps must be a positive integer or None")
        self.kind = kind
        self.files = files
        self.data_dir = data_dir
        self.events = events
        self.publisher = publisher
        self.state = state
        self.artifacts = ArtifactStore(publisher, data_dir, state)
        self.max_concurrent_steps = max_concurrent_steps
        self.host_sources_allowed = host_sources_allowed
        self._cross_process_locks = cross_process_locks

    def __repr__(self) -> str:
        return f"<World {self.kind} {self.data_dir}>"

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
        validate_run_id(run_id)
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
        type_json = json_string(type)
        # canonical_json({"type": type, "payload": payload}), built from the one encoding
        # of the payload ("payload" sorts before "type").
        digest = "sha256:" + hashlib.sha256(
            f'{{"payload":{payload_json},"type":{type_json}}}'.encode("utf-8")).hexdigest()
        ledger = self._loaded_ledger(run_id)
        with ledger.lock:
            # 1. receipt lookup
            if idempotency_key is not None:
                found = self._receipt(run_id, ledger, idempotency_key, digest)
                if found is not None:
                    return found
            # 2. artifact-reference validation
            for ref in refs:
                self.artifacts.require(ref)
            # 3. sequence allocation
            while True:
                sequence = ledger.last_sequence + 1
                event = Event(event_id(run_id, sequence), run_id, sequence, type, frozen,
                              utc_now_iso(), idempotency_key, digest)
                data = _envelope_bytes(event, payload_json, type_json)
                try:
                    published = self.events.publish_if_absent(
                        run_id, sequence, data, durable=durable, idempotency_key=idempotency_key
                    )
                except OSError as e:  # disk full, read-only: nothing was published
                    raise storage_error(e, self.events.description) from None
                if published:
                    ledger.note(sequence, idempotency_key, digest)
                    return event
                # Another writer (another process or host) took this sequence: learn what
                # it wrote, then look for our receipt again before taking the next one.
                before = ledger.last_sequence
                self._catch_up(run_id, ledger)
                if idempotency_key is not None:
                    found = self._receipt(run_id, ledger, idempotency_key, digest)
                    if found is not None:
                        return found
                if ledger.last_sequence == before:
                    raise EventLogCorruptError(
                        run_id,
                        self.events.description,
                        f"sequence {sequence} could not be published and no event is there",
                    )

    def sync(self) -> None:
        """Make every event appended so far durable — `durable=False` appends included."""
        self.events.sync()

    def _receipt(self, run_id: str, ledger: RunLedger, key: str, digest: str) -> Event | None:
        hit = ledger.receipts.get(key)
        if hit is None:
            return None
        sequence, first_digest = hit
        if first_digest != digest:
            raise IdempotencyConflictError(run_id, key, first_digest, digest)
        return self.read_event(run_id, sequence)

    def _loaded_ledger(self, run_id: str) -> RunLedger:
        ledger = self.state.ledger(run_id)
        if not ledger.loaded:
            with ledger.lock:
                if not ledger.loaded:
                    self._catch_up(run_id, ledger)
                    ledger.loaded = True
        return ledger

    def _catch_up(self, run_id: str, ledger: RunLedger) -> list[Event]:
        events = self._parse(run_id, self._read_after(run_id, ledger.last_sequence))
        for e in events:
            ledger.note(e.sequence, e.append_idempotency_key, e.request_digest)
        return events

    def _read_after(self, run_id: str, after: int) -> list[tuple[int, bytes]]:
        try:
            return self.events.read_after(run_id, after)
        except OSError as e:
            raise storage_error(e, f"{self.events.description} run {run_id}") from None

    def _parse(self, run_id: str, rows: list[tuple[int, bytes]]) -> list[Event]:
        out = []
        for sequence, data in rows:
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
        events = self._parse(run_id, self._read_after(run_id, after))
        ledger = self.state.ledger(run_id)
        if events:
            with ledger.lock:
                for e in events:
                    ledger.note(e.sequence, e.append_idempotency_key, e.request_digest)
                if after == 0:
                    ledger.loaded = True
        return events

    def read_event(self, run_id: str, sequence: int) -> Event:
        validate_run_id(run_id)
        data = self.events.read_one(run_id, sequence)
        if data is None:
            raise EventLogCorruptError(run_id, self.events.description, f"event {sequence} is missing")
        return self._parse(run_id, [(sequence, data)])[0]

    def list_runs(self) -> list[str]:
        return sorted(self.events.run_ids())

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

    def read_artifact_manifest(self, ref: str) -> ArtifactManifest:
        return self.artifacts.read_manifest(ref)

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
        with held(self.state, run_lock_name(run_id), run_id, self._cross_process_locks) as t:
            yield t

    @contextlib.contextmanager
    def fence_lock(self, outer_loop_id: str) -> Iterator[str]:
        name = outer_loop_lock_name(outer_loop_id)
        with held(self.state, name, outer_loop_id, self._cross_process_locks) as t:
            yield t

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

    # ---- small documents (manifests, versions, memory) -------------------------------

    def write_document(self, relative_path: str, doc: Any) -> None:
        """Replace a small JSON document atomically (temp, fsync, rename, dir fsync)."""
        data = json.dumps(doc, ensure_ascii=False, indent=2, sort_keys=True).encode()
        try:
            self.publisher.replace(self.path(relative_path), data)
        except OSError as e:
            raise storage_error(e, self.path(relative_path)) from None

    def write_document_once(self, relative_path: str, doc: Any) -> bool:
        data = json.dumps(doc, ensure_ascii=False, indent=2, sort_keys=True).encode()
        try:
            return self.publisher.publish_if_absent(self.path(relative_path), data)
        except OSError as e:
            raise storage_error(e, self.path(relative_path)) from None

    def read_document(self, relative_path: str) -> Any | None:
        raw = self.publisher.read(self.path(relative_path))
        if raw is None:
            return None
        try:
            return json.loads(raw)
        except ValueError as e:
            raise DocumentCorruptError(self.path(relative_path), str(e)) from None

