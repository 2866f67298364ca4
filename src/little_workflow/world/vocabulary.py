"""The words a run's log is written in, named once: run statuses, the events that end a
run, the events that belong to an integration, the inline size limit — and how a run's
status follows from its events, the one rule the runtime (`RunLog`) and the catalogue
(`apply_change`) both fold with, so that `lw.get_run_state` and `lw.list_runs` never
disagree on a run's status."""

from __future__ import annotations

from typing import Final, Literal, Mapping

#: "unknown": a log with no `run.created` — one that only holds an integration's data
#: (`OWNER_EVENTS`), or a run id nothing was appended under.
RunStatus = Literal["created", "running", "waiting", "completed", "failed", "cancelled", "unknown"]
RUN_STATUSES: Final[tuple[RunStatus, ...]] = (
    "created", "running", "waiting", "completed", "failed", "cancelled", "unknown")

RUN_CREATED: Final = "run.created"
RUN_STARTED: Final = "run.started"
RUN_COMPLETED: Final = "run.completed"
RUN_FAILED: Final = "run.failed"
RUN_CANCELLED: Final = "run.cancelled"

#: The events that end a run, each with the status it ends in.
RUN_ENDINGS: Final[Mapping[str, RunStatus]] = {
    RUN_COMPLETED: "completed", RUN_FAILED: "failed", RUN_CANCELLED: "cancelled"}
RUN_ENDING_EVENTS: Final = frozenset(RUN_ENDINGS)
#: In this order wherever they are listed to a user (`little gc --status`).
FINISHED_STATUSES: Final[tuple[RunStatus, ...]] = ("completed", "failed", "cancelled")

#: The events that open or close what a run waits for (a durable sleep, a wait for a
#: signal); while a run runs, an open one makes it "waiting".
WAIT_EVENTS: Final = frozenset({
    "timer.scheduled", "timer.fired", "wait.started", "wait.timed_out", "wait.completed"})

#: The first event of a LangGraph thread's owner run (ext/langgraph.py).
LANGGRAPH_THREAD_EVENT: Final = "langgraph.thread"
#: The first event of a run that holds an integration's data and never runs (workers and
#: gc leave it alone): its type → the workflow id the catalogue lists it under.
OWNER_EVENTS: Final[Mapping[str, str]] = {LANGGRAPH_THREAD_EVENT: "langgraph"}

#: A payload value (a step output, a run's output or input) larger than this, in bytes of
#: canonical JSON, is stored as an artifact and the event holds a reference to it: events
#: stay small enough to read a whole log into memory and to fit one object-store PUT.
INLINE_LIMIT: Final = 64 * 1024


def status_after(status: RunStatus, event_type: str, waits_open: bool) -> RunStatus:
    """A run's status once an event of `event_type` is folded in, given its status before
    and whether, after that event, the run has an open wait. `run.created` begins the
    lifecycle; an ending event ends it and nothing after moves it; `run.started` and the
    wait events switch a live run between running and waiting; other events leave it."""
    ending = RUN_ENDINGS.get(event_type)
    if ending is not None:
        return ending
    if event_type == RUN_CREATED:
        return "created"
    if status in FINISHED_STATUSES:
        return status
    if event_type == RUN_STARTED or (event_type in WAIT_EVENTS and status in ("running", "waiting")):
        return "waiting" if waits_open else "running"
    return status
