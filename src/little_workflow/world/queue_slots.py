"""Slots: named places within a limit (a queue's `concurrency`, a key's
`per_key_concurrency`), each held by at most one holder across every process and host.

The protocol, for slot `name` of a World:

1. In this process, a slot is held at most once (the same table as run locks, keyed
   by name, so a slot never shares a name with a run).
2. Across processes it is the World's slot lock backend: a kernel lock (`flock`) on the
   local disk — local_world and virtual worlds on local files — dropped by the kernel
   when its holder dies; a fenced lease on an object store, which comes back when it
   lapses and never before; nothing more where the storage is one process (memory).
   Never a pid check.
3. Taking is one try, never a wait: `take_slot` answers None when another holder has it.
4. A slot held by a run's executor fences that run as its run lease does: where the
   backend can tell a lease was lost (`check`), every append of the run checks the slot
   too (`Slot.fence`), so an executor that lost its slot stops at its next record.
5. `release()` gives it back (idempotent); a process that dies gives it back by dying.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, Callable

from ..errors import RunLockedError
from .shared_state import StorageState


class Slot:
    """A held slot. `release()` from any thread; `fence(run_id)` makes the run's appends
    check it."""

    def __init__(self, state: StorageState, backend: Any, name: str, token: str,
                 backend_token: str | None):
        self.name = name
        self._state = state
        self._backend = backend
        self._token = token
        self._backend_token = backend_token
        self._released = False
        self._guard = threading.Lock()
        self._unfence: Callable[[], None] | None = None

    def check(self) -> None:
        """Raise `LeaseLostError` where the backend can tell the slot's lease is lost."""
        check = getattr(self._backend, "check", None)
        if check is not None and self._backend_token is not None:
            check(self.name, self._backend_token)

    def fence(self, run_id: str) -> None:
        """Until release, every append of `run_id` in this process checks this slot too
        (after the run lock's own check). Call while holding the run's lock."""
        if getattr(self._backend, "check", None) is None or self._backend_token is None:
            return
        fences = self._state.fences
        previous = fences.get(run_id)

        def both() -> None:
            if previous is not None:
                previous()
            self.check()

        fences[run_id] = both

        def unfence() -> None:
            if fences.get(run_id) is both:
                if previous is not None:
                    fences[run_id] = previous
                else:
                    del fences[run_id]

        self._unfence = unfence

    def release(self) -> None:
        with self._guard:
            if self._released:
                return
            self._released = True
        try:
            if self._unfence is not None:
                self._unfence()
            if self._backend is not None and self._backend_token is not None:
                self._backend.release(self.name, self._backend_token)
        finally:
            with self._state.lock:
                if self._state.active_runs.get(self.name) == self._token:
                    del self._state.active_runs[self.name]

    def __repr__(self) -> str:
        return f"<Slot {self.name}{' released' if self._released else ''}>"


def take_slot(state: StorageState, backend: Any, name: str, label: str) -> Slot | None:
    """Hold slot `name` if no one does (here or in another process): a `Slot`, or None.
    `label` is what the backend writes for people reading its lock (the queue's name)."""
    token = uuid.uuid4().hex
    with state.lock:
        if name in state.active_runs:
            return None
        state.active_runs[name] = token
    try:
        backend_token = backend.acquire(name, label) if backend is not None else None
    except RunLockedError:
        backend_token = None
        taken = False
    except BaseException:
        with state.lock:
            state.active_runs.pop(name, None)
        raise
    else:
        taken = True
    if not taken:
        with state.lock:
            if state.active_runs.get(name) == token:
                del state.active_runs[name]
        return None
    return Slot(state, backend, name, token, backend_token)
