"""How a worker starts queued runs within their queues' limits (DESIGN §17).

One pass (`QueuePicker.admit`) takes each queue's runs that this worker can execute in
(priority, enqueue order) and, for each, until the worker's pool is full:

1. a place of the queue (`concurrency`): a World slot (`World.take_slot`: a kernel lock
   on local disk, a fenced lease on object stores), taken **before** a run is chosen, so
   only a holder of a place chooses, and it chooses the best run not already being
   started: none free, and nothing later on this queue starts in this pass;
2. the run's lock: held elsewhere (another worker starts or executes it) → the next run;
3. the run read again under its lock: finished, or started and not due → the next run;
   a debounced run the key's debounce document no longer names is cancelled
   ("debounced");
4. a place of its key (`per_key_concurrency`): none free → the key waits, other keys go on;
5. the first starts held in a pass (no `run.started` yet) take their places in the rate
   window together (`starts.json`, one compare-and-swap for the batch, capped first by
   the room one read of it shows): those it has no room for are given back, and nothing
   later of this queue starts until the window frees. A resume is not a start: it needs
   places, not the window. With no rate limit every start is taken, and the count of
   `little queues`' rate is written a second's worth at a time (`STATS_SECONDS`);
6. handed to the pool with all of it held: the run executes under its lock and places
   (fenced: an executor whose lease of a place lapsed stops at its next record), given
   back when it ends or waits.

A run not yet due by its `notBefore` (debounce) is skipped, like a timer not yet due.
`pending()` tells `run_until_idle` that a run waits for a place or the rate window
(work, not idleness); a run another process executes is not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any, Callable, Iterable

from ..errors import LittleWorkflowError, QueueNotFoundError, RunLockedError
from ..world.clock import from_iso, to_iso
from .queue_layout import key_slot_name, not_before, queue_dir, queue_fields, slot_name
from .queues import RATE_MINUTES, UNBORN_CLAIM_SECONDS, debounce_holder, read_queue
from .state import TERMINAL_STATUSES, RunLog
from .telemetry import record_queue_wait

log = logging.getLogger("little_workflow.worker")

#: How often a worker tries again for a place another process holds (seconds).
SLOT_RETRY_SECONDS = 0.25
#: Starts on a queue with no rate limit are written to its `starts.json` (`little queues`'
#: rate, a figure, not a limit) at most this often by a worker, and when it goes idle or
#: stops: one write per second instead of one per pass.
STATS_SECONDS = 1.0


@dataclasses.dataclass
class Candidate:
    run_id: str
    workflow: Any
    fields: dict[str, Any]
    resume: bool = False  # started before: the rate window does not hold it back

    @property
    def rank(self) -> tuple[int, int, str]:
        return (int(self.fields.get("priority") or 0), int(self.fields.get("order") or 0),
                self.run_id)


@dataclasses.dataclass
class Admission:
    """A queued run chosen to execute now, with its lock and places held."""

    run_id: str
    workflow: Any
    log: RunLog
    queue: str
    counted: bool  # a first start, counted in the rate window
    admitted_at: float
    lock: contextlib.ExitStack
    slots: list[Any]

    def started_fields(self) -> dict[str, Any]:
        """What `run.started` records of this admission (the rate window's time)."""
        return {"admission": {"queue": self.queue, "at": to_iso(self.admitted_at),
                              "counted": self.counted}}

    def release(self) -> None:
        """Give the places back, then the run's lock (from any thread; once)."""
        slots, self.slots = self.slots, []
        try:
            for slot in reversed(slots):
                slot.release()
        finally:
            self.lock.close()


@dataclasses.dataclass
class Held:
    """A queued run whose lock and places are held, its first start not yet counted in
    the rate window (`counted`: a first start, which the window must take)."""

    cand: Candidate
    log: RunLog
    queue: str
    counted: bool
    lock: contextlib.ExitStack
    slots: list[Any]

    def release(self) -> None:
        for slot in reversed(self.slots):
            slot.release()
        self.lock.close()

    def admit(self, at: float) -> Admission:
        """The admission, started (as counted) at `at`: its slots fence the run."""
        for slot in self.slots:
            slot.fence(self.cand.run_id)
        if self.counted and self.log.first_created_at is not None:
            # From enqueue (run.created's time) to this start, both the World's clock.
            record_queue_wait(at - from_iso(self.log.first_created_at), queue=self.queue,
                              workflow_id=(self.log.created or {}).get("workflowId"))
        return Admission(self.cand.run_id, self.cand.workflow, self.log, self.queue,
                         self.counted, at, self.lock, self.slots)


class QueuePicker:
    """The queued runs a worker may start, and the passes that start them."""

    def __init__(self, world: Any, backoff: Any, is_due: Callable[[RunLog, float], bool]):
        self.world = world
        self.backoff = backoff
        self.is_due = is_due
        # Each queue's candidates in (priority, enqueue order); runs a pass took or found
        # gone are dropped from the front and otherwise skipped (`_gone`), so a pass costs
        # what it looks at, not the whole backlog.
        self._by_queue: dict[str, list[Candidate]] = {}
        self._gone: set[str] = set()
        self._pending = False  # a run waits for a place or the rate window
        self._retry_at: float | None = None  # world-clock time a window frees
        self._slot_wait = False
        self._next_slot: dict[str, int] = {}  # queue -> where the next try starts
        self._missing: set[str] = set()  # queues reported missing
        self._unwritten: dict[str, int] = {}  # queue with no rate limit -> starts not yet in starts.json
        self._written_at: dict[str, float] = {}  # queue -> when its starts were last written

    # ---- what there is --------------------------------------------------------------

    def offer(self, runs: list[tuple[str, Any, RunLog]]) -> None:
        """Replace the candidates with the queued due runs a sweep found."""
        cands = []
        for run_id, wf, run_log in runs:
            fields = queue_fields(run_log.created)
            if fields is not None:
                cands.append(Candidate(run_id, wf, fields, run_log.starts > 0))
        cands.sort(key=lambda c: c.rank)
        by_queue: dict[str, list[Candidate]] = {}
        for c in cands:
            by_queue.setdefault(c.fields["name"], []).append(c)
        self._by_queue, self._gone = by_queue, set()

    def has_candidates(self) -> bool:
        return bool(self._by_queue)

    def pending(self) -> bool:
        """A candidate waits for a place or the rate window (not for a run elsewhere)."""
        return self._pending and bool(self._by_queue)

    def frees_at(self) -> float | None:
        """The World-clock time a full rate window frees for a waiting candidate (None:
        no candidate waits for a window) — computed from the recorded start times."""
        return self._retry_at if self.pending() else None

    def retry_in(self) -> float | None:
        """Seconds until a pass could start something it could not (None: only when woken)."""
        if not self.pending():
            return None
        waits = [SLOT_RETRY_SECONDS] if self._slot_wait else []
        if self._retry_at is not None:
            waits.append(max(0.0, self._retry_at - self.world.clock.now()))
        return min(waits) if waits else None

    # ---- one pass -------------------------------------------------------------------

    def admit(self, capacity: int, busy: set[str]) -> list[Admission]:
        """Choose and hold up to `capacity` runs (none of `busy`, the runs in flight)."""
        self._pending, self._retry_at, self._slot_wait = False, None, False
        admitted: list[Admission] = []
        if capacity <= 0 or not self._by_queue:
            self._pending = bool(self._by_queue)
            self._slot_wait = self._pending
            return admitted
        now = self.world.clock.now()
        gone = self._gone
        firsts = []
        for name, queued in self._by_queue.items():
            first = next((c for c in queued if c.run_id not in busy and c.run_id not in gone), None)
            if first is not None:
                firsts.append((first.rank, name))
        done: set[str] = set()
        for _, name in sorted(firsts):
            if len(admitted) >= capacity:
                self._pending = True
                break
            cands = (c for c in self._by_queue[name] if c.run_id not in busy and c.run_id not in gone)
            try:
                queue = read_queue(self.world, name)
            except QueueNotFoundError:
                if name not in self._missing:
                    log.warning("queue %r is not declared: its %d runs wait (declare it, or "
                                "cancel them)", name, len(self._by_queue[name]))
                    self._missing.add(name)
                continue
            self._missing.discard(name)
            admitted += self._admit_from(queue, cands, capacity - len(admitted), now, done)
        if done:
            self._drop(done)
        return admitted

    def _drop(self, run_ids: set[str]) -> None:
        self._gone |= run_ids
        for name in list(self._by_queue):
            queued = self._by_queue[name]
            head = 0
            while head < len(queued) and queued[head].run_id in self._gone:
                self._gone.discard(queued[head].run_id)
                head += 1
            if head == len(queued):
                del self._by_queue[name]
            elif head:
                del queued[:head]

    def _admit_from(self, queue: dict[str, Any], cands: Iterable[Candidate], capacity: int,
                    now: float, done: set[str]) -> list[Admission]:
        name = queue["name"]
        held: list[Held] = []
        full_keys: set[str | None] = set()
        place = None
        room, frees_at = window_room(self.world, queue, now)
        if room == 0:
            # The window is full (read, not written): only resumes may go; first starts
            # are not tried (no run lock, no log read) until it frees.
            self._note_window(frees_at)
            cands = (c for c in cands if c.resume)
        first_starts = 0
        for cand in cands:
            if len(held) >= capacity:
                self._pending = True
                break
            if room is not None and not cand.resume and first_starts >= room:
                self._note_window(frees_at)
                break  # the window has no room for more: nothing later starts in this pass
            start = not_before(cand.fields)
            if start is not None and start > now:
                continue  # not due yet (debounce): like a timer, not pending work
            key = cand.fields.get("key")
            if key in full_keys:
                continue
            if place is None:
                place = self._take_place(name, queue.get("concurrency"), slot_name)
                if place is False:
                    self._pending = self._slot_wait = True
                    break  # the queue is full: nothing later on it starts in this pass
            try:
                outcome = self._try(queue, cand, key, place, now)
            except LittleWorkflowError as e:
                # The storage failed for this run (or its documents): tried again later.
                self.backoff.failed(cand.run_id, e, -1)
                outcome = "gone"
            except BaseException:
                for h in held:
                    h.release()
                raise
            if isinstance(outcome, Held):
                held.append(outcome)
                first_starts += outcome.counted
                place = None
            elif outcome in ("gone", "elsewhere"):
                done.add(cand.run_id)  # a later sweep offers it again if it is due
            elif outcome == "key full":
                full_keys.add(key)
                self._pending = self._slot_wait = True
        if place is not None and not isinstance(place, bool):  # a slot taken, not used
            place.release()
        return self._count(queue, held, now, done)

    def _note_window(self, frees_at: float | None) -> None:
        self._pending = True
        if frees_at is not None:
            self._retry_at = frees_at if self._retry_at is None else min(self._retry_at, frees_at)

    def _count(self, queue: dict[str, Any], held: list[Held], now: float,
               done: set[str]) -> list[Admission]:
        """Count the held first starts in the rate window with one write (a batch), and
        admit what it took, in order; from the first start it refused on, every held run
        is given back (the window is the queue's overall limit: nothing later starts)."""
        if not held:
            return []
        counted = sum(h.counted for h in held)
        try:
            if queue.get("rateLimit") is None:
                # No window to take places in: every start is admitted; only the figure
                # of `little queues` is written, a second's worth at a time.
                at, room, frees_at = now, counted, None
                self._note_starts(queue, now, counted)
            else:
                at, room, frees_at = record_starts(self.world, queue, now, counted)
        except LittleWorkflowError as e:
            for h in held:
                self.backoff.failed(h.cand.run_id, e, -1)
                h.release()
                done.add(h.cand.run_id)
            return []
        admitted: list[Admission] = []
        for i, h in enumerate(held):
            if h.counted:
                if room == 0:
                    self._note_window(frees_at)
                    for later in held[i:]:
                        later.release()
                    break
                room -= 1
            admitted.append(h.admit(at if h.counted else now))
            done.add(h.cand.run_id)
        return admitted

    def _note_starts(self, queue: dict[str, Any], now: float, count: int) -> None:
        name = queue["name"]
        if count:
            self._unwritten[name] = self._unwritten.get(name, 0) + count
        if now - self._written_at.get(name, float("-inf")) >= STATS_SECONDS:
            self._write_starts(name, now)

    def _write_starts(self, name: str, now: float) -> None:
        count = self._unwritten.pop(name, 0)
        self._written_at[name] = now
        if not count:
            return
        try:
            record_starts(self.world, {"name": name}, now, count)
        except LittleWorkflowError as e:  # a figure: kept, and written with the next ones
            self._unwritten[name] = self._unwritten.get(name, 0) + count
            log.info("could not write the starts of queue %r: %s", name, e)

    def write_starts(self) -> None:
        """Write the starts not yet in the queues' `starts.json` (when the worker goes
        idle or stops, and at each sweep once STATS_SECONDS have passed)."""
        if not self._unwritten:
            return
        now = self.world.clock.now()
        for name in list(self._unwritten):
            self._write_starts(name, now)

    def write_starts_due(self) -> None:
        now = self.world.clock.now()
        for name in list(self._unwritten):
            if now - self._written_at.get(name, float("-inf")) >= STATS_SECONDS:
                self._write_starts(name, now)

    def _take_place(self, queue: str, limit: int | None, naming: Any, *extra: Any) -> Any:
        """A free place among `limit` (a `Slot`), True where there is no limit, or False."""
        if limit is None:
            return True
        key = naming(queue, *extra, 0)
        first = self._next_slot.get(key, 0) % limit
        for i in range(limit):
            index = (first + i) % limit
            slot = self.world.take_slot(naming(queue, *extra, index), f"queue {queue}")
            if slot is not None:
                self._next_slot[key] = index + 1
                return slot
        return False

    def _try(self, queue: dict[str, Any], cand: Candidate, key: str | None, place: Any,
             now: float) -> Held | str:
        """Hold the run's lock and its places (`Held`: its start not yet counted in the
        rate window), or why not."""
        name = queue["name"]
        lock = contextlib.ExitStack()
        held: list[Any] = []
        try:
            try:
                lock.enter_context(self.world.run_lock(cand.run_id))
            except RunLockedError as e:
                # Another worker starts or executes it: not ours to wait for.
                self.backoff.failed(cand.run_id, e, -1)
                return "elsewhere"
            run_log = RunLog.fold(cand.run_id, self.world.list_events(cand.run_id))
            if run_log.status in TERMINAL_STATUSES or queue_fields(run_log.created) is None:
                lock.close()
                return "gone"
            if run_log.starts and not self.is_due(run_log, now):
                lock.close()
                return "gone"  # started elsewhere since: its waits decide when it is due
            if cand.fields.get("debounce") is not None and run_log.starts == 0:
                verdict = self._debounce_verdict(cand, now)
                if verdict != "admit":
                    lock.close()
                    if verdict == "superseded":
                        _cancel_later(self.world, cand.run_id)
                        return "gone"
                    return "wait"
            if queue.get("perKeyConcurrency") is not None:
                key_place = self._take_place(name, queue["perKeyConcurrency"], key_slot_name, key)
                if key_place is False:
                    lock.close()
                    return "key full"
                held.append(key_place)
            slots = ([place] if place is not True else []) + held
            return Held(cand, run_log, name, run_log.starts == 0, lock, slots)
        except BaseException:
            for slot in held:
                slot.release()
            lock.close()
            raise

    def _debounce_verdict(self, cand: Candidate, now: float) -> str:
        """"admit" when the key's debounce document names this run; "superseded" when it
        names another run that exists; "wait" while that other run may still be being
        written (its enqueuer between the document and `run.created`)."""
        doc = debounce_holder(self.world, cand.fields)
        if doc is None or doc.get("runId") == cand.run_id:
            return "admit"
        other = str(doc.get("runId"))
        if self.world.list_events(other):
            return "superseded"
        at = doc.get("at")
        if isinstance(at, (int, float)) and now - at >= UNBORN_CLAIM_SECONDS:
            return "admit"  # its enqueuer died before writing it: this run is the latest
        return "wait"

    def forget(self, run_id: str) -> None:
        self._drop({run_id})


def _cancel_later(world: Any, run_id: str) -> None:
    from .control import cancel_run

    try:
        cancel_run(world, run_id, "debounced")
    except LittleWorkflowError as e:
        log.info("could not cancel superseded debounced run %s: %s", run_id, e)


def window_room(world: Any, queue: dict[str, Any], now: float) -> tuple[int | None, float | None]:
    """(how many first starts the rate window has room for now, when the next place in
    it frees — None while it has room): (None, None) with no rate limit. One read of
    `starts.json`, for a pass to skip or cap first starts cheaply; `record_starts`
    decides, under compare-and-swap."""
    rate = queue.get("rateLimit")
    if rate is None:
        return None, None
    limit, period = int(rate["limit"]), float(rate["period"])
    doc = world.read_document(f"{queue_dir(queue['name'])}/starts.json")
    recent = _recent_starts(doc, now, period)
    room = max(0, limit - len(recent))
    return room, (recent[-limit] + period if room == 0 else None)


def _recent_starts(doc: Any, now: float, period: float) -> list[float]:
    found = doc.get("times") if isinstance(doc, dict) else None
    times = sorted(t for t in found or [] if isinstance(t, (int, float)))
    return [t for t in times if t > now - period]


def record_starts(world: Any, queue: dict[str, Any], now: float,
                  count: int) -> tuple[float, int, float | None]:
    """Note up to `count` first starts in the queue's `starts.json` with one write: (the
    time they are counted at, how many the window took, when it frees when it took
    fewer). With a rate limit the last `limit` start times are kept and the write is
    durable (a window a power cut forgot would let too many through); the per-minute
    counts (`little queues`' rate) are kept for every queue."""
    if count <= 0:
        return now, 0, None
    rate = queue.get("rateLimit")
    result: list[tuple[float, int, float | None]] = []

    def change(found: Any) -> Any:
        result.clear()
        doc = dict(found) if isinstance(found, dict) else {}
        at, taken, frees_at = now, count, None
        if rate is not None:
            limit, period = int(rate["limit"]), float(rate["period"])
            recent = _recent_starts(doc, now, period)
            taken = min(count, limit - len(recent))
            if taken < count:
                # Full until the limit-th latest start (those taken now included) leaves.
                frees_at = ([*recent] + [max([now] + recent[-1:])] * max(taken, 0))[-limit] + period
            if taken <= 0:
                result.append((now, 0, frees_at))
                return found
            # Never earlier than the last start: another host's clock may be behind.
            at = max([now] + recent[-1:])
            doc["times"] = (recent + [at] * taken)[-limit:]
        result.append((at, taken, frees_at))
        minute = int(at // 60)
        minutes = {m: c for m, c in (doc.get("minutes") or {}).items()
                   if m.lstrip("-").isdigit() and int(m) > minute - RATE_MINUTES}
        minutes[str(minute)] = int(minutes.get(str(minute), 0)) + taken
        doc["minutes"] = minutes
        doc["total"] = int(doc.get("total", 0)) + taken
        return doc

    world.update_document(f"{queue_dir(queue['name'])}/starts.json", change,
                          durable=rate is not None)
    return result[0] if result else (now, count, None)


__all__ = ["Admission", "QueuePicker", "record_starts"]
