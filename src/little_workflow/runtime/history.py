"""Resuming checks the code against the log before it calls anything new: changed code
never re-runs history, and never runs on past a point where it asks for other records.

When code resumes a run, every record the log completed on the workflow's own path —
steps, timers, waits, recorded values (`ctx.now`, `ctx.uuid`), memory reads and writes,
kept and reused plans, patch markers, sub-run calls, stream writes and closes — must be
asked for again before the execution calls or appends anything: a step the log does not
hold, a sleep or wait going on, a value, the run's end. Otherwise `ReplayDivergenceError` names the log's record and the
code's, and the run stays as it was (not failed): code that fits its log can continue it.
`replay_run` checks code against a log by these same rules (it calls and appends nothing).

- A step counts once finished, a timer or wait once recorded. A step that never finished
  (its process died in it) is run again as on any resume; so is a sub-run call.
- Ungrouped steps asked for from the workflow body come in the log's order.
- A record that lies inside the span of another covers nothing on its own: what a
  finished step's function recorded (nested steps) is covered by that step, which is
  served without running its function; what was written after a sleep, wait, step or
  sub-run call began and before it ended (or after it, while it never ended) came from
  code unwinding from that point (a run suspended at a wait, Ctrl-C in a step: an agent
  framework's cleanup) or from concurrent tasks, and a later execution that goes on
  from that point need not ask for it.
- Signals, cancel requests and the runtime's own bookkeeping do not count.
- Concurrency: the body's task is checked at once. A task of a `ctx.parallel` group or of a
  bare `asyncio.gather` may reach something new while a sibling has still to ask for its
  own records (the log interleaves them in whatever order they ran); it waits while the
  others go on asking, and diverges once nobody asked for anything for SETTLE_SECONDS.
- `ctx.patched(id)` asks whether the log holds a record the code has not reached yet.
"""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple

from ..errors import ReplayDivergenceError
from .state import RunLog

#: A record as the code asks for it: ("step", path), ("timer", path), ("wait", path),
#: ("call", callPath), ("value", "now/0"), ("memory", scope, path, index),
#: ("memory.written", scope, path, idempotencyKey), ("plan.kept", name, contentHash),
#: ("plan.reused", name), ("patch", patchId), ("stream", position), ("stream.closed", key).
Key = tuple[Any, ...]

#: Appends that never need the log's records asked for first: the execution's own
#: start, and the end of a run cancelled from outside.
FREE_EVENTS = frozenset({"run.started", "run.cancelled"})

#: A task other than the body's that reaches something new waits this long without any
#: record being asked for by anyone before it calls it a divergence.
SETTLE_SECONDS = 1.0


class Record(NamedTuple):  # a tuple: a resume builds one per record of its log
    sequence: int  # where the log holds it (its first event)
    key: Key
    finished: bool  # must be asked for again before anything new


#: How an error names a record, by its kind (`{0}`, `{1}`: the key's parts after the kind).
_DESCRIPTIONS = {
    "step": "step {0!r}",
    "wait": "wait {0!r}",
    "timer": "sleep {0!r}",
    "call": "sub-run call {0!r}",
    "memory": "read of memory {0}/{1}",
    "memory.written": "write to memory {0}/{1}",
    "plan.kept": "ctx.plans.keep({0!r})",
    "plan.reused": "ctx.plans.reuse({0!r})",
    "patch": "ctx.patched({0!r})",
    "stream": "stream write {0} (ctx.write_stream)",
    "stream.closed": "ctx.close_stream({0!r})",
}


def describe(key: Key) -> str:
    kind = key[0]
    if kind == "value":
        name = str(key[1]).partition("/")[0]
        return f"recorded value {key[1]!r} (ctx.{name}())"
    template = _DESCRIPTIONS.get(kind)
    if template is not None:
        return template.format(*key[1:])
    return str(key[1]) if len(key) > 1 else kind


