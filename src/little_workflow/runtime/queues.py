"""Queues (DESIGN §17): `declare_queue`, `list_queues`, `delete_queue`, `enqueue`.

A queue lives in the World as documents (paths relative to the data dir), so every
worker on every host sees the same limits and the same order:

    queues/<name>/queue.json           {name, concurrency, perKeyConcurrency, rateLimit}
    queues/<name>/order.json           {next}: the enqueue counter (`World.take_number`;
                                       on local_world a row of events.db instead)
    queues/<name>/starts.json          recent starts: the rate window, `little queues`' rate
    queues/<name>/dedup/<sha>.json     {dedupId, runId, at}: the run holding a dedup id
    queues/<name>/debounce/<sha>.json  {key, runId, at, notBefore}: a key's pending run

A queued run is an ordinary run whose `run.created` carries `queue: {name, key, priority,
order, notBefore?, dedupId?, debounce?}`; it has status `created` until a worker starts it
within the queue's limits (queue_picking.py). `order` comes from the queue's counter,
taken before `run.created` is written, so it is enqueue order (not a clock's reading),
durable no later than that `run.created`.
Every document changes through `World.update_document` (no lost update across processes
and hosts).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ..errors import (
    DuplicateRunError,
    QueueNotEmptyError,
    QueueNotFoundError,
    RunFinishedError,
    RunNotFoundError,
)
from ..world.clock import to_iso
from ..world.ids import content_hash, new_run_id, validate_run_id
from .active_index import active_run_ids
from .deadlines import Deadline, deadline_record, seconds_of
from .handles import RunHandle
from .queue_layout import (
    QUEUE_NAME_RE,
    QUEUES_DIR,
    check_queue_name,
    hashed,
    queue_dir,
    queue_fields,
)
from .state import TERMINAL_STATUSES, RunLog
from .workflow import Workflow

if TYPE_CHECKING:
    from collections.abc import Iterator

In = TypeVar("In")
Out = TypeVar("Out")

#: A dedup id claimed by a run that never got its `run.created` (its enqueuer died in
#: between) is given to the next enqueue after this long (seconds of the World's clock).
UNBORN_CLAIM_SECONDS = 60.0
#: `starts.json` keeps per-minute counts for this many minutes (`little queues`' rate).
RATE_MINUTES = 2


@dataclasses.dataclass(frozen=True)
class RateLimit:
    """At most `limit` starts of a queue's runs within any `period` seconds."""

    limit: int
    period: float

    def __post_init__(self) -> None:
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ValueError(f"RateLimit.limit must be a positive integer, not {self.limit!r}")
        if (isinstance(self.period, bool) or not isinstance(self.period, (int, float))
                or not math.isfinite(self.period) or self.period <= 0):
            raise ValueError(f"RateLimit.period must be a positive number of seconds, not {self.period!r}")


@dataclasses.dataclass(frozen=True)
class Queue:
    """A declared queue, its limits, and what it holds now: `depth` runs waiting to start,
    `running` runs executing, `recent_rate` starts per minute (the last minute)."""

    name: str
    concurrency: int | None = None
    per_key_concurrency: int | None = None
    rate_limit: RateLimit | None = None
    depth: int = 0
    running: int = 0
    recent_rate: float = 0.0


# ---- declaring ------------------------------------------------------------------------

