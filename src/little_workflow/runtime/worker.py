"""`Worker`: picks runs up by itself — starts created runs, continues waiting runs when
their timer is due or their event has arrived, resumes runs a dead process left behind.

Each run is executed with `run_workflow(..., suspend=True)` in a thread of the worker's
pool, so a run that must wait gives its thread and lock back. A sweep reads the index of
unfinished runs (`active/`, see `active_index`) and then only those runs. The run lock is what keeps
any number of workers (threads or processes) from running one run twice at once: a run
whose lock is held (`RunLockedError`), or that cannot run here for another reason (its
input no longer validates, its storage failed), is tried again after a capped
exponential backoff (see retry.py), reported once when it becomes blocked and once when
it runs again. A run this worker's code may not run (pinned to another version, or its log
diverges from the code: changed code never re-runs history) is left alone and reported once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import signal
import threading
import time
from typing import Any, Iterable

from ..errors import (
    LittleWorkflowError,
    ReplayDivergenceError,
    RunCancelledError,
    RunLockedError,
    WorkflowFailedError,
    WorkflowVersionError,
)
from ..world.clock import from_iso
from ..world.protocol import WorldLike
from .active_index import ORPHAN_GRACE_SECONDS, active_run_ids, mark_active, mark_finished
from .deadlines import cancel_if_past, deadline_of
from .loops import own
from .queue_layout import queue_fields
from .queue_picking import Admission, QueuePicker
from .retry import RetryBackoff
from .schedules import ScheduleTicker
from .signals import pick_signal
from .state import TERMINAL_STATUSES, RunLog
from .values import stored_value
from .waiting import WAIT_POLL_SECONDS, listen, unlisten
from .workflow import Workflow

log = logging.getLogger("little_workflow.worker")

#: A worker looks at every run at least this often (seconds).
SWEEP_SECONDS = 1.0
#: Between sweeps, runs known to wait for an event have their logs read this often
#: (seconds), for at most FAST_POLL_RUNS runs: an event sent from another process is
#: picked up within about WAIT_POLL_SECONDS rather than a whole sweep interval.
FAST_POLL_RUNS = 256
#: After a sweep that took d seconds, the next one waits until SWEEP_GAP * d have passed.
SWEEP_GAP = 4.0
#: The shortest wait for a queue's place or window (seconds): a window that frees "now"
#: by one reading of the clock and not yet by the next is not tried in a busy loop.
MIN_RETRY_SECONDS = 0.001


class Worker:
    """`Worker(world, workflows=[...], concurrency=8)`; `.run()` until `.stop()` (or
    SIGTERM/SIGINT when run in the main thread), `.run_until_idle()` returns when
    nothing is due. Runs of workflows it does not know are left alone."""

    def __init__(self, world: WorldLike, workflows: Iterable[Workflow], concurrency: int = 8,
                 sweep_seconds: float = SWEEP_SECONDS):
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.world = world
        self.workflows: dict[str, Workflow] = {}
        for wf in workflows:
            if not isinstance(wf, Workflow):
                raise TypeError(f"{wf!r} is not a workflow")
            self.workflows[wf.id] = wf
        self.concurrency = concurrency
        self.sweep_seconds = min(sweep_seconds, SWEEP_SECONDS)
        self._pool = concurrent.futures.ThreadPoolExecutor(concurrency, "little-worker")
        self._in_flight: dict[str, concurrent.futures.Future[Any]] = {}
        self._logs: dict[str, RunLog] = {}
        self._finished: set[str] = set()
        self._backoff = RetryBackoff(log)  # runs that could not run, and when to try again
        self._no_log_since: dict[str, float] = {}  # indexed run id with no log -> first seen
        self._reread: set[str] = set()  # runs whose cached log must be read whole again
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._last_sweep = (0.0, 0.0)  # (duration, monotonic end) of the last sweep
        self._thread_state = threading.local()  # each pool thread's event loop
        self._loops: list[asyncio.AbstractEventLoop] = []
        self.runs_executed = 0
        # Queued runs (DESIGN §17): started within their queues' limits, a pass at a time,
        # from the sweep and whenever a thread frees (queue_picking.py).
        self._queues = QueuePicker(world, self._backoff, self._is_due)
        self._admit_lock = threading.Lock()
        self._admit_again = False  # a pass is wanted after the one running (see _admit_queued)
        self._schedules = ScheduleTicker(world, self.workflows)

    # ---- what is due ----------------------------------------------------------------

    def _log(self, run_id: str) -> RunLog:
        cached = self._logs.get(run_id)
        if run_id in self._reread:
            self._reread.discard(run_id)
            cached = None
        if cached is None:
            cached = self._logs[run_id] = RunLog(run_id=run_id)
        for e in self.world.list_events(run_id, after=cached.last_sequence):
            cached.apply(e)
        return cached

    def _is_due(self, run_log: RunLog, now: float) -> bool:
        if run_log.cancel_requested is not None or run_log.status in ("created", "running"):
            return True
        if run_log.status != "waiting":
            return False
        for path, w in run_log.open_waits.items():
            if w["kind"] == "sleep":
                if w.get("wakeAt") and from_iso(w["wakeAt"]) <= now:
                    return True
                continue
            rec = run_log.waits.get(path)
            if (rec is not None and rec.get("timedOutAt") is not None) or pick_signal(run_log, w["name"]) is not None:
                return True
            if w.get("deadline") and from_iso(w["deadline"]) <= now:
                return True
        return False

    def due_runs(self, *, skip_locked: bool = False) -> list[tuple[str, Workflow, RunLog]]:
        """The due runs among those the index names (`active/`): one listing, then only
        those runs' logs — the cost grows with unfinished runs, not with all runs."""
        due = []
        now = self.world.clock.now()
        self._tick_schedules(now)  # before the listing: a tick's new run is due in this sweep
        listed = active_run_ids(self.world)
        self._forget(set(listed))
        for run_id in listed:
            if run_id in self._finished or run_id in self._in_flight:
                continue
            try:
                run_log = self._log(run_id)
            except LittleWorkflowError as e:
                log.warning("skipping run %s: %s", run_id, e)
                continue
            if run_log.created is None:
                self._orphan(run_id)
                continue
            self._no_log_since.pop(run_id, None)
            if run_log.status in TERMINAL_STATUSES:
                # Its runner died between the terminal event and removing the entry.
                # Remembered as finished only while the entry stays: once it is gone,
                # the same id listed again is a new run (deleted and created again).
                self._logs.pop(run_id, None)
                if run_id not in self._finished and self.world.catalogue is not None:
                    # It may also have died before the run's summary caught up: settle it.
                    self.world.catalogue.settle(run_id)
                if not self._unindex(run_id):
                    self._finished.add(run_id)
                continue
            if self._enforce_deadline(run_id, run_log, now):
                continue  # cancelled, or its holder was asked to stop
            wf = self.workflows.get(str(run_log.created.get("workflowId")))
            if wf is None:
                continue
            if not self._backoff.may_try(run_id, run_log, skip_locked=skip_locked):
                continue
            if self._is_due(run_log, now):
                due.append((run_id, wf, run_log))
        return due

    def _tick_schedules(self, now: float) -> None:
        try:
            self._schedules.tick(now)
        except LittleWorkflowError as e:  # the storage failed: the next sweep tries again
            log.warning("could not read the schedules: %s", e)

    def _enforce_deadline(self, run_id: str, run_log: RunLog, now: float) -> bool:
        """A run nobody here executes whose deadline passed is cancelled (DESIGN §17),
        whatever its workflow: cancelling runs none of its code."""
        try:
            return cancel_if_past(self.world, run_id, run_log, now)
        except LittleWorkflowError as e:
            log.warning("could not cancel run %s past its deadline: %s", run_id, e)
            return False

    def _forget(self, listed: set[str]) -> None:
        """Drop what this worker remembers of runs the index no longer names."""
        self._reread.intersection_update(listed)
        for cache in (self._logs, self._no_log_since):
            for run_id in [r for r in cache if r not in listed]:
                del cache[run_id]
        self._backoff.forget(listed)
        self._finished &= listed

    def _unindex(self, run_id: str) -> bool:
        try:
            mark_finished(self.world, run_id)
        except LittleWorkflowError as e:
            log.warning("could not remove the index entry of run %s: %s", run_id, e)
            return False
        return True

    def _orphan(self, run_id: str) -> None:
        """An entry with no run log: its creator may be about to append `run.created`.
        Removed once this worker has seen it without a log for the grace period."""
        first = self._no_log_since.setdefault(run_id, time.monotonic())
        if time.monotonic() - first < ORPHAN_GRACE_SECONDS:
            return
        self._logs.pop(run_id, None)
        if self.world.list_events(run_id):
            return  # created meanwhile: a run like any other from the next sweep
        if not self._unindex(run_id):
            return
        self._no_log_since.pop(run_id, None)
        late = self.world.list_events(run_id)
        if late:  # created while we removed it: name it again
            payload = late[0].payload if isinstance(late[0].payload, dict) else {}
            mark_active(self.world, run_id, str(payload.get("workflowId")))

    # ---- executing --------------------------------------------------------------------

    def _execute_admitted(self, adm: Admission) -> None:
        """A queued run the picker admitted: executed under its lock and places, which are
        given back when it ends or suspends at a wait."""
        from .runner import arun_admitted

        loop = self._loop()
        seen = adm.log.last_sequence  # the run appends to adm.log as it goes
        try:
            try:
                input = stored_value(self.world, (adm.log.created or {}).get("input"))
                loop.run_until_complete(arun_admitted(adm.workflow, input, world=self.world,
                                                      run_id=adm.run_id, admission=adm))
                self.runs_executed += 1
                self._backoff.ran(adm.run_id)
            finally:
                adm.release()
        except (WorkflowFailedError, RunCancelledError) as e:
            self._backoff.ran(adm.run_id)
            log.info("run %s ended: %s", adm.run_id, e)
        except (WorkflowVersionError, ReplayDivergenceError) as e:
            self._backoff.refused(adm.run_id, e, seen)
        except LittleWorkflowError as e:
            self._backoff.failed(adm.run_id, e, seen)
            self._reread.add(adm.run_id)
        except Exception as e:
            self._backoff.failed(adm.run_id, e, seen)
        finally:
            _cancel_leftovers(loop)

    def _input(self, run_log: RunLog) -> Any:
        return stored_value(self.world, (run_log.created or {}).get("input"))

    def _loop(self) -> asyncio.AbstractEventLoop:
        # One event loop per pool thread, kept across runs: a fresh loop per run
        # (asyncio.run) also builds and joins a default executor thread every time.
        loop = getattr(self._thread_state, "loop", None)
        if loop is None:
            loop = self._thread_state.loop = own(asyncio.new_event_loop())
            self._loops.append(loop)
        return loop

    def _execute(self, run_id: str, wf: Workflow, input: Any, last_sequence: int) -> None:
        from .api import arun_workflow

        loop = self._loop()
        try:
            loop.run_until_complete(arun_workflow(wf, input, world=self.world, run_id=run_id,
                                                  suspend=True))
            self.runs_executed += 1
            self._backoff.ran(run_id)
        except (WorkflowFailedError, RunCancelledError) as e:
            self._backoff.ran(run_id)
            log.info("run %s ended: %s", run_id, e)  # failed or cancelled: in its log
        except (WorkflowVersionError, ReplayDivergenceError) as e:
            # This code may not run it, now or later: left to other code (changed code never
            # re-runs a run's history).
            self._backoff.refused(run_id, e, last_sequence)
        except LittleWorkflowError as e:
            # Not run (its lock is held, its input no longer validates, the storage
            # failed): still unfinished, tried again after a backoff.
            self._backoff.failed(run_id, e, last_sequence)
            if not isinstance(e, RunLockedError):
                # What this worker read of the run may be of a run since deleted and
                # created again under its id (its input no longer matches): read it
                # whole next time.
                self._reread.add(run_id)
        except Exception as e:
            self._backoff.failed(run_id, e, last_sequence)  # logged with its traceback
        finally:
            _cancel_leftovers(loop)

    def _paced_sweep(self, *, skip_locked: bool = False) -> int:
        """`sweep()`, but no sooner than SWEEP_GAP times the last sweep's reading time
        after it ended: a burst of wake-ups (runs started one by one in this process)
        cannot spend more than about 1/(SWEEP_GAP + 1) of the time sweeping. A small
        World's sweep takes well under a millisecond, so this delays nothing there. The
        pass that starts queued runs is not part of the pace (it starts runs, it does not
        read them again), and a queue's place or window that frees before the pace ends
        gets its pass then, from the runs the last sweep found."""
        admitted = 0
        while not self._stop.is_set():
            rest = self._last_sweep[1] + SWEEP_GAP * self._last_sweep[0] - time.monotonic()
            if rest <= 0:
                break
            retry = self._queues.retry_in()
            if retry is None or retry >= rest:
                self._stop.wait(rest)
                break
            self._stop.wait(max(retry, MIN_RETRY_SECONDS))
            admitted += self._admit_queued() or 0
        t = time.monotonic()
        started = self._start_due(skip_locked=skip_locked)
        now = time.monotonic()
        self._last_sweep = (now - t, now)
        return admitted + started + (self._admit_queued() or 0)

    def sweep(self, *, skip_locked: bool = False) -> int:
        """Start every due run (up to the pool's capacity queueing the rest; queued runs
        within their queues' limits, up to the pool's free threads); returns how many
        were started."""
        return self._start_due(skip_locked=skip_locked) + (self._admit_queued() or 0)

    def _start_due(self, *, skip_locked: bool = False) -> int:
        """The reading part of a sweep: hand every due run that is not queued to the pool
        and offer the queued ones to the picker; returns how many were handed over."""
        started = 0
        queued = []
        for run_id, wf, run_log in self.due_runs(skip_locked=skip_locked):
            if self._stop.is_set():
                break
            if queue_fields(run_log.created) is not None:
                queued.append((run_id, wf, run_log))
                continue
            fut = self._pool.submit(self._execute, run_id, wf, self._input(run_log),
                                    run_log.last_sequence)
            self._in_flight[run_id] = fut

            def finished(_future: Any, rid: str = run_id) -> None:
                self._done(rid)

            fut.add_done_callback(finished)
            started += 1
        with self._admit_lock:
            self._queues.offer(queued)
            self._queues.write_starts_due()
        return started

    def _admit_queued(self, *, defer: bool = False) -> int | None:
        """Passes over the queued runs (queue_picking.py): each admitted run goes to the
        pool with its lock and its queue's places held; returns how many. A pool thread
        that frees while another thread's pass runs (`defer`) does not wait for it: it
        leaves its turn to that thread, which makes one more pass when its own ends — the
        places freed meanwhile are taken in one batch, and no thread of the pool idles
        behind a pass (None: left to the running pass)."""
        self._admit_again = True
        if not self._admit_lock.acquire(blocking=not defer):
            return None
        admitted = passes = 0
        while True:
            try:
                self._admit_again = False
                submitted = self._admit_pass()
            finally:
                self._admit_lock.release()
            # Outside the lock: a run that already ended calls back at once, in this
            # thread, and its callback makes a pass of its own (the lock is not reentrant).
            for run_id, fut in submitted:
                fut.add_done_callback(functools.partial(self._future_done, run_id))
            admitted += len(submitted)
            passes += 1
            if not self._admit_again or not self._admit_lock.acquire(blocking=False):
                break
        if passes > 1 and not submitted:
            self._sweep_if_short()  # as the thread that left its turn would have
        return admitted

    def _admit_pass(self) -> list[tuple[str, concurrent.futures.Future[Any]]]:
        """One pass, under `_admit_lock`: the runs handed to the pool, with their futures."""
        submitted: list[tuple[str, concurrent.futures.Future[Any]]] = []
        if self._stop.is_set() or not self._queues.has_candidates():
            return submitted
        try:
            admitted = self._queues.admit(self.concurrency - len(self._in_flight),
                                          set(self._in_flight))
        except LittleWorkflowError as e:
            log.warning("could not start queued runs now: %s", e)
            return submitted
        for i, adm in enumerate(admitted):
            try:
                fut = self._pool.submit(self._execute_admitted, adm)
            except RuntimeError:  # the pool is shut down: give everything back
                for left in admitted[i:]:
                    left.release()
                break
            self._in_flight[adm.run_id] = fut
            submitted.append((adm.run_id, fut))
        return submitted

    def _future_done(self, run_id: str, _future: Any) -> None:
        self._done(run_id)

    def _done(self, run_id: str) -> None:
        self._in_flight.pop(run_id, None)
        # A thread is free: start the next queued run at once, from the candidates the last
        # sweep found, without a sweep. Only when that starts nothing is a sweep wanted.
        if self._admit_queued(defer=True) == 0:
            self._sweep_if_short()

    def _sweep_if_short(self) -> None:
        # Due runs already handed to the pool start as soon as a thread frees. Sweep again
        # (a sweep reads every unfinished run's new events) only once fewer runs are handed
        # over than there are threads, so a busy worker does not sweep per run.
        if len(self._in_flight) < self.concurrency:
            self._wake.set()

    def notify(self) -> None:
        """Something was appended in this process (a new run, an event): sweep now, or
        as soon as a thread is free (and at least every sweep interval)."""
        self._sweep_if_short()

    def run_until_idle(self) -> None:
        """Execute until nothing is due (and nothing runs); returns then."""
        self._backoff.try_locked_again()
        listen(self.world, None, self)
        try:
            while not self._stop.is_set():
                self._wake.clear()
                started = self._paced_sweep(skip_locked=True)
                waiting = self._queues.pending()  # a queued run waits for a place or the window
                if not started and not self._in_flight and not waiting:
                    self._write_starts()
                    return
                # A thread idles (see _done), something was appended, or a queue's place
                # or window may have freed.
                self._wait_for_wake(self._queues.retry_in() if waiting else None)
        finally:
            unlisten(self.world, None, self)

    def _wait_for_wake(self, seconds: float | None) -> None:
        """Until woken or `seconds` pass; on a clock moved by hand (FakeClock) also until
        it reaches the time a queue's full rate window frees, so that start is taken at
        that moment of the World's clock, not at the next look."""
        frees_at = self._queues.frees_at()
        wake_at = getattr(self.world.clock, "wake_at", None)
        cancel = wake_at(frees_at, self._wake) if frees_at is not None and wake_at is not None else None
        try:
            self._wake.wait(seconds)
        finally:
            if cancel is not None:
                cancel()

    def run(self) -> None:
        """Sweep until `.stop()` (or SIGTERM/SIGINT in the main thread). In-flight runs
        finish their current work or stop at a wait; a later worker resumes them."""
        restore = self._install_signal_handlers()
        listen(self.world, None, self)
        try:
            while not self._stop.is_set():
                self._wake.clear()
                self._paced_sweep()
                self._wait_between_sweeps()
        finally:
            unlisten(self.world, None, self)
            restore()
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._write_starts()
            self._close_loops()

    def _wait_between_sweeps(self) -> None:
        """Until the next sweep (at most `sweep_seconds`): return early when woken, when a
        known timer or deadline is due, or when a run known to wait for an event has one
        (its log is read every WAIT_POLL_SECONDS: one small read per waiting run, for at
        most FAST_POLL_RUNS of them; more are left to the sweep)."""
        deadline = time.monotonic() + self.sweep_seconds
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            waiters, next_due = self._known_waits()
            for retry_in in (self._backoff.next_retry_in(), self._queues.retry_in()):
                if retry_in is not None and (next_due is None or retry_in < next_due):
                    next_due = retry_in
            pause = min(left, WAIT_POLL_SECONDS)
            if next_due is not None and next_due < pause:
                self._wait_for_wake(next_due)
                return  # a timer or deadline is due: sweep
            if self._wake.wait(pause) or self._event_arrived(waiters):
                return

    def _known_waits(self) -> tuple[list[str], float | None]:
        """Runs waiting for an event (as of their last read), and seconds until the
        earliest known wake time, wait deadline or run deadline still ahead (None: none
        known; the sweep handles those already past)."""
        now = self.world.clock.now()
        waiters: list[str] = []
        next_tick = self._schedules.next_tick
        next_due: float | None = None if next_tick is None else max(0.0, next_tick - now)
        for run_id, run_log in list(self._logs.items()):
            if run_id in self._in_flight or run_log.status in TERMINAL_STATUSES:
                continue
            deadline = deadline_of(run_log)
            if deadline is not None and deadline > now:
                left = deadline - now
                next_due = left if next_due is None else min(next_due, left)
            if run_log.status != "waiting":
                continue
            for w in run_log.open_waits.values():
                due = w.get("wakeAt") if w["kind"] == "sleep" else w.get("deadline")
                left = from_iso(due) - now if due else 0.0
                if left > 0:
                    next_due = left if next_due is None else min(next_due, left)
                if w["kind"] != "sleep" and len(waiters) < FAST_POLL_RUNS:
                    waiters.append(run_id)
        return waiters, next_due

    def _event_arrived(self, run_ids: list[str]) -> bool:
        now = self.world.clock.now()
        for run_id in run_ids:
            try:
                run_log = self._log(run_id)
                if not self._backoff.may_try(run_id, run_log, skip_locked=True):
                    continue  # another worker runs it, or it waits for its next try
                if self._is_due(run_log, now):
                    return True
            except LittleWorkflowError:
                continue
        return False

    def _write_starts(self) -> None:
        with self._admit_lock:
            self._queues.write_starts()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def close(self) -> None:
        self.stop()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._write_starts()
        self._close_loops()

    def _close_loops(self) -> None:
        for loop in self._loops:
            try:
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                loop.close()
        self._loops.clear()

    def _install_signal_handlers(self) -> Any:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        for s in previous:
            signal.signal(s, lambda *_: self.stop())

        def restore() -> None:
            for s, handler in previous.items():
                signal.signal(s, handler)

        return restore


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """What asyncio.run does at the end of a run: cancel tasks the run left behind."""
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in tasks:
        t.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