def path_of(key: Key) -> str:
    """The step path an error names for a record (a made-up one for records that have none)."""
    kind = key[0]
    if kind in ("step", "timer", "wait", "call", "value"):
        return str(key[1])
    if kind in ("memory", "memory.written"):
        return f"memory/{key[1]}/{key[2]}"
    if kind in ("plan.kept", "plan.reused"):
        return f"plan/{key[1]}"
    if kind == "patch":
        return f"patch/{key[1]}"
    if kind in ("stream", "stream.closed"):
        return f"stream/{key[1]}"
    return str(key[-1])


def key_of(type_: str, payload: Any) -> Key:
    """The record an append of this type belongs to, as the code asked for it."""
    p = payload if isinstance(payload, dict) else {}
    path = p.get("stepPath")
    if type_ in ("run.completed", "run.failed"):
        return ("end",)
    if type_.startswith("step."):
        return ("step", path)
    if type_.startswith("timer."):
        return ("timer", path)
    if type_.startswith("wait."):
        return ("wait", path)
    if type_ == "value.recorded":
        return ("value", p.get("key"))
    if type_ == "memory.read":
        return ("memory", p.get("scope"), p.get("path"), p.get("index"))
    if type_.startswith("memory."):
        return ("memory.written", p.get("scope"), p.get("path"), None)
    if type_ == "plan.kept":
        return ("plan.kept", p.get("name"), p.get("contentHash"))
    if type_ == "plan.reused":
        return ("plan.reused", p.get("name"))
    if type_ == "patch.marked":
        return ("patch", p.get("patchId"))
    if type_ == "stream.written" and isinstance(p.get("position"), int):
        return ("stream", p["position"])
    if type_ == "stream.closed":
        return ("stream.closed", p.get("key"))
    if type_.startswith("harness.tool_call.") and isinstance(p.get("callPath"), str):
        return ("call", p["callPath"])
    return (type_, path if isinstance(path, str) else type_)


def _describe_asked(type_: str, payload: Any, key: Key) -> tuple[str, str]:
    """(step path, words) for what the code asked for."""
    if key == ("end",):
        error = payload.get("error") if isinstance(payload, dict) else None
        if type_ == "run.failed" and isinstance(error, dict):
            return "(end)", f"the workflow's end (it raised {error.get('type')}: {error.get('message')})"
        return "(end)", "the workflow's end (it returns)"
    return path_of(key), describe(key)


def _records(log: RunLog) -> list[Record]:
    """The records a code must ask for, in log order, without those inside another's span."""
    records = [Record(rec.first_sequence, ("step", path), rec.finished_at > 0)
               for path, rec in log.steps.items()]
    records += [Record(int(t["sequence"]), ("timer", path), True) for path, t in log.timers.items()]
    records += [Record(int(w["sequence"]), ("wait", path), True) for path, w in log.waits.items()]
    records += [Record(seq, key, True) for key, seq in log.marks.items()]
    records += [Record(int(c["sequence"]), ("call", path), c.get("status") == "succeeded")
                for path, c in log.sub_runs.items() if isinstance(c.get("sequence"), int)]
    records.sort()  # by sequence: unique per record
    # Spans: a step from its first start to its end, a sleep from scheduled to fired, a
    # wait from started to completed, a sub-run call from started to its result; one
    # that never ended reaches past the log's end.
    never = log.last_sequence + 1
    opened = [(r.first_sequence, r.finished_at or never) for r in log.steps.values()]
    opened += [(int(t["sequence"]), int(t.get("firedAt") or never)) for t in log.timers.values()]
    opened += [(int(w["sequence"]), int(w.get("completedAt") or never))
               for w in log.waits.values()]
    opened += [(int(c["sequence"]), never) for c in log.sub_runs.values()
               if isinstance(c.get("sequence"), int) and c.get("status") != "succeeded"]
    opened.sort()
    spans: list[list[int]] = []
    for start, end in opened:
        if spans and start < spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([start, end])
    kept: list[Record] = []
    i = 0
    for r in records:  # both in order: one sweep
        while i < len(spans) and spans[i][1] <= r.sequence:
            i += 1
        if i < len(spans) and spans[i][0] < r.sequence:
            continue  # strictly inside a span
        kept.append(r)
    return kept


