"""Incarnations: the log fences every executor of a run, with or without a lock: one
executor per run, on every filesystem.

1. Each execution of a run begins with `run.started {start: N}`, N one more than the
   starts its executor read; every record it writes afterwards carries `incarnation: N`.
2. The World refuses, at the append, whatever a single executor could not have written:
   a `run.started` whose start does not rise above the newest one it knows
   (`RunLockedError`: another process started the run first), a `run.created` that
   would not be event 1 (`RunLockedError`: created meanwhile), and a record whose
   incarnation is older than the newest `run.started` (`LeaseLostError`: another
   execution started after this one, which stops).
3. A log has no holes, so an append lands only at the next free sequence; one that loses
   it reads what took it (the newest start included) before it may try again. Nothing
   of an older execution can therefore land after a newer `run.started`: at worst the
   loser's step in flight ran once more, as after a crash.
4. The executor also stops as soon as it reads another execution's `run.started` (the
   runtime, when it folds others' events), and `little verify` names any history that
   breaks these rules (`history_problems`).
"""

from __future__ import annotations

from typing import Any, Iterable

from ..errors import LeaseLostError, RunLockedError

#: The payload key naming the execution a record belongs to.
INCARNATION = "incarnation"


def check_append(run_id: str, type_: str, payload: Any, sequence: int, newest_start: int) -> None:
    """Refuse an append no single executor could make after the log's newest start
    (`newest_start`, 0 when none) at `sequence` (rule 2)."""
    if not isinstance(payload, dict):
        return
    if type_ == "run.started":
        start = payload.get("start")
        if type(start) is int and start <= newest_start:
            raise RunLockedError(run_id, None, f" (another process started its execution "
                                 f"{newest_start} first)")
    elif type_ == "run.created":
        if sequence != 1:
            raise RunLockedError(run_id, None, " (another process created it meanwhile)")
    else:
        incarnation = payload.get(INCARNATION)
        if type(incarnation) is int and incarnation < newest_start:
            raise LeaseLostError(run_id, (
                f"execution {newest_start} of this run started in another process after this "
                f"one ({incarnation}), which stops without appending {type_!r}"))


def started_elsewhere(own_start_sequence: int, event: Any) -> bool:
    """True when `event` is another execution's `run.started`, after this one's (rule 4)."""
    return event.type == "run.started" and event.sequence > own_start_sequence


def history_problems(records: Iterable[tuple[int, str, Any]]) -> list[tuple[str, str]]:
    """What in one run's history (`(sequence, type, payload)` in log order) no single
    executor writes, as `(rule, message)`; each message names sequences and paths:
    `committed-twice` a success after a success of one step path; `attempt-ended-twice`
    two step.succeeded/step.failed of one attempt; `older-incarnation` a record of an
    execution older than a run.started before it; `start-not-rising`."""
    problems: list[tuple[str, str]] = []
    newest: tuple[int, int] | None = None  # (start, its sequence)
    ends: dict[tuple[str, Any], tuple[int, str]] = {}  # (path, attempt) -> first end record
    succeeded: dict[str, int] = {}
    for sequence, type_, payload in records:
        if not isinstance(payload, dict):
            continue
        if type_ == "run.started":
            start = payload.get("start")
            if type(start) is int:
                if newest is not None and start <= newest[0]:
                    problems.append(("start-not-rising", f"run.started at {sequence} has start "
                                     f"{start}, not above start {newest[0]} at {newest[1]}"))
                if newest is None or start > newest[0]:
                    newest = (start, sequence)
            continue
        incarnation = payload.get(INCARNATION)
        if type(incarnation) is int and newest is not None and incarnation < newest[0]:
            path = payload.get("stepPath")
            where = f" (step {path})" if isinstance(path, str) else ""
            problems.append(("older-incarnation", f"{type_} at {sequence}{where} belongs to "
                             f"execution {incarnation}, after run.started {newest[0]} at "
                             f"{newest[1]}"))
        if type_ not in ("step.succeeded", "step.failed"):
            continue
        path = payload.get("stepPath")
        if not isinstance(path, str):
            continue
        attempt = payload.get("attempt")
        earlier = ends.get((path, attempt)) if type(attempt) is int else None
        if earlier is not None:
            problems.append(("attempt-ended-twice", f"step {path} attempt {attempt} ended "
                             f"twice: {earlier[1]} at {earlier[0]} and {type_} at {sequence}"))
        else:
            ends[(path, attempt)] = (sequence, type_)
        if type_ == "step.succeeded":
            if path in succeeded and earlier is None:
                problems.append(("committed-twice", f"step {path} committed twice: "
                                 f"step.succeeded at {succeeded[path]} and at {sequence}"))
            succeeded.setdefault(path, sequence)
    return problems
