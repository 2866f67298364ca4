"""What one execution appends to its run's log, and how its in-memory log follows
storage: every record checked against the log's history first (history.py), stamped with
the execution's incarnation, appended, and folded into the run's log together with
whatever others appended in between."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from ..errors import IdempotencyConflictError, LeaseLostError
from ..world import incarnations
from ..world.models import Event
from ..world.protocol import WorldLike
from .active_index import TERMINAL_EVENTS, mark_finished
from .history import FREE_EVENTS, Key, RunHistory
from .loops import may_block_loop
from .state import RunLog
from .steps import current_group
from .waiting import announce


class RunRecorder:
    """The appending half of a RunContext (its base class)."""

    watch: Any = None  # waiting.RunWatch while this process executes the run
    body_task: "asyncio.Task[Any] | None" = None  # the task running the workflow body
    #: This execution's `start` (the fence of one executor per run), stamped on every
    #: record it appends; None before its `run.started` (and in replay).
    incarnation: int | None = None
    started_sequence = 0  # the sequence of this execution's run.started
    #: Why this execution must stop: another one started after it (read from the log).
    superseded: str | None = None
    #: telemetry.RunTelemetry while this execution reports to OpenTelemetry, else None.
    telemetry: Any = None

    def __init__(self, *, world: WorldLike, run_id: str, log: RunLog):
        self.world = world
        self.run_id = run_id
        self.log = log
        self._log_lock = threading.Lock()
        #: What the log held when this execution began, and what the code has asked for
        #: again (history.py); None for a new run.
        self.history: RunHistory | None = RunHistory.of(log)

    def begin_execution(self, started: Event) -> None:
        """`started` is this execution's `run.started`: from now on every record carries
        its incarnation, and another execution's start ends this one."""
        self.incarnation = int(started.payload["start"])
        self.started_sequence = started.sequence

    def check_fence(self) -> None:
        """LeaseLostError once another execution of the run started after this one."""
        if self.superseded is not None:
            raise LeaseLostError(self.run_id, self.superseded)

    def _stamped(self, payload: Any) -> Any:
        if self.incarnation is None:
            return payload
        if self.superseded is not None:
            self.check_fence()  # a superseded execution appends nothing more
        if isinstance(payload, dict):
            return {**payload, incarnations.INCARNATION: self.incarnation}
        return payload

    def _as_first_written(self, conflict: IdempotencyConflictError, payload: Any) -> Any:
        """A keyed record written again by a later execution (a memory write in the body,
        a restarted harness call, a sub-run entered again) differs from the first only by
        its incarnation: the payload as that execution stamped it, so the World answers
        with the first record. None when the records really differ."""
        if self.incarnation is None or conflict.sequence is None or not isinstance(payload, dict):
            return None
        earlier = self.world.read_event(self.run_id, conflict.sequence)
        first = earlier.payload.get(incarnations.INCARNATION) \
            if isinstance(earlier.payload, dict) else None
        if first == self.incarnation:
            return None
        return dict(payload) if first is None else {**payload, incarnations.INCARNATION: first}

    def append_sync(
        self, type_: str, payload: Any, *, idempotency_key: str | None = None, durable: bool = True
    ) -> Event:
        self.check_history(type_, payload)
        stamped = self._stamped(payload)
        try:
            event = self.world.append_event(
                self.run_id, type_, stamped, idempotency_key=idempotency_key, durable=durable
            )
        except IdempotencyConflictError as e:
            first = self._as_first_written(e, payload)
            if first is None:
                raise
            event = self.world.append_event(
                self.run_id, type_, first, idempotency_key=idempotency_key, durable=durable)
        self._fold_own(event)
        if type_ in TERMINAL_EVENTS:
            mark_finished(self.world, self.run_id)  # after the terminal event
            announce(self.world, self.run_id)  # handles waiting for the result, stream readers
        return event

    async def append(
        self, type_: str, payload: Any, *, idempotency_key: str | None = None, durable: bool = True
    ) -> Event:
        if self.history is not None:
            await self._settle_history(type_, payload)
        if durable and self.world.blocking and not may_block_loop():
            # An fsync or a network round trip: keep the event loop free for the other
            # tasks (sibling steps, the caller's app). Alone on a loop of ours the thread
            # hop would only add latency, so a serial workflow appends inline; so do
            # non-durable appends,
            # whose commit is short (measured: moving them to threads halved the
            # throughput of a parallel group on local_world).
            return await asyncio.to_thread(
                self.append_sync, type_, payload, idempotency_key=idempotency_key, durable=durable
            )
        if current_group() is None:
            return self.append_sync(type_, payload, idempotency_key=idempotency_key,
                                    durable=durable)
        # In a parallel group: hand the event to the store, let the sibling tasks hand
        # theirs too, then wait — appends that arrive together share one commit.
        stamped = self._stamped(payload)
        try:
            pending = self.world.submit_event(
                self.run_id, type_, stamped, idempotency_key=idempotency_key, durable=durable
            )
        except IdempotencyConflictError as e:
            first = self._as_first_written(e, payload)
            if first is None:
                raise
            pending = self.world.submit_event(
                self.run_id, type_, first, idempotency_key=idempotency_key, durable=durable)
        try:
            if not pending.done:
                await asyncio.sleep(0)
        finally:
            event = pending.result()
            self._fold_own(event)
        return event

    def _fold_own(self, event: Event) -> None:
        """Fold an event this run appended into its log. Its sequence tells whether
        anyone else wrote since the last event folded: the next one is the hot path (no
        read); a jump means others got events in first — another process, `send_event`,
        `cancel_run`, a holder that lost its lease. Then storage decides: what this run
        has not seen is read and folded in log order before the run goes on: the log is the
        one truth every process reads."""
        with self._log_lock:
            last = self.log.last_sequence
            if event.sequence == last + 1:
                self.log.apply(event)
                return
            if event.sequence <= last:
                return  # folded already: read back with others' events, or a receipt
            others = self._fold_from_storage()
            if event.sequence > self.log.last_sequence:  # storage did not show it yet
                self.log.apply(event)
        if self.watch is not None and any(e.sequence != event.sequence for e in others):
            self.watch.wake()

    def _fold_from_storage(self) -> list[Event]:
        events = self.world.list_events(self.run_id, after=self.log.last_sequence)
        for e in events:
            self.log.apply(e)
            if self.incarnation is not None and self.superseded is None \
                    and incarnations.started_elsewhere(self.started_sequence, e):
                self.superseded = (
                    f"execution {e.payload.get('start')} of this run started at sequence "
                    f"{e.sequence}, after this one ({self.incarnation}), which stops")
        return events

    def fold_new_events(self) -> list[Event]:
        """Read what was appended to this run after the last event folded into its log
        (by anyone) and fold it in; returns those events."""
        with self._log_lock:
            return self._fold_from_storage()

    def seen_uncancelled(self) -> int:
        """The last sequence folded into this run's log when that log shows no cancel
        request nor end by cancellation, else 0 (under the lock: a fold in another thread
        sets `last_sequence` before the state its event changes)."""
        with self._log_lock:
            log = self.log
            if log.cancel_requested is not None or log.status == "cancelled":
                return 0
            return log.last_sequence

    # ---- the log's history, asked for again (history.py) ------------------------------

    def asked(self, key: Key) -> None:
        """The code asked for a record the log may hold (it need not ask for it again)."""
        if self.history is not None:
            self.history.ask(key)

    def _in_body(self) -> bool:
        """Running in the workflow body's own task (not a parallel group's, a gathered
        one's, or a thread): its order is the log's order."""
        if current_group() is not None:
            return False
        try:
            task = asyncio.current_task()
        except RuntimeError:  # a thread: its task checked before handing the append over
            return False
        return self.body_task is None or task is self.body_task

    def check_history(self, type_: str, payload: Any) -> None:
        """Before this execution appends anything: every record the log held when it
        began must have been asked for again (`ReplayDivergenceError` otherwise). Only
        the body's task is checked here: other tasks go through `append`, which lets
        their siblings ask for their records first."""
        history = self.history
        if history is None or type_ in FREE_EVENTS:
            return
        if history.diverged is not None:
            raise history.diverged
        due = history.first_due()
        if due is not None and self._in_body():
            raise history.diverge(self.log, due, type_, payload)

    async def _settle_history(self, type_: str, payload: Any) -> None:
        """`check_history` for `append`, where another task than the body's that finds a
        record still due first lets its siblings ask for theirs."""
        history = self.history
        if history is None or type_ in FREE_EVENTS:
            return
        if history.diverged is not None:
            raise history.diverged
        due = history.first_due()
        if due is None:
            return
        if not self._in_body():
            due = await history.settle()
            if due is None:
                return
        raise history.diverge(self.log, due, type_, payload)

