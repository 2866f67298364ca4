"""When a worker may try again a run it could not execute.

A run can be due and still not executable here: another process holds its lock, its
input no longer validates against the workflow this worker knows, its storage answered
with an error. Trying again at once spins (thousands of attempts a second, each one a
few storage requests), so each such run is tried again after a capped exponential
backoff with jitter — 0.5 s, 1 s, 2 s, 4 s, 8 s, then every 10 s, each ±20 % so that
workers that failed together do not retry together. A run held by another process is
capped lower, at 2 s: a held lock comes free on its own (its holder finishes, dies, or
its lease runs out), and workers that share runs while some of them die (the multi-host
torture: a kill a second) must take a dead holder's runs over within a lease or two, not
10 s later — one attempt per 2 s is still a few requests, not thousands. A held run
whose holder let it go (its log shows it waiting now) is tried at once: the holder
suspended it and released the lock.

A run this worker's code may not run — pinned to another version, or its log diverges
from what the code asks for — is left alone for good: the same code gives the
same answer however often it tries. A worker with other code (or this one restarted with
fixed code) runs it.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from ..errors import LittleWorkflowError

#: The first wait before a run that could not run is tried again (seconds).
RETRY_FIRST_SECONDS = 0.5
#: The longest wait between two tries of one run (seconds).
RETRY_CAP_SECONDS = 10.0
#: The longest wait between two tries of a run another process holds (seconds).
RETRY_HELD_CAP_SECONDS = 2.0
#: Each wait is its backoff times a random factor in [1 - RETRY_JITTER, 1 + RETRY_JITTER].
RETRY_JITTER = 0.2

LOCKED = "RunLockedError"


@dataclass
class Blocked:
    kind: str  # the error's type name: a new kind is a new state, reported again
    failures: int
    retry_at: float  # time.monotonic()
    last_sequence: int  # the run's log when it was found blocked


def retry_delay(failures: int, kind: str = "") -> float:
    """Seconds to wait after the `failures`-th failure in a row (1, 2, …) of `kind`."""
    cap = RETRY_HELD_CAP_SECONDS if kind == LOCKED else RETRY_CAP_SECONDS
    backoff = min(cap, RETRY_FIRST_SECONDS * 2 ** min(failures - 1, 32))
    return backoff * random.uniform(1 - RETRY_JITTER, 1 + RETRY_JITTER)


class RetryBackoff:
    """The runs a worker could not execute, and when each may be tried again. Reports a
    run once when it becomes blocked (or blocked for another reason) and once when it
    runs again — not once per attempt."""

    def __init__(self, log: logging.Logger):
        self.log = log
        self._lock = threading.Lock()  # written from the pool's threads, read by the sweep
        self._blocked: dict[str, Blocked] = {}

    def failed(self, run_id: str, error: BaseException, last_sequence: int) -> None:
        kind = type(error).__name__
        with self._lock:
            before = self._blocked.get(run_id)
            failures = 1 if before is None else before.failures + 1
            delay = retry_delay(failures, kind)
            self._blocked[run_id] = Blocked(kind, failures, time.monotonic() + delay,
                                            last_sequence)
        if before is None or before.kind != kind:
            # Held by another worker is how many workers share runs: not a warning. A
            # failure that is not ours (a bug in a step's code path) keeps its traceback.
            level = logging.INFO if kind == LOCKED else logging.WARNING
            self.log.log(level, "run %s cannot run now (%s): %s; trying again after %.1f s, "
                         "backing off to every %g s", run_id, kind, error, delay,
                         RETRY_HELD_CAP_SECONDS if kind == LOCKED else RETRY_CAP_SECONDS,
                         exc_info=None if isinstance(error, LittleWorkflowError) else error)

    def refused(self, run_id: str, error: BaseException, last_sequence: int) -> None:
        """This worker's code may not run the run (another version; it diverges from the
        log): never tried again by this worker. Reported once, with the run id and the
        error on the log record (`lw_run_id`, `lw_refusal`) for whoever shows it."""
        kind = type(error).__name__
        with self._lock:
            before = self._blocked.get(run_id)
            self._blocked[run_id] = Blocked(kind, 1 if before is None else before.failures + 1,
                                            math.inf, last_sequence)
        if before is None or before.kind != kind:
            self.log.warning("run %s left alone: %s", run_id, error,
                             extra={"lw_run_id": run_id, "lw_refusal": error})

    def ran(self, run_id: str) -> None:
        """The run was executed (completed, waiting, failed or cancelled)."""
        with self._lock:
            before = self._blocked.pop(run_id, None)
        if before is not None:
            self.log.info("run %s runs again after %d failed attempt(s) (%s)", run_id,
                          before.failures, before.kind)

    def may_try(self, run_id: str, run_log: Any, *, skip_locked: bool = False) -> bool:
        """False while a blocked run's wait lasts — unless its holder let it go. With
        `skip_locked`, a held run whose log has not changed is not tried even then."""
        blocked = self._blocked.get(run_id)
        if blocked is None:
            return True
        if blocked.kind == LOCKED:
            changed = run_log.last_sequence != blocked.last_sequence
            if changed and run_log.status == "waiting":
                return True  # the holder suspended it: its lock is free
            if skip_locked and not changed:
                return False
        return time.monotonic() >= blocked.retry_at

    def try_locked_again(self) -> None:
        """Each run found held before may have been let go since: `may_try` says yes to
        it once (found held again, it is skipped as before)."""
        with self._lock:
            for run_id, b in self._blocked.items():
                if b.kind == LOCKED:
                    # -1: no log has that sequence, so the run reads as changed.
                    self._blocked[run_id] = replace(b, retry_at=0.0, last_sequence=-1)

    def next_retry_in(self) -> float | None:
        """Seconds until the next blocked run may be tried again (None: none ahead). A
        wait already over counts no more: the sweeps look at that run (it may be in
        flight, or not due), and counting it would wake the worker again at once."""
        now = time.monotonic()
        with self._lock:
            ahead = [b.retry_at for b in self._blocked.values()
                     if now < b.retry_at < math.inf]
        return min(ahead) - now if ahead else None

    def forget(self, keep: set[str]) -> None:
        with self._lock:
            for run_id in [r for r in self._blocked if r not in keep]:
                del self._blocked[run_id]

    def __contains__(self, run_id: str) -> bool:
        return run_id in self._blocked