def _positive(value: Any, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a positive integer or None, not {value!r}")
    return value


def queue_from_document(doc: dict[str, Any], **counts: Any) -> Queue:
    rate = doc.get("rateLimit")
    return Queue(name=doc["name"], concurrency=doc.get("concurrency"),
                 per_key_concurrency=doc.get("perKeyConcurrency"),
                 rate_limit=RateLimit(int(rate["limit"]), float(rate["period"])) if rate else None,
                 **counts)


def declare_queue(world: Any, name: str, *, concurrency: int | None = None,
                  per_key_concurrency: int | None = None,
                  rate_limit: RateLimit | None = None) -> Queue:
    """Declare queue `name` in the World (again: its limits are replaced). None means no
    limit of that kind. Workers start its runs at most `concurrency` at once across all
    workers and hosts, at most `per_key_concurrency` per key, and at most
    `rate_limit.limit` starts within any `rate_limit.period` seconds."""
    from .api import resolve_world

    world = resolve_world(world)
    check_queue_name(name)
    _positive(concurrency, "concurrency")
    _positive(per_key_concurrency, "per_key_concurrency")
    if rate_limit is not None and not isinstance(rate_limit, RateLimit):
        raise TypeError(f"rate_limit must be a lw.RateLimit or None, not {rate_limit!r}")
    doc = {"name": name, "concurrency": concurrency, "perKeyConcurrency": per_key_concurrency,
           "rateLimit": ({"limit": rate_limit.limit, "period": rate_limit.period}
                         if rate_limit is not None else None)}
    world.write_document(f"{queue_dir(name)}/queue.json", doc)
    return queue_from_document(doc)


def read_queue(world: Any, name: str) -> dict[str, Any]:
    doc = world.read_document(f"{queue_dir(check_queue_name(name))}/queue.json")
    if not isinstance(doc, dict) or doc.get("name") != name:
        raise QueueNotFoundError(name, f" in {world.data_dir}")
    return doc


def _queue_runs(world: Any) -> Iterator[tuple[str, dict[str, Any], RunLog]]:
    """(queue name, queue fields, log) of every unfinished run on a queue (the index of
    unfinished runs, then each one's log)."""
    for run_id in active_run_ids(world):
        try:
            log = RunLog.fold(run_id, world.list_events(run_id))
        except RunNotFoundError:
            continue
        fields = queue_fields(log.created)
        if fields is not None and log.status not in TERMINAL_STATUSES:
            yield fields["name"], fields, log


def recent_rate(starts: dict[str, Any] | None, now: float) -> float:
    """Starts per minute over the last minute, from `starts.json`'s minute counts (the
    minute before this one weighted by how much of it is still within the last 60 s)."""
    minutes = (starts or {}).get("minutes") or {}
    this = int(now // 60)
    current = int(minutes.get(str(this), 0))
    previous = int(minutes.get(str(this - 1), 0))
    return current + previous * (1.0 - (now % 60) / 60.0)


def list_queues(world: Any) -> list[Queue]:
    """Every declared queue with its limits, depth (runs waiting to start), running and
    recent rate, by name. Reads the index of unfinished runs and their logs."""
    from .api import resolve_world

    world = resolve_world(world)
    depth: dict[str, int] = {}
    running: dict[str, int] = {}
    for name, _fields, log in _queue_runs(world):
        if log.status == "created":
            depth[name] = depth.get(name, 0) + 1
        elif log.status == "running":
            running[name] = running.get(name, 0) + 1
    now = world.clock.now()
    out = []
    for name in world.list_dir(QUEUES_DIR):
        if not QUEUE_NAME_RE.fullmatch(name):
            continue
        doc = world.read_document(f"{queue_dir(name)}/queue.json")
        if not isinstance(doc, dict) or doc.get("name") != name:
            continue
        starts = world.read_document(f"{queue_dir(name)}/starts.json")
        out.append(queue_from_document(doc, depth=depth.get(name, 0), running=running.get(name, 0),
                                       recent_rate=round(recent_rate(starts, now), 3)))
    return out


def delete_queue(world: Any, name: str, *, force: bool = False) -> None:
    """Delete a declared queue. With unfinished runs on it: `QueueNotEmptyError`, unless
    `force=True`, which cancels them (reason "queue deleted") first."""
    from .api import resolve_world
    from .control import cancel_run

    world = resolve_world(world)
    read_queue(world, name)
    unfinished = sorted(log.run_id for q, _f, log in _queue_runs(world) if q == name)
    if unfinished and not force:
        raise QueueNotEmptyError(name, unfinished)
    for run_id in unfinished:
        try:
            cancel_run(world, run_id, "queue deleted")
        except RunFinishedError:
            pass  # it ended meanwhile
    _remove_tree(world, queue_dir(name))


def _remove_tree(world: Any, folder: str) -> None:
    # queue.json last: a queue half deleted by a crash is still declared, and deleting it
    # again finishes the job.
    for name in world.list_dir(folder):
        path = f"{folder}/{name}"
        info = world.file_info(path)
        if info is not None and info["type"] == "directory":
            _remove_tree(world, path)
        elif name != "queue.json":
            world.remove_file(path)
    world.remove_file(f"{folder}/queue.json")
    world.remove_dir(folder)


# ---- enqueueing -----------------------------------------------------------------------

def _run_state(world: Any, run_id: str) -> RunLog:
    return RunLog.fold(run_id, world.list_events(run_id))


def _claim_dedup(world: Any, queue: str, dedup_id: str, run_id: str) -> str | None:
    """Give `dedup_id` to `run_id` unless an unfinished run of the queue holds it: then
    that run's id (and nothing changes)."""
    now = world.clock.now()
    holder: list[str] = []

    def change(doc: Any) -> Any:
        holder.clear()
        if isinstance(doc, dict) and isinstance(doc.get("runId"), str):
            log = _run_state(world, doc["runId"])
            claimed_at = doc.get("at")
            unborn = log.created is None and (
                not isinstance(claimed_at, (int, float)) or now - claimed_at < UNBORN_CLAIM_SECONDS)
            if unborn or (log.created is not None and log.status not in TERMINAL_STATUSES):
                holder.append(doc["runId"])
                return doc
        return {"dedupId": dedup_id, "runId": run_id, "at": now}

    world.update_document(f"{queue_dir(queue)}/dedup/{hashed(dedup_id)}.json", change)
    return holder[0] if holder else None


def _debounce(world: Any, queue: str, key: str | None, run_id: str, seconds: float) -> tuple[float, str | None]:
    """Make `run_id` the key's pending run, starting no earlier than `seconds` from now:
    (its not-before time, the earlier pending run it replaces — still queued, enqueued
    within the window — or None)."""
    now = world.clock.now()
    start = now + seconds
    replaced: list[str] = []

    def change(doc: Any) -> Any:
        replaced.clear()
        if (isinstance(doc, dict) and isinstance(doc.get("runId"), str)
                and isinstance(doc.get("notBefore"), (int, float)) and now < doc["notBefore"]):
            log = _run_state(world, doc["runId"])
            if log.created is not None and log.status == "created" and log.starts == 0:
                replaced.append(doc["runId"])
        return {"key": key, "runId": run_id, "at": now, "notBefore": start}

    world.update_document(f"{queue_dir(queue)}/debounce/{hashed(key)}.json", change)
    return start, (replaced[0] if replaced else None)


def next_order(world: Any, queue: str) -> int:
    """The queue's next enqueue number (1, 2, …): the World's counter `queues/<name>/order`
    (`World.take_number`), durable with the `run.created` that records it."""
    return int(world.take_number(f"{queue_dir(queue)}/order"))


def _check_enqueue_args(key: Any, priority: Any, dedup_id: Any, on_duplicate: Any,
                        debounce: Any) -> None:
    if key is not None and not isinstance(key, str):
        raise TypeError(f"key must be a string or None, not {key!r}")
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"priority must be an integer (lower starts first), not {priority!r}")
    if dedup_id is not None and (not isinstance(dedup_id, str) or not dedup_id):
        raise TypeError(f"dedup_id must be a non-empty string or None, not {dedup_id!r}")
    if on_duplicate not in ("return", "raise"):
        raise ValueError(f"on_duplicate must be 'return' or 'raise', not {on_duplicate!r}")
    if debounce is not None and (isinstance(debounce, bool) or not isinstance(debounce, (int, float))
                                 or not math.isfinite(debounce) or debounce <= 0):
        raise ValueError(f"debounce must be a positive number of seconds or None, not {debounce!r}")


def enqueue(
    world: Any,
    wf: Workflow[In, Out],
    input: In | None = None,
    *,
    queue: str,
    key: str | None = None,
    priority: int = 0,
    dedup_id: str | None = None,
    on_duplicate: Literal["return", "raise"] = "return",
    debounce: float | None = None,
    run_id: str | None = None,
    deadline: Deadline | None = None,
) -> RunHandle[Out]:
    """Put a run of `wf` on `queue` (declared first: `QueueNotFoundError`); a worker starts
    it within the queue's limits, by `priority` (lower first), then enqueue order. Returns
    its handle (`.result()` waits for it).

    - `key`: the partition for `per_key_concurrency` and `debounce`.
    - `dedup_id`: while a run with this id is unfinished on the queue, enqueueing again
      returns its handle (`on_duplicate="raise"`: `DuplicateRunError`).
    - `debounce=seconds`: the run starts no earlier than `seconds` after this enqueue;
      enqueueing again with the same key within that window cancels the pending run
      (reason "debounced") and enqueues this input instead (the handle is the new run's).
    - `deadline`: a timedelta or seconds (default: the workflow's `timeout`), counted from
      the run's creation; a run still unfinished then is cancelled (reason "deadline"),
      by a worker's sweep if it is still waiting for a place.

    The input is validated (`SchemaValidationError`) before anything is written."""
    from .api import resolve_world
    from .runner import input_json

    if not isinstance(wf, Workflow):
        raise TypeError(f"{wf!r} is not a workflow: decorate it with @little_workflow.workflow")
    _check_enqueue_args(key, priority, dedup_id, on_duplicate, debounce)
    world = resolve_world(world)
    read_queue(world, queue)
    minted = run_id is None
    run_id = validate_run_id(run_id) if run_id is not None else new_run_id()
    seconds = seconds_of(deadline, f"the deadline of run {run_id}")
    value = input_json(wf, input, run_id)
    if dedup_id is not None:
        holder = _claim_dedup(world, queue, dedup_id, run_id)
        if holder is not None and holder != run_id:
            if on_duplicate == "raise":
                raise DuplicateRunError(queue, dedup_id, holder)
            return RunHandle(world, holder, wf)
    fields: dict[str, Any] = {"name": queue, "key": key, "priority": priority}
    replaced = None
    if debounce is not None:
        start, replaced = _debounce(world, queue, key, run_id, float(debounce))
        fields.update(notBefore=to_iso(start), debounce=float(debounce))
    if dedup_id is not None:
        fields["dedupId"] = dedup_id
    fields["order"] = next_order(world, queue)
    create_queued_run(world, wf, value, run_id, fields,
                      wf.timeout if seconds is None else seconds, minted=minted)
    if replaced is not None:
        _cancel_debounced(world, replaced)
    return RunHandle(world, run_id, wf)


def enqueue_tick(world: Any, wf: Workflow[Any, Any], value: Any, *, queue: str, run_id: str,
                 extra: dict[str, Any]) -> None:
    """A schedule's tick through its queue (schedules.py): the run `run_id` (the tick's
    deterministic id) put on `queue` with `value` (already validated), default key and
    priority — or nothing, when another worker that found the same tick due created it."""
    read_queue(world, queue)
    if _run_state(world, run_id).created is not None:
        return  # most workers that find the tick handled late stop here, taking no number
    fields: dict[str, Any] = {"name": queue, "key": None, "priority": 0,
                              "order": next_order(world, queue)}
    create_queued_run(world, wf, value, run_id, fields, wf.timeout, extra=extra, exists_ok=True)


def create_queued_run(world: Any, wf: Workflow[Any, Any], value: Any, run_id: str,
                      fields: dict[str, Any], deadline_seconds: float | None = None, *,
                      extra: dict[str, Any] | None = None, exists_ok: bool = False,
                      minted: bool = False) -> None:
    """Write the queued run (as `start_workflow` writes a run, with `queue`, its deadline
    `deadline_seconds` from now, and `extra` in its `run.created`) and wake this process's
    workers. A run of that id existing already is an error unless `exists_ok`. `minted`:
    the id was made by this call's caller (control.fresh_log: no lock, nothing to read)."""
    from .context import RunContext
    from .control import fresh_log
    from .runner import create_run_sync
    from .waiting import notify_run

    with contextlib.nullcontext() if minted else world.run_lock(run_id):
        log = fresh_log(run_id) if minted else _run_state(world, run_id)
        if log.created is not None:
            if exists_ok:
                return
            raise RunFinishedError(run_id, log.status, "run.created") if log.status in TERMINAL_STATUSES \
                else ValueError(f"run {run_id} exists already: enqueue makes a new run "
                                "(run_id=None gives a fresh id)")
        ctx = RunContext(world=world, workflow=wf, run_id=run_id, input=value, log=log)
        create_run_sync(ctx, wf, value, content_hash(value), {
            **(extra or {}), "queue": fields,
            **deadline_record(world.clock.now(), deadline_seconds)})
    notify_run(world, run_id)


def _cancel_debounced(world: Any, run_id: str) -> None:
    from .control import cancel_run

    try:
        cancel_run(world, run_id, "debounced")
    except RunFinishedError:
        pass  # it ended meanwhile (a worker on another clock started it): it ran


def debounce_holder(world: Any, fields: dict[str, Any]) -> dict[str, Any] | None:
    """The debounce document of a run's (queue, key): which run is the key's pending one."""
    doc = world.read_document(f"{queue_dir(fields['name'])}/debounce/{hashed(fields.get('key'))}.json")
    return doc if isinstance(doc, dict) else None


__all__ = ["Queue", "RateLimit", "declare_queue", "delete_queue", "enqueue", "list_queues"]
