"""Schedules (DESIGN §17): a cron expression in a timezone whose ticks each start exactly
one run, whatever the number of workers and hosts.

- `schedules/<name>.json` holds the schedule (written by `add_schedule`, replaced by
  adding the name again, removed by `remove_schedule`). Its `addedAt` (the World's
  clock) is where its ticks begin: the first tick is the first cron time strictly after.
- cronsim parses the expression and walks it in the schedule's zoneinfo timezone, so
  DST days are as cronsim makes them: a time that does not exist on a spring-forward
  day fires at the next time that does, a daily time repeated on a fall-back day fires
  once, and a pattern matching both repeated hours (every 30 min) fires in both.
- A tick's run id is `run_sched_<name>_<tick as UTC yyyymmddHHMM>`: every worker that
  finds the tick due creates the same run, and creating a run that exists is a no-op
  under the run lock, so each tick makes one run.
- `schedule-ticks/<name>.json` records the last tick handled (with the schedule's
  `generation`, new at each add: a replaced schedule starts over). It only saves work: a worker whose copy
  is stale creates a run that exists, which changes nothing.
- `catch_up` decides what a worker does with ticks it finds past: `"all"` starts each,
  `"latest"` (default) only the most recent, `"none"` only one at most
  `NONE_LATENESS_SECONDS` late.

A worker's sweep costs, for schedules, nothing most of the time: the worker reads
`schedules/` (one listing, one read per schedule) at most every `REFRESH_SECONDS`, and
otherwise decides from what it read. A tick that is due costs one read of its schedule
(a schedule removed or replaced since is not ticked on stale terms), one read and one
write of its `schedule-ticks/` document, and the run's creation. So a schedule added or
removed on another host is seen within `REFRESH_SECONDS`, and no tick fires after its
schedule's removal was read.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterator, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ..errors import LittleWorkflowError, RunLockedError, ScheduleError
from ..world.clock import from_iso, to_iso
from .workflow import Workflow

SCHEDULES_DIR = "schedules"
TICKS_DIR = "schedule-ticks"
SUFFIX = ".json"
#: With catch_up="none", a tick found later than this (seconds) is skipped.
NONE_LATENESS_SECONDS = 60.0
CATCH_UP_MODES = ("none", "latest", "all")
CatchUp = Literal["none", "latest", "all"]
#: A worker re-reads the list of schedules at most this often (seconds, real time).
REFRESH_SECONDS = 10.0
#: The name becomes part of run ids: `run_sched_<name>_<12 digits>` fits run_[…]{1,80}.
NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,61}")


@dataclass(frozen=True)
class Schedule:
    """A stored schedule; `next_tick` is its next cron time after the last tick handled
    (timezone-aware, in the schedule's timezone)."""

    name: str
    workflow_id: str
    cron: str
    timezone: str
    input: Any
    queue: str | None
    catch_up: CatchUp
    next_tick: datetime | None
    added_at: datetime
    last_tick: datetime | None = None

    @property
    def last_run_id(self) -> str | None:
        """The run of the last tick handled (None: no tick yet)."""
        return None if self.last_tick is None else tick_run_id(self.name, self.last_tick.timestamp())


def schedule_path(name: str) -> str:
    return f"{SCHEDULES_DIR}/{name}{SUFFIX}"


def ticks_path(name: str) -> str:
    return f"{TICKS_DIR}/{name}{SUFFIX}"


def tick_run_id(name: str, tick: float) -> str:
    return f"run_sched_{name}_{datetime.fromtimestamp(tick, timezone.utc):%Y%m%d%H%M}"


def _zone(name: str, tz: Any) -> ZoneInfo:
    if not isinstance(tz, str):
        raise ScheduleError(name, f"timezone is an IANA name such as 'Europe/Paris', not {tz!r}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(name, f"unknown timezone {tz!r}") from None


def ticks_after(cron: str, tz: ZoneInfo, after: float) -> Iterator[float]:
    """The cron times strictly after `after` (epoch seconds), in order, as epoch seconds."""
    for t in CronSim(cron, datetime.fromtimestamp(after, tz)):
        yield t.timestamp()


def _check_cron(name: str, cron: Any, tz: ZoneInfo) -> None:
    if not isinstance(cron, str):
        raise ScheduleError(name, f"cron is a cron expression string, not {cron!r}")
    try:
        CronSim(cron, datetime.now(tz))
    except CronSimError as e:
        raise ScheduleError(name, f"cron {cron!r}: {e}") from None


def add_schedule(world: Any, name: str, workflow: Workflow[Any, Any], *, cron: str,
                 timezone: str = "UTC", input: Any = None, queue: str | None = None,
                 catch_up: CatchUp = "latest") -> Schedule:
    """Store a schedule: workers given `workflow` start one run of it per tick of `cron`
    (in `timezone`) with `input`, through `queue` when one is named. The first tick is
    the first cron time strictly after now (the World's clock); adding `name` again
    replaces the schedule. Raises `ScheduleError` for a bad name, cron, timezone or
    catch_up, `SchemaValidationError` for input the workflow refuses — before anything
    is written."""
    from .api import resolve_world
    from .runner import input_json

    world = resolve_world(world)
    if not isinstance(name, str) or NAME_RE.fullmatch(name) is None:
        raise ScheduleError(str(name), "a schedule name matches [A-Za-z0-9_-]{1,61}")
    if not isinstance(workflow, Workflow):
        raise TypeError(f"{workflow!r} is not a workflow: decorate it with @little_workflow.workflow")
    tz = _zone(name, timezone)
    _check_cron(name, cron, tz)
    if catch_up not in CATCH_UP_MODES:
        raise ScheduleError(name, f"catch_up is one of {', '.join(CATCH_UP_MODES)}, not {catch_up!r}")
    if queue is not None:
        _check_queue(world, name, queue)
    value = input_json(workflow, input, tick_run_id(name, 0))
    doc = {
        "name": name, "workflowId": workflow.id, "cron": cron, "timezone": timezone,
        "input": value, "queue": queue, "catchUp": catch_up,
        "addedAt": to_iso(world.clock.now()),
        # Tells this schedule from one added again under its name (even at the same time).
        "generation": uuid.uuid4().hex,
    }
    world.write_document(schedule_path(name), doc)
    return _schedule(doc, None)


def remove_schedule(world: Any, name: str) -> bool:
    """Remove a schedule (runs already started are left alone); False when there was none."""
    from .api import resolve_world

    world = resolve_world(world)
    if not isinstance(name, str) or NAME_RE.fullmatch(name) is None:
        raise ScheduleError(str(name), "a schedule name matches [A-Za-z0-9_-]{1,61}")
    removed = world.remove_file(schedule_path(name))
    world.remove_file(ticks_path(name), durable=False)
    return bool(removed)


def list_schedules(world: Any) -> list[Schedule]:
    """The stored schedules, by name."""
    from .api import resolve_world

    world = resolve_world(world)
    out = []
    for doc in _read_all(world):
        out.append(_schedule(doc, _last_tick(world, doc)))
    return out


def _check_queue(world: Any, name: str, queue: Any) -> None:
    """A schedule's queue is declared before the schedule (`QueueNotFoundError`), as
    before any enqueue: a tick on a queue nobody declared would start nothing."""
    from .queues import read_queue

    if not isinstance(queue, str):
        raise ScheduleError(name, f"queue is a queue name, not {queue!r}")
    read_queue(world, queue)


def _read_all(world: Any) -> list[dict[str, Any]]:
    docs = []
    for file_name in world.list_dir(SCHEDULES_DIR):
        if not file_name.endswith(SUFFIX):
            continue
        doc = world.read_document(f"{SCHEDULES_DIR}/{file_name}")
        if isinstance(doc, dict):  # removed since the listing: gone
            docs.append(doc)
    return docs


def _last_tick(world: Any, doc: dict[str, Any]) -> float | None:
    """The last tick handled for this schedule (this generation of it), if any."""
    ticks = world.read_document(ticks_path(doc["name"]))
    if isinstance(ticks, dict) and ticks.get("generation") == doc.get("generation"):
        last = ticks.get("lastTick")
        return from_iso(last) if isinstance(last, str) else None
    return None


def _schedule(doc: dict[str, Any], last_tick: float | None) -> Schedule:
    tz = ZoneInfo(doc["timezone"])
    base = from_iso(doc["addedAt"]) if last_tick is None else last_tick
    nxt = next(ticks_after(doc["cron"], tz, base), None)
    return Schedule(
        name=doc["name"], workflow_id=doc["workflowId"], cron=doc["cron"],
        timezone=doc["timezone"], input=doc.get("input"), queue=doc.get("queue"),
        catch_up=doc["catchUp"],
        next_tick=None if nxt is None else datetime.fromtimestamp(nxt, tz),
        added_at=datetime.fromtimestamp(from_iso(doc["addedAt"]), tz),
        last_tick=None if last_tick is None else datetime.fromtimestamp(last_tick, tz),
    )


def due_ticks(catch_up: str, past: list[float], now: float) -> list[float]:
    """Of the ticks found past (in order), those to start."""
    if not past:
        return []
    if catch_up == "all":
        return past
    if catch_up == "latest":
        return past[-1:]
    return [t for t in past[-1:] if now - t <= NONE_LATENESS_SECONDS]


class ScheduleTicker:
    """A worker's part: at each sweep, start the due ticks of the schedules of the
    workflows it has, and say when the next tick is due."""

    def __init__(self, world: Any, workflows: dict[str, Workflow[Any, Any]]):
        self.world = world
        self.workflows = workflows
        # name -> (generation, last tick handled): what this worker knows of schedule-ticks/.
        self._handled: dict[str, tuple[Any, float | None]] = {}
        self.next_tick: float | None = None
        self._docs: list[dict[str, Any]] = []
        self._read_at: float | None = None  # time.monotonic() of the last listing

    def _schedules(self) -> list[dict[str, Any]]:
        if self._read_at is None or time.monotonic() - self._read_at >= REFRESH_SECONDS:
            self._docs = [d for d in _read_all(self.world)
                          if str(d.get("workflowId")) in self.workflows]
            self._read_at = time.monotonic()
        return self._docs

    def tick(self, now: float) -> list[str]:
        """Start what is due by `now`; returns the run ids created or found."""
        started: list[str] = []
        next_tick: float | None = None
        seen = set()
        for doc in self._schedules():
            name = doc.get("name")
            wf = self.workflows.get(str(doc.get("workflowId")))
            if wf is None or not isinstance(name, str):
                continue
            seen.add(name)
            try:
                started += self._tick_one(doc, wf, now)
                nxt = self._next(doc)
            except LittleWorkflowError as e:
                # One broken schedule (a run it cannot create) must not stop the others.
                logging.getLogger("little_workflow.worker").warning(
                    "schedule %s: %s", name, e)
                continue
            if nxt is not None and (next_tick is None or nxt < next_tick):
                next_tick = nxt
        for name in set(self._handled) - seen:
            del self._handled[name]
        self.next_tick = next_tick
        return started

    def _known_last(self, doc: dict[str, Any]) -> float | None:
        known = self._handled.get(doc["name"])
        if known is not None and known[0] == doc.get("generation"):
            return known[1]
        last = _last_tick(self.world, doc)
        self._handled[doc["name"]] = (doc.get("generation"), last)
        return last

    def _next(self, doc: dict[str, Any]) -> float | None:
        last = self._known_last(doc)
        base = from_iso(doc["addedAt"]) if last is None else last
        return next(ticks_after(doc["cron"], ZoneInfo(doc["timezone"]), base), None)

    def _tick_one(self, doc: dict[str, Any], wf: Workflow[Any, Any], now: float) -> list[str]:
        nxt = self._next(doc)
        if nxt is None or nxt > now:
            return []  # nothing due: no reads
        current = self.world.read_document(schedule_path(doc["name"]))
        if not isinstance(current, dict) or current.get("generation") != doc.get("generation"):
            self._read_at = None  # removed or replaced since it was read: list them again
            return []
        # Due by what this worker knew: read what others handled since.
        last = _last_tick(self.world, doc)
        self._handled[doc["name"]] = (doc.get("generation"), last)
        base = from_iso(doc["addedAt"]) if last is None else last
        past = []
        for t in ticks_after(doc["cron"], ZoneInfo(doc["timezone"]), base):
            if t > now:
                break
            past.append(t)
            if doc["catchUp"] != "all" and len(past) > 1:
                del past[0]  # only the latest matters
        created = [self._start(doc, wf, t) for t in due_ticks(doc["catchUp"], past, now)]
        if past:
            self.world.write_document(ticks_path(doc["name"]), {
                "generation": doc.get("generation"), "lastTick": to_iso(past[-1])})
            self._handled[doc["name"]] = (doc.get("generation"), past[-1])
        return created

    def _start(self, doc: dict[str, Any], wf: Workflow[Any, Any], tick: float) -> str:
        from .control import create_unless_exists
        from .queues import enqueue_tick
        from .runner import input_json

        run_id = tick_run_id(doc["name"], tick)
        queue = doc.get("queue")
        origin = {"schedule": {"name": doc["name"], "tick": to_iso(tick)}}
        try:
            if queue is not None:
                enqueue_tick(self.world, wf, input_json(wf, doc.get("input"), run_id),
                             queue=queue, run_id=run_id, extra=origin)
            else:
                create_unless_exists(wf, doc.get("input"), self.world, run_id, extra=origin)
        except RunLockedError:
            pass  # another worker is creating this tick's run right now
        return run_id
