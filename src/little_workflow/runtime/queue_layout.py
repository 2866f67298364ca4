"""Where a queue's things are (DESIGN §17): its documents in the World, the names of
its slots, and the `queue` fields of a queued run's `run.created`. Pure names: imported
by the runner (a queued run is refused outside a worker), the queue API and the worker's
picking alike."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from ..world.clock import from_iso

QUEUES_DIR = "queues"
QUEUE_NAME_RE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}")


def check_queue_name(name: Any) -> str:
    if not isinstance(name, str) or not QUEUE_NAME_RE.fullmatch(name):
        raise ValueError(f"invalid queue name {name!r}: 1-100 of [A-Za-z0-9_.-], not starting "
                         "with a dot")
    return name


def queue_dir(name: str) -> str:
    return f"{QUEUES_DIR}/{name}"


def hashed(*parts: str | None) -> str:
    """A file-name-safe digest of a key, a dedup id, or a queue's name."""
    return hashlib.sha256("\0".join("" if p is None else p for p in parts).encode()).hexdigest()[:32]


def slot_name(queue: str, index: int) -> str:
    """The World slot of a queue's `index`-th place (`concurrency`)."""
    return f"queue-{hashed(queue)[:24]}-{index}"


def key_slot_name(queue: str, key: str | None, index: int) -> str:
    """The World slot of a key's `index`-th place (`per_key_concurrency`)."""
    return f"queue-{hashed(queue, key)[:24]}-k{index}"


def queue_fields(created: dict[str, Any] | None) -> dict[str, Any] | None:
    """The `queue` part of a run's `run.created`, or None for a run not on a queue."""
    fields = (created or {}).get("queue")
    return fields if isinstance(fields, dict) and isinstance(fields.get("name"), str) else None


def not_before(fields: dict[str, Any]) -> float | None:
    """When a queued run may start at the earliest (debounce), epoch seconds, or None."""
    raw = fields.get("notBefore")
    return from_iso(raw) if isinstance(raw, str) else None