class RunHistory:
    """The records a run's log held when this execution began, and which of them the
    code has asked for again."""

    def __init__(self, run_id: str, records: list[Record]):
        """`records` in log order."""
        self.run_id = run_id
        self._unasked: dict[Key, Record] = {r.key: r for r in records}
        self._due = [r for r in records if r.finished]
        self._due_steps = [r for r in self._due if r.key[0] == "step"]
        self._next_due = self._next_step = 0  # below these, every record was asked for
        self.asks = 0  # records asked for so far: how settling sees others progress
        self.diverged: ReplayDivergenceError | None = None
        self.resuming = True  # False: `replay_run` checks the code, calling and appending nothing

    @classmethod
    def of(cls, log: RunLog) -> "RunHistory | None":
        """None when the log holds nothing the code must ask for (a new run)."""
        records = _records(log)
        return cls(log.run_id, records) if records else None

    def ask(self, key: Key) -> None:
        if self._unasked.pop(key, None) is not None:
            self.asks += 1

    @property
    def ahead(self) -> bool:
        """The log holds a record the code has not reached yet (finished or not)."""
        return bool(self._unasked)

    def first_due(self) -> Record | None:
        """The earliest finished record not asked for yet."""
        due, i, unasked = self._due, self._next_due, self._unasked
        while i < len(due) and due[i].key not in unasked:
            i += 1
        self._next_due = i
        return due[i] if i < len(due) else None

    def first_due_step(self) -> Record | None:
        steps, i, unasked = self._due_steps, self._next_step, self._unasked
        while i < len(steps) and steps[i].key not in unasked:
            i += 1
        self._next_step = i
        return steps[i] if i < len(steps) else None

    async def settle(self) -> Record | None:
        """Wait while other tasks of the run go on asking for records; the earliest
        record still due once they stopped (None: nothing is due any more)."""
        loop = asyncio.get_running_loop()
        asks, quiet_since, pause = self.asks, loop.time(), 0.0
        while True:
            if self.diverged is not None:
                raise self.diverged
            due = self.first_due()
            if due is None:
                return None
            if self.asks != asks:
                asks, quiet_since, pause = self.asks, loop.time(), 0.0
            elif loop.time() - quiet_since >= SETTLE_SECONDS:
                return due
            await asyncio.sleep(pause)
            pause = min(0.05, pause * 2 or 0.001)

    def diverge(self, log: RunLog, due: Record, type_: str, payload: Any,
                key: Key | None = None) -> ReplayDivergenceError:
        """The error for code that asks for `key` (or appends `type_`) while the log
        still holds `due`; every task of this execution raises it from now on."""
        if self.diverged is not None:
            return self.diverged
        key = key if key is not None else key_of(type_, payload)
        code_path, code_words = _describe_asked(type_, payload, key)
        log_path, log_words = path_of(due.key), describe(due.key)
        found = (f"the log's next record is {log_words} (event {due.sequence}), but this code "
                 f"asks for {code_words} first")
        fork = f"lw.fork_run(world, {self.run_id!r}, from_step={_fork_point(log, due)!r})"
        if self.resuming:
            message = (
                f"{found}. Nothing was called or recorded (but this execution's start); the "
                f"run stays resumable: continue it with code that asks for {log_words} there "
                f"(the code it ran with, or a branch on ctx.patched(...)), or fork it onto "
                f"this code: {fork}")
        else:
            message = (f"{found}: code that fits this run asks for {log_words} there (or "
                       f"branches on ctx.patched(...)); to run this code from that point: {fork}")
        self.diverged = ReplayDivergenceError(self.run_id, code_path, message,
                                              log_step_path=log_path, resuming=self.resuming)
        return self.diverged


def _fork_point(log: RunLog, due: Record) -> str:
    """Where a fork onto the new code starts so that it leaves `due` out: the record's own
    step, sleep or wait, else the last fork point before it."""
    from .fork import fork_points

    if due.key[0] in ("step", "timer", "wait"):
        return str(due.key[1])
    before = [path for path, sequence in fork_points(log).items() if sequence <= due.sequence]
    return before[-1] if before else "PATH"
