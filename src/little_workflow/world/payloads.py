"""Event payloads as they are stored: deep-frozen JSON (anything else refused), measured
in canonical JSON, values over the inline limit spilled to artifacts and read back, and
the envelope's bytes made from the payload's one encoding."""

from __future__ import annotations

import json
import math
from typing import Any, Callable

from ..errors import LittleWorkflowError
from . import vocabulary
from .ids import ARTIFACT_REF_PREFIX, canonical_json
from .models import Event, FrozenDict, FrozenList

#: A payload value whose canonical JSON is larger than this is stored as an artifact and
#: referenced as `{"$ref": "artifact://…"}`.
INLINE_LIMIT = vocabulary.INLINE_LIMIT
REF_KEY = "$ref"
#: Bytes of a spilled value's stand-in, `{"$ref":"artifact://art_<16 hex>"}`.
REF_SIZE = len('{"$ref":"artifact://art_0123456789abcdef"}')


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


def envelope_bytes(event: Event, payload_json: str, type_json: str) -> bytes:
    """The stored envelope, reusing the payload's one canonical encoding."""
    key = "null" if event.append_idempotency_key is None else json.dumps(
        event.append_idempotency_key, ensure_ascii=False)
    return (
        f'{{"eventId":"{event.event_id}","runId":"{event.run_id}","sequence":{event.sequence},'
        f'"type":{type_json},"payload":{payload_json},"createdAt":"{event.created_at}",'
        f'"appendIdempotencyKey":{key},"requestDigest":"{event.request_digest}"}}'
    ).encode("utf-8")


def spill(value: Any, store: Callable[[Any, str], FrozenDict], pointer: str = "") -> Any:
    """Move every value larger than INLINE_LIMIT into an artifact, innermost first
    (`store(value, pointer)` writes one and returns its stand-in); a dict still too
    large then gives up its largest members, and is given up whole when what is left is
    members no larger than a reference (thousands of small ones). The payload itself is
    never given up whole: its keys are the event's (`stepPath`, `name`…) and every
    caller's value lives one level down. Deterministic, so a repeated append (same
    idempotency key) stores the same payload."""
    size = json_size(canonical_json(value))
    if size <= INLINE_LIMIT:
        return value
    if isinstance(value, dict) and not _is_ref(value):
        out = {k: spill(v, store, f"{pointer}/{k}") for k, v in value.items()}
        sizes = sorted(((json_size(canonical_json(v)), k) for k, v in out.items()
                        if not _is_ref(v)), reverse=True)
        total = json_size(canonical_json(out))
        for member_size, k in sizes:
            if total <= INLINE_LIMIT or member_size <= REF_SIZE:
                break
            out[k] = store(out[k], f"{pointer}/{k}")
            total += REF_SIZE - member_size
        if total > INLINE_LIMIT and pointer:
            return store(out, pointer)
        return FrozenDict(out)
    return store(value, pointer)


def stand_in(artifact_ref: str) -> FrozenDict:
    """What a spilled value is stored as: `{"$ref": "artifact://…"}`."""
    return FrozenDict({REF_KEY: artifact_ref})


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
