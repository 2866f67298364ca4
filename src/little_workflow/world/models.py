"""Frozen data: events, artifact manifests, and deep-immutable JSON values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn


def _immutable(self: Any, *args: Any, **kwargs: Any) -> NoReturn:
    raise TypeError(f"{type(self).__name__} is frozen: events cannot be changed once made")


class FrozenDict(dict):  # type: ignore[type-arg]
    """A dict that refuses mutation. Still a dict, so it compares equal to plain JSON."""

    __slots__ = ()
    __setitem__ = __delitem__ = _immutable
    clear = pop = popitem = setdefault = update = __ior__ = _immutable  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items(), key=lambda kv: kv[0])))

    def __reduce__(self) -> Any:
        return (FrozenDict, (dict(self),))


class FrozenList(list):  # type: ignore[type-arg]
    """A list that refuses mutation. Still a list, so it compares equal to plain JSON."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _immutable  # type: ignore[assignment]
    append = extend = insert = pop = remove = clear = sort = reverse = _immutable  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self))

    def __reduce__(self) -> Any:
        return (FrozenList, (list(self),))


def freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return FrozenDict({k: freeze(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return FrozenList(freeze(v) for v in value)
    return value


def thaw(value: Any) -> Any:
    """A plain, mutable deep copy of a (possibly frozen) JSON value."""
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, list):
        return [thaw(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class Event:
    """One committed event. A frozen slots dataclass rather than a pydantic model: events
    are made on every append, and `model_construct` alone measured ~10 µs an event —
    more than the rest of an in-memory append. The payload is deep-frozen."""

    event_id: str
    run_id: str
    sequence: int
    type: str
    payload: Any
    created_at: str
    append_idempotency_key: str | None
    request_digest: str

    @classmethod
    def from_envelope(cls, envelope: dict[str, Any]) -> "Event":
        return cls(
            envelope["eventId"],
            envelope["runId"],
            envelope["sequence"],
            envelope["type"],
            freeze(envelope["payload"]),
            envelope["createdAt"],
            envelope.get("appendIdempotencyKey"),
            envelope["requestDigest"],
        )

    def to_envelope(self) -> dict[str, Any]:
        return {
            "eventId": self.event_id,
            "runId": self.run_id,
            "sequence": self.sequence,
            "type": self.type,
            "payload": thaw(self.payload),
            "createdAt": self.created_at,
            "appendIdempotencyKey": self.append_idempotency_key,
            "requestDigest": self.request_digest,
        }

    def to_json_dict(self) -> dict[str, Any]:
        return self.to_envelope()


#: (attribute, JSON name, type) of every manifest field, in order.
MANIFEST_FIELDS = (
    ("artifact_id", "artifactId", str), ("artifact_ref", "artifactRef", str),
    ("run_id", "runId", str), ("step_path", "stepPath", str), ("name", "name", str),
    ("content_type", "contentType", str), ("encoding", "encoding", str),
    ("sha256", "sha256", str), ("size_bytes", "sizeBytes", int), ("created_at", "createdAt", str),
)


@dataclass(frozen=True, slots=True)
class ArtifactManifest:
    """An artifact's manifest: what it is, whose, how big, its hash. A frozen dataclass, so
    that opening a World does not import pydantic (~90 ms)."""

    artifact_id: str
    artifact_ref: str
    run_id: str
    step_path: str
    name: str
    content_type: str
    encoding: str
    sha256: str
    size_bytes: int
    created_at: str

    @classmethod
    def model_validate(cls, doc: Any) -> "ArtifactManifest":
        """From the stored JSON (camelCase; snake_case accepted); ValueError naming the
        first field that is missing or of the wrong type."""
        if not isinstance(doc, dict):
            raise ValueError(f"a manifest is a JSON object, not {type(doc).__name__}")
        values = []
        for attr, key, kind in MANIFEST_FIELDS:
            value = doc.get(key, doc.get(attr))
            if value is None:
                raise ValueError(f"{key}: field required")
            if kind is int and isinstance(value, str) and value.isdigit():
                value = int(value)
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise ValueError(f"{key}: expected {kind.__name__}, got {type(value).__name__}")
            values.append(value)
        return cls(*values)

    def to_json_dict(self) -> dict[str, Any]:
        return {key: getattr(self, attr) for attr, key, _ in MANIFEST_FIELDS}

    def model_dump(self, mode: str = "json", by_alias: bool = False) -> dict[str, Any]:
        if by_alias:
            return self.to_json_dict()
        return {attr: getattr(self, attr) for attr, _, _ in MANIFEST_FIELDS}
