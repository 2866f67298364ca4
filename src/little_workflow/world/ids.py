"""Canonical JSON, hashing and every derived identifier — in one place."""

from __future__ import annotations

import functools
import hashlib
import json
import re
import uuid
from datetime import datetime, timezone
from typing import Any

from ..errors import WorldPathError

RUN_ID_RE = re.compile(r"run_[A-Za-z0-9_-]{1,80}")
STEP_SEGMENT_RE = re.compile(r"[A-Za-z0-9_.-]+")
ARTIFACT_REF_PREFIX = "artifact://"
ARTIFACT_ID_RE = re.compile(r"art_[0-9a-f]{16}")


#: json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False), without
#: building an encoder on every call (it runs on every append).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(obj: Any) -> str:
    return _CANONICAL.encode(obj)


def canonical_bytes(obj: Any) -> bytes:
    return canonical_json(obj).encode("utf-8")


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def content_hash(obj: Any) -> str:
    """`sha256:<hex>` of an object's canonical JSON."""
    return "sha256:" + sha256_hex(canonical_bytes(obj))


def event_id(run_id: str, sequence: int) -> str:
    if RUN_ID_RE.fullmatch(run_id):
        # The same bytes as canonical_json({"runId": …, "sequence": …}) for a valid run id
        # (nothing in it needs escaping), without an encoder call on every append.
        body = f'{{"runId":"{run_id}","sequence":{int(sequence)}}}'
    else:
        body = canonical_json({"runId": run_id, "sequence": sequence})
    return "evt_" + sha256_hex(body)[:32]


@functools.lru_cache(maxsize=256)
def json_string(value: str) -> str:
    """JSON encoding of a short, often repeated string (event types)."""
    return json.dumps(value, ensure_ascii=False)


def request_digest(type_: str, payload: Any) -> str:
    return content_hash({"type": type_, "payload": payload})


def artifact_id(
    run_id: str, step_path: str, name: str, content_type: str, encoding: str, payload_hash: str
) -> str:
    return "art_" + sha256_hex(
        canonical_json(
            {
                "runId": run_id,
                "stepPath": step_path,
                "name": name,
                "contentType": content_type,
                "encoding": encoding,
                "payloadHash": payload_hash,
            }
        )
    )[:16]


def artifact_ref(artifact_id_: str) -> str:
    return ARTIFACT_REF_PREFIX + artifact_id_


def run_lock_name(run_id: str) -> str:
    return sha256_hex(run_id)


def outer_loop_lock_name(outer_loop_id: str) -> str:
    return sha256_hex(canonical_json({"outerLoopId": outer_loop_id}))


def workflow_version_id(definition_hash: str) -> str:
    return "wv_" + definition_hash.removeprefix("sha256:")[:16]


def new_run_id() -> str:
    return "run_" + uuid.uuid4().hex


def utc_now_iso(now: float | None = None) -> str:
    """ISO-8601 UTC of `now` (epoch seconds, from a World's clock) or of the system time."""
    moment = datetime.now(timezone.utc) if now is None else datetime.fromtimestamp(now, timezone.utc)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def validate_run_id(run_id: Any) -> str:
    if not isinstance(run_id, str) or RUN_ID_RE.fullmatch(run_id) is None:
        raise WorldPathError(
            f"invalid run id {run_id!r}: run ids match run_[A-Za-z0-9_-]{{1,80}}"
        )
    return run_id


def validate_step_path(step_path: Any) -> str:
    if not isinstance(step_path, str) or not step_path:
        raise WorldPathError(f"invalid step path {step_path!r}: it must be a non-empty string")
    for segment in step_path.split("/"):
        # '.' and '..' match the segment alphabet but would walk out of a scratch folder.
        if STEP_SEGMENT_RE.fullmatch(segment) is None or set(segment) == {"."}:
            raise WorldPathError(
                f"invalid step path {step_path!r}: segments are [A-Za-z0-9_.-]+ "
                "(not '.' or '..') joined by '/'"
            )
    return step_path


_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,200}")


def validate_name(kind: str, name: Any) -> str:
    """Names that become one path segment (outer-loop ids, artifact names, plan names)."""
    if not isinstance(name, str) or _NAME_RE.fullmatch(name) is None or set(name) == {"."}:
        raise WorldPathError(f"invalid {kind} {name!r}: use [A-Za-z0-9_.-], not '.' or '..'")
    return name


def find_artifact_refs(value: Any, found: set[str] | None = None) -> set[str]:
    """Every `artifact://…` string anywhere in a JSON value (keys included)."""
    if found is None:
        found = set()
    if isinstance(value, str):
        if value.startswith(ARTIFACT_REF_PREFIX):
            found.add(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str) and k.startswith(ARTIFACT_REF_PREFIX):
                found.add(k)
            if not isinstance(v, (int, float, bool)) and v is not None:
                find_artifact_refs(v, found)
    elif isinstance(value, (list, tuple)):
        for v in value:
            if not isinstance(v, (int, float, bool)) and v is not None:
                find_artifact_refs(v, found)
    return found
