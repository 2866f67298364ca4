"""Following a run's log while this process runs it.

Other writers append to a running run's log: `send_event` (`signal.received`) and
`cancel_run` (`run.cancel_requested`), from this process or another one, and a holder
that lost its lease may still get a write through. A `RunWatch` folds what they wrote
into the run's in-memory log (after the last event folded, in log order) and wakes
whoever waits on it. In this process the writer notifies the watch directly (a wake-up
within milliseconds); another process's writes are found by reading the log at least
every `POLL_SECONDS` while the run is blocked and at step boundaries — and whenever one
of the run's own appends lands past the next sequence (`RunContext._fold_own`).

A run with a deadline (DESIGN §17, deadlines.py) is watched for it too: a step boundary
past it, a poll past it, and a sleep or wait that wakes at it (they sleep until the
earlier of their own time and the deadline) ask for the run's cancellation there
(`on_deadline`) and stop the run as a cancel request does.

Readers outside the run (a `RunHandle` waiting for the result, a stream follower) are
woken the same way by `announce`, on a separate list (`observe`), so what wakes them
never costs the run or the workers a read.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable

from ..errors import LittleWorkflowError, RunCancelledError
from ..world.models import Event
from ..world.protocol import WorldLike
from .loops import may_block_loop
from .state import TERMINAL_STATUSES, RunLog

#: How often a blocked run (or a step boundary) looks for other processes' writes.
POLL_SECONDS = 1.0
#: How often a run blocked in a wait re-reads its log (another process may send).
WAIT_POLL_SECONDS = 0.25


class RunSuspended(BaseException):
    """Raised inside a run started with `suspend=True` when it must wait: the run stops
    here, its lock is released, and `run_workflow` returns `status="waiting"`.
    A BaseException so that `except Exception` in workflow code cannot swallow it."""

    def __init__(self, run_id: str, waiting: dict[str, Any]):
        self.run_id, self.waiting = run_id, waiting
        super().__init__(f"run {run_id} is waiting: {waiting}")


_registry: dict[tuple[int, str | None], set[Any]] = {}
_registry_guard = threading.Lock()


def _key(world: WorldLike, run_id: str | None) -> tuple[int, str | None]:
    # Worlds over one storage in this process share one key: a waiter on one hears the
    # appends made through another.
    return (world.storage_key, run_id)


def listen(world: WorldLike, run_id: str | None, listener: Any) -> None:
    """`listener.notify()` is called (from any thread) when something is appended to
    `run_id` by send_event/cancel_run in this process; `run_id=None` hears every run."""
    with _registry_guard:
        _registry.setdefault(_key(world, run_id), set()).add(listener)


def unlisten(world: WorldLike, run_id: str | None, listener: Any) -> None:
    with _registry_guard:
        listeners = _registry.get(_key(world, run_id))
        if listeners is not None:
            listeners.discard(listener)
            if not listeners:
                del _registry[_key(world, run_id)]


def notify_run(world: WorldLike, run_id: str) -> None:
    with _registry_guard:
        listeners = list(_registry.get(_key(world, run_id), ())) + list(
            _registry.get(_key(world, None), ()))
    for listener in listeners:
        listener.notify()
    announce(world, run_id)


# ---- readers outside the run: handles waiting for a result, stream followers ------------
#
# Kept apart from the listeners above: a stream write wakes its readers only, never the
# run's own watch (which would re-read the log) nor every worker (which would sweep).

_observers: dict[tuple[int, str | None], set[Any]] = {}


def observe(world: WorldLike, run_id: str, observer: Any) -> None:
    """`observer.notify()` is called (from any thread) when this process appends to
    `run_id` something a reader outside the run waits for: a stream record, the run's
    end, a signal, a cancel request, a new run."""
    with _registry_guard:
        _observers.setdefault(_key(world, run_id), set()).add(observer)


def unobserve(world: WorldLike, run_id: str, observer: Any) -> None:
    with _registry_guard:
        observers = _observers.get(_key(world, run_id))
        if observers is not None:
            observers.discard(observer)
            if not observers:
                del _observers[_key(world, run_id)]


def announce(world: WorldLike, run_id: str) -> None:
    """Wake the observers of `run_id` in this process (cheap when there are none)."""
    if not _observers:
        return
    with _registry_guard:
        observers = list(_observers.get(_key(world, run_id), ()))
    for observer in observers:
        observer.notify()


class RunWatch:
    """Keeps a running run's log up to date with what other writers append. With a
    `deadline` (epoch seconds on the World's clock), `on_deadline()` is called once it is
    reached (it asks for the run's cancellation), and the run stops as on a cancel."""

    def __init__(self, ctx: Any, *, deadline: float | None = None,
                 on_deadline: Callable[[], Any] | None = None):
        self.ctx = ctx
        self.deadline = deadline if on_deadline is not None else None
        self._on_deadline = on_deadline
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self.changed = asyncio.Event()
        self.cancel_issued = False  # task.cancel() was called by this watch
        self._notified = threading.Event()
        self._last_poll = time.monotonic()
        self._stopped = False
        self._poll_handle: asyncio.TimerHandle | None = None

    def start(self) -> "RunWatch":
        listen(self.ctx.world, self.ctx.run_id, self)
        self._poll_handle = self.loop.call_later(POLL_SECONDS, self._poll)
        return self

    def stop(self) -> None:
        self._stopped = True
        unlisten(self.ctx.world, self.ctx.run_id, self)
        if self._poll_handle is not None:
            self._poll_handle.cancel()

    @property
    def cancel_requested(self) -> bool:
        return self.ctx.log.cancel_requested is not None

    # ---- called from any thread ---------------------------------------------------

    def notify(self) -> None:
        self._notified.set()
        try:
            self.loop.call_soon_threadsafe(self._on_loop_refresh)
        except RuntimeError:  # the loop is closed: the run is over
            pass

    # ---- on the run's event loop ----------------------------------------------------

    def _poll(self) -> None:
        if self._stopped:
            return
        self._on_loop_refresh()
        self._poll_handle = self.loop.call_later(POLL_SECONDS, self._poll)

    def _on_loop_refresh(self) -> None:
        if self._stopped:
            return
        self.refresh()
        self.check_deadline()
        stop = self.cancel_requested or self.ctx.superseded is not None
        if stop and not self.cancel_issued and self.task is not None:
            # Interrupts whatever the run awaits: a sleep, a wait, async steps in flight.
            self.cancel_issued = True
            self.task.cancel()

    def refresh(self) -> list[Event]:
        """Read what was appended after the last event folded and fold it into the run's
        log. Returns those events."""
        self._notified.clear()
        self._last_poll = time.monotonic()
        events = self.ctx.fold_new_events()
        if events:
            self.changed.set()
        return events

    def wake(self) -> None:
        """Others' events were folded in by one of the run's appends (any thread): wake
        whoever waits on them."""
        try:
            self.loop.call_soon_threadsafe(self.changed.set)
        except RuntimeError:  # the loop is closed: the run is over
            pass

    def at_boundary(self) -> None:
        """Before a step runs: a cancel request seen (or found by a poll due now) stops
        the run here. Works even when the workflow never yields to the event loop."""
        if self._notified.is_set() or time.monotonic() - self._last_poll >= POLL_SECONDS:
            self.refresh()
        if self.ctx.superseded is not None:
            self.ctx.check_fence()  # another execution started after this one: stop here
        self.check_deadline()
        if self.cancel_requested:
            raise asyncio.CancelledError()

    def deadline_reached(self) -> bool:
        return self.deadline is not None and self.ctx.world.clock.now() >= self.deadline

    def check_deadline(self) -> None:
        """Past the deadline with no cancel request yet: ask for one (`on_deadline`)."""
        if self._on_deadline is not None and not self.cancel_requested \
                and self.deadline_reached():
            self._on_deadline()

    def stop_if_due(self) -> None:
        """After a sleep or wait woke: stop here (CancelledError) when the deadline is
        reached or a cancel request came."""
        self.check_deadline()
        if self.cancel_requested:
            raise asyncio.CancelledError()

    def until(self, when: float | None) -> float | None:
        """When a sleep or wait until `when` must wake: then, or at the deadline if sooner."""
        if self.deadline is None:
            return when
        return self.deadline if when is None else min(when, self.deadline)

    async def wait_changed(self, until: float | None, clock: Any) -> None:
        """Block until other writers append something, the clock reaches `until` (or the
        run's deadline), or a poll interval passes (then re-read the log: another process
        may have written)."""
        until = self.until(until)
        waiters: list[asyncio.Task[Any]] = [asyncio.ensure_future(self.changed.wait())]
        if until is not None:
            waiters.append(asyncio.ensure_future(clock.sleep_until(until)))
        try:
            done, _ = await asyncio.wait(waiters, timeout=WAIT_POLL_SECONDS,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
        if not done:
            self._on_loop_refresh()


# ---- cancellation seen by the run's own runner ------------------------------------------

def requested_reason(log: Any) -> str | None:
    reason = (log.cancel_requested or {}).get("reason")
    return reason if isinstance(reason, str) else None


def request_sub_run_cancels(world: WorldLike, log: Any, reason: str) -> None:
    """Ask every sub-run `log` started and did not see finish to cancel
    (`run.cancel_requested`; whoever executes it next ends it cancelled). Idempotent:
    a sub-run finished or already asked is left alone."""
    for sub in list(log.sub_runs.values()):
        sub_id = sub.get("subRunId")
        if sub.get("status") == "succeeded" or not isinstance(sub_id, str):
            continue
        try:
            sub_log = RunLog.fold(sub_id, world.list_events(sub_id))
            if sub_log.created is None or sub_log.status in TERMINAL_STATUSES \
                    or sub_log.cancel_requested is not None:
                continue
            world.append_event(sub_id, "run.cancel_requested", {"reason": reason})
        except LittleWorkflowError:
            continue  # finished meanwhile, or deleted: nothing left to cancel
        notify_run(world, sub_id)


def cancel_if_parent_cancelled(ctx: Any) -> None:
    """A sub-run whose parent was asked to cancel asks for its own cancellation before it
    runs a step. The parent's canceller asks every sub-run it finds; one created after
    that look (by a parent executor that lost its lease while stopped, then woke and went
    on) is caught here: it wrote `run.created` before reading its parent's log, so the
    canceller's look or this one sees the other. Only a sub-run its parent reserved: a
    fork of one copies `parentRunId` but is nobody's sub-run."""
    parent = (ctx.log.created or {}).get("parentRunId")
    if not isinstance(parent, str) or ctx.log.cancel_requested is not None \
            or ctx.log.status in TERMINAL_STATUSES:
        return
    # Called by its parent in this process: only what the parent had not read yet (it
    # reserved this run there, and saw no cancellation).
    parent_log = RunLog.fold(parent, ctx.world.list_events(parent, after=ctx.parent_seen))
    if parent_log.cancel_requested is None and parent_log.status != "cancelled":
        return
    if not ctx.parent_seen \
            and all(sub.get("subRunId") != ctx.run_id for sub in parent_log.sub_runs.values()):
        return  # not a sub-run its parent reserved: a fork of one (it copies parentRunId)
    why = requested_reason(parent_log)
    ctx.world.append_event(ctx.run_id, "run.cancel_requested", {
        "reason": f"parent run {parent} was cancelled" + (f": {why}" if why else "")})
    ctx.fold_new_events()


async def end_cancelled(ctx: Any) -> None:
    """Append `run.cancelled` — after asking the run's unfinished sub-runs to cancel, so
    that a process killed in between leaves a run whose next executor asks again, never
    a cancelled run with a sub-run nobody will stop."""
    reason = requested_reason(ctx.log)
    world = ctx.world
    if ctx.log.sub_runs:
        why = f"parent run {ctx.run_id} was cancelled" + (f": {reason}" if reason else "")
        if world.blocking and not may_block_loop():
            await asyncio.to_thread(request_sub_run_cancels, world, ctx.log, why)
        else:
            request_sub_run_cancels(world, ctx.log, why)
    await ctx.append("run.cancelled", {"reason": reason})


async def cancelled_on_entry(ctx: Any) -> None:
    """A cancelled run never runs again; a requested cancellation ends it here."""
    log = ctx.log
    if log.status == "cancelled":
        raise RunCancelledError(ctx.run_id, requested_reason(log))
    if log.cancel_requested is not None:
        await end_cancelled(ctx)
        raise RunCancelledError(ctx.run_id, requested_reason(log))


def stop_if_superseded(ctx: Any) -> None:
    """The run stopped (CancelledError): if the watch stopped it because another execution
    started after this one, that is the answer — LeaseLostError, nothing appended."""
    watch = ctx.watch
    if ctx.superseded is None:
        return
    if watch is not None and watch.cancel_issued and watch.task is not None:
        watch.task.uncancel()  # this cancellation was ours
        watch.cancel_issued = False
    ctx.check_fence()


async def finish_if_cancelled(ctx: Any) -> None:
    """The run stopped (CancelledError or an error): if `cancel_run` asked for it, end
    the run with `run.cancelled` and raise `RunCancelledError` to the caller."""
    watch = ctx.watch
    if watch is not None:
        watch.refresh()
        watch.check_deadline()  # past it, an error (a sub-run cancelled for it) is a cancel
    if ctx.log.cancel_requested is None:
        return
    if watch is not None and watch.cancel_issued and watch.task is not None:
        watch.task.uncancel()  # this cancellation was ours and is handled here
        watch.cancel_issued = False
    if ctx.log.status != "cancelled":  # else the canceller ended it (it held no lock)
        await end_cancelled(ctx)
    raise RunCancelledError(ctx.run_id, requested_reason(ctx.log))
