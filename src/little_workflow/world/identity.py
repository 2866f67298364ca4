"""Identity of filesystem objects, for keys of in-process state.

fsspec's `__eq__`/`__hash__` compare cache tokens (two private MemoryFileSystems can
compare equal), and `id()` is reused once an object is gone. So each object gets a token
of its own, stored on the object: keys built from it never outlive it, and nothing here
keeps a filesystem alive.
"""

from __future__ import annotations

import threading
import uuid
import weakref
from typing import Any

_TOKEN_ATTR = "_little_workflow_token"
_guard = threading.Lock()
# For objects that refuse new attributes (slots): id -> (weak reference, token), the entry
# dropped with the object, so a reused id never finds an old token.
_fallback_by_id: dict[int, tuple["weakref.ref[Any]", str]] = {}


def object_token(obj: Any) -> str:
    """A token unique to `obj` for as long as it lives."""
    token = getattr(obj, "__dict__", {}).get(_TOKEN_ATTR)
    if token is not None:
        return str(token)
    with _guard:
        d = getattr(obj, "__dict__", None)
        if d is not None:
            return str(d.setdefault(_TOKEN_ATTR, uuid.uuid4().hex))
        held = _fallback_by_id.get(id(obj))
        if held is not None and held[0]() is obj:
            return held[1]
        token = uuid.uuid4().hex
        key = id(obj)
        ref = weakref.ref(obj, lambda _r: _fallback_by_id.pop(key, None))
        _fallback_by_id[key] = (ref, token)
        return token


def object_lock(obj: Any, name: str) -> threading.Lock:
    """A lock that belongs to `obj` (shared by everything holding that object)."""
    attr = f"_little_workflow_lock_{name}"
    d = getattr(obj, "__dict__", None)
    if d is None:
        raise TypeError(f"{type(obj).__name__} objects cannot carry a lock")
    lock = d.get(attr)
    if lock is None:
        with _guard:
            lock = d.setdefault(attr, threading.Lock())
    return lock  # type: ignore[no-any-return]
