"""The history checker of the chaos test: reads every run's log and the step ledger and
says which rule of DESIGN §10/§11/§13 a history breaks.

Inputs:
- `logs`: run id -> that run's events (objects with `sequence`, `type`, `payload`,
  `created_at`), or the exception reading the log raised (`read_world` builds it).
- `ledger`: one dict per step execution, in the order they were written (see
  `chaos.flows.ledgered`): `run, inc, path, attempt, pid, started, ended, outcome,
  output` (output `{"token", "value"}`).

Rules (the `rule` of a `Violation`):
- `hole`            a log cannot be read (EventLogCorruptError) or skips a sequence.
- `after-terminal`  an event after `run.completed/failed/cancelled` (other than
                    `outer_loop.cycle_completed`), or a second terminal event.
- `committed-twice` two `step.succeeded` for one step path in one log.
- `unledgered-commit` a committed step output no ledgered execution of that run and
                    path returned (token unknown, or another output, path or run).
- `other-incarnation` a committed step output returned by an execution of another
                    incarnation of the run (a process that remembered a deleted run).
- `ran-after-commit` an execution of a step started (more than `fence_slack` seconds)
                    after that step's success was committed.
- `overlapping-attempts` two executions of one step in one incarnation overlapped in
                    time (checked with `exclusive=True`: where nothing may pause a lock
                    holder past its lease).
- `signal-taken-twice` two waits took one `signal.received`.
- `signal-lost`     a wait timed out (returned None) although a matching event no
                    earlier wait took was in the log before its `wait.timed_out`.
- `signal-order`    a wait took an event that is not a matching signal, one appended
                    after its timeout, or not the first one free; or returned None
                    without timing out.
- `wrong-wait-result` what the wait returned (recorded by the step named in
                    `wait_result_steps`) is not the payload of the event its log says
                    it took.
- `cancel-not-propagated` (final) a cancelled run's sub-run is not finished.
- `unfinished`      (final) a run has no terminal event after the drain.
- `failed`          a run failed with an error `allowed_failures` does not name (`Type`
                    or `Type~text in its message`).
- `attempt-ended-twice`, `older-incarnation`, `start-not-rising`: what no single
                    executor writes (DESIGN §15), the rules `little verify` applies
                    (`little_workflow.world.incarnations.history_problems`).

What users see (`check_what_users_see`, after the drain, with the catalogue as
`lw.list_runs` shows it — `read_catalogue` — and the logs as they were before the drain):
- `catalogue-missing` a run with a log that no listing shows.
- `catalogue-ghost`   a listed run whose log is gone.
- `catalogue-status`  a listed status other than the fold of the run's log.
- `catalogue-filter`  `list_runs(status=s)` leaves out a run in status s, or shows one
                    that is not.
- `idempotency-repeated` one log holds two `signal.received` sent with the same
                    idempotency key (by the envelope, or by the `key` the sender put in
                    the payload: a sender that lost its key leaves it there).
- `sub-run-not-cancelled` a run ended cancelled while a sub-run of it was unfinished and
                    not asked to cancel: before the drain, such a sub-run is unfinished
                    with no `run.cancel_requested`; in the final logs, it ended after
                    its parent's `run.cancelled` without a request from before it.
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Mapping

from little_workflow.world.models import thaw

TERMINAL = ("run.completed", "run.failed", "run.cancelled")
AFTER_TERMINAL_ALLOWED = ("outer_loop.cycle_completed",)


@dataclass(frozen=True)
class Violation:
    rule: str
    run_id: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.run_id}: {self.detail}"


@dataclass
class Options:
    wait_result_steps: Mapping[str, str] = field(default_factory=dict)
    incarnation_key: str = "uuid/0"
    final: bool = True
    #: Seconds an execution may start after its step's commit time (`createdAt` is
    #: stamped before the write; a paused writer publishes later). None: rule off.
    fence_slack: float | None = 1.0
    exclusive: bool = False
    allowed_failures: tuple[str, ...] = ()


def plain(value: Any) -> Any:
    return thaw(value)


def epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    return datetime.fromisoformat(iso).timestamp()


def read_world(world: Any) -> dict[str, Any]:
    """Every run's log as its events, or the exception reading it raised."""
    logs: dict[str, Any] = {}
    for run_id in world.list_runs():
        try:
            logs[run_id] = world.list_events(run_id)
        except Exception as e:  # noqa: BLE001 - a log that cannot be read is a finding
            logs[run_id] = e
    return logs


def read_ledger(path: str) -> list[dict[str, Any]]:
    out = []
    try:
        with open(path) as f:
            for n, line in enumerate(f):
                if line.strip():
                    rec = json.loads(line)
                    rec["line"] = n
                    out.append(rec)
    except FileNotFoundError:
        pass
    return out


def incarnation(events: list[Any], key: str) -> str | None:
    for e in events:
        p = plain(e.payload)
        if e.type == "value.recorded" and isinstance(p, dict) and p.get("key") == key:
            return str(p.get("value"))
    return None


def status(events: list[Any]) -> str | None:
    for e in events:
        if e.type in TERMINAL:
            return e.type.split(".", 1)[1]
    return None


def check(logs: Mapping[str, Any], ledger: Iterable[dict[str, Any]],
          options: Options | None = None) -> list[Violation]:
    opts = options or Options()
    ledger = list(ledger)
    by_token = {}
    for rec in ledger:
        token = (rec.get("output") or {}).get("token")
        if token:
            by_token[token] = rec
    by_step: dict[tuple[str, str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for rec in ledger:
        by_step[(rec["run"], rec["inc"], rec["path"])].append(rec)
    out: list[Violation] = []
    readable: dict[str, list[Any]] = {}
    for run_id, events in logs.items():
        if isinstance(events, BaseException):
            out.append(Violation("hole", run_id, f"{type(events).__name__}: {events}"))
            continue
        if not events:
            continue  # listed, but a deletion a crash left half done was finished on reading
        readable[run_id] = events
        out += check_sequences(run_id, events)
        out += check_terminal(run_id, events)
        out += check_steps(run_id, events, by_token, by_step, opts)
        out += check_signals(run_id, events, opts)
        out += check_failure(run_id, events, opts)
        out += check_one_executor(run_id, events)
        if opts.final and status(events) is None:
            out.append(Violation("unfinished", run_id, f"no terminal event after the drain "
                                 f"(last: {events[-1].type if events else 'none'})"))
    if opts.exclusive:
        out += check_overlaps(by_step)
    if opts.final:
        out += check_cancel_propagation(readable)
    return out


def check_sequences(run_id: str, events: list[Any]) -> list[Violation]:
    for expected, e in enumerate(events, start=1):
        if e.sequence != expected:
            return [Violation("hole", run_id, f"sequence {e.sequence} where {expected} belongs")]
    return []


def check_terminal(run_id: str, events: list[Any]) -> list[Violation]:
    end = next((e for e in events if e.type in TERMINAL), None)
    if end is None:
        return []
    after = [f"{e.sequence}:{e.type}" for e in events
             if e.sequence > end.sequence and e.type not in AFTER_TERMINAL_ALLOWED]
    if after:
        return [Violation("after-terminal", run_id,
                          f"after {end.type} at {end.sequence}: {', '.join(after[:6])}")]
    return []


def check_steps(run_id: str, events: list[Any], by_token: dict[str, dict[str, Any]],
                by_step: dict[tuple[str, str, str], list[dict[str, Any]]],
                opts: Options) -> list[Violation]:
    out = []
    inc = incarnation(events, opts.incarnation_key)
    created = next((plain(e.payload) for e in events if e.type == "run.created"), None) or {}
    forked = isinstance(created, dict) and created.get("forkedFrom") is not None
    first_start = next((e.sequence for e in events if e.type == "run.started"), None)
    commits: dict[str, list[Any]] = collections.defaultdict(list)
    for e in events:
        if e.type == "step.succeeded":
            commits[plain(e.payload).get("stepPath")].append(e)
    for path, found in commits.items():
        if len(found) > 1:
            out.append(Violation("committed-twice", run_id, f"step {path} committed "
                                 f"{len(found)} times (sequences {[e.sequence for e in found]})"))
        for e in found:
            p = plain(e.payload)
            output = p.get("output")
            token = output.get("token") if isinstance(output, dict) else None
            rec = by_token.get(token) if token else None
            copied = forked and (first_start is None or e.sequence < first_start)
            if rec is None:
                out.append(Violation("unledgered-commit", run_id, f"step {path} at {e.sequence}: "
                                     f"no ledgered execution returned {output!r}"))
                continue
            if rec["path"] != path or rec["output"] != output or (
                    rec["run"] != run_id and not copied):
                out.append(Violation("unledgered-commit", run_id, f"step {path} at {e.sequence}: "
                                     f"{output!r} was returned by {rec['run']}/{rec['path']}"))
                continue
            if inc is not None and rec["inc"] != inc:
                out.append(Violation("other-incarnation", run_id, (
                    f"step {path} at {e.sequence} was returned by incarnation {rec['inc']} "
                    f"(pid {rec['pid']}), the log is incarnation {inc}")))
                continue
            if opts.fence_slack is not None and not copied:
                committed_at = epoch(e.created_at)
                later = [r for r in by_step[(run_id, rec["inc"], path)]
                         if r["line"] > rec["line"] and committed_at is not None
                         and r["started"] > committed_at + opts.fence_slack]
                if later:
                    r = later[0]
                    out.append(Violation("ran-after-commit", run_id, (
                        f"step {path} committed at {e.sequence} ({e.created_at}) ran again in "
                        f"pid {r['pid']} (attempt {r['attempt']}) "
                        f"{r['started'] - committed_at:.2f} s later")))
    return out


def check_one_executor(run_id: str, events: list[Any]) -> list[Violation]:
    """DESIGN §15's rules, as `little verify` applies them (`committed-twice` is this
    checker's own rule above)."""
    from little_workflow.world.incarnations import history_problems

    records = [(e.sequence, e.type, plain(e.payload)) for e in events]
    return [Violation(rule, run_id, message) for rule, message in history_problems(records)
            if rule != "committed-twice"]


def check_overlaps(by_step: dict[tuple[str, str, str], list[dict[str, Any]]]) -> list[Violation]:
    """From the ledger alone: it holds every incarnation, also of runs deleted since."""
    out = []
    for (run_id, inc, path), recs in by_step.items():
        ordered = sorted(recs, key=lambda r: r["started"])
        for a, b in zip(ordered, ordered[1:], strict=False):
            if b["started"] < a["ended"] and a["pid"] != b["pid"]:
                out.append(Violation("overlapping-attempts", run_id, (
                    f"step {path} (incarnation {inc}) ran in pid {a['pid']} and pid "
                    f"{b['pid']} at once ({b['started']:.3f} < {a['ended']:.3f})")))
                break
    return out


def check_signals(run_id: str, events: list[Any], opts: Options) -> list[Violation]:
    out = []
    signals: dict[int, tuple[Any, Any]] = {}
    timed_out: dict[str, int] = {}
    completions = []
    results: dict[str, Any] = {}
    for e in events:
        p = plain(e.payload)
        if not isinstance(p, dict):
            continue
        if e.type == "signal.received":
            signals[e.sequence] = (p.get("name"), p.get("payload"))
        elif e.type == "wait.timed_out":
            timed_out.setdefault(p.get("stepPath"), e.sequence)
        elif e.type == "wait.completed":
            completions.append((e.sequence, p))
        elif e.type == "step.succeeded":
            output = p.get("output")
            if isinstance(output, dict):
                results.setdefault(p.get("stepPath"), output.get("value"))
    taken: dict[int, str] = {}
    for seq, p in completions:
        path, name, took = p.get("stepPath"), p.get("name"), p.get("signalSequence")
        limit = timed_out.get(path)
        free = [s for s in sorted(signals) if signals[s][0] == name and s not in taken
                and s < seq and (limit is None or s < limit)]
        if took is None:
            if limit is None:
                out.append(Violation("signal-order", run_id, f"wait {path} completed at {seq} "
                                     "with nothing, yet never timed out"))
            elif free:
                out.append(Violation("signal-lost", run_id, (
                    f"wait {path} timed out at {limit} and returned None, but event "
                    f"{free[0]} ({name!r}) arrived before and no wait took it")))
        elif took not in signals or signals[took][0] != name:
            out.append(Violation("signal-order", run_id, f"wait {path} took sequence {took}, "
                                 f"which is no {name!r} event"))
        elif took in taken:
            out.append(Violation("signal-taken-twice", run_id, (
                f"event {took} taken by wait {taken[took]} and again by wait {path}")))
        elif took > seq or (limit is not None and took > limit):
            out.append(Violation("signal-order", run_id, (
                f"wait {path} took event {took}, appended after its timeout "
                f"({limit}) or its completion ({seq})")))
        elif free and free[0] < took:
            out.append(Violation("signal-order", run_id, (
                f"wait {path} took event {took} while event {free[0]} came first")))
        if isinstance(took, int):
            taken.setdefault(took, path)
        returned = plain(signals[took][1]) if took in signals else None
        step = opts.wait_result_steps.get(path)
        if step is not None and step in results and results[step] != returned:
            out.append(Violation("wrong-wait-result", run_id, (
                f"wait {path} returned {results[step]!r} (recorded by step {step}), but its "
                f"log says it took event {took} = {returned!r}")))
    return out


def check_failure(run_id: str, events: list[Any], opts: Options) -> list[Violation]:
    for e in events:
        if e.type == "run.failed":
            error = plain(e.payload).get("error") or {}
            if not any(allowed(error, entry) for entry in opts.allowed_failures):
                return [Violation("failed", run_id, f"run failed: {error}")]
    return []


def allowed(error: dict[str, Any], entry: str) -> bool:
    """`Type` or `Type~text`: an error of that type (whose message holds the text)."""
    kind, _, text = entry.partition("~")
    return error.get("type") == kind and text in str(error.get("message", ""))


def sub_run_ids(events: list[Any]) -> list[str]:
    out = []
    for e in events:
        if e.type == "harness.tool_call.started":
            args = plain(e.payload).get("args") or {}
            if isinstance(args.get("subRunId"), str):
                out.append(args["subRunId"])
    return out


def check_cancel_propagation(logs: Mapping[str, list[Any]]) -> list[Violation]:
    out = []
    for run_id, events in logs.items():
        if status(events) != "cancelled":
            continue
        for sub in sub_run_ids(events):
            sub_events = logs.get(sub)
            if sub_events and status(sub_events) is None:
                out.append(Violation("cancel-not-propagated", run_id, (
                    f"run cancelled, its sub-run {sub} is still unfinished "
                    f"(last event {sub_events[-1].type})")))
    return out


# ---- reporting --------------------------------------------------------------------------

def describe_event(e: Any) -> str:
    payload = json.dumps(plain(e.payload), sort_keys=True, default=str)
    if len(payload) > 160:
        payload = payload[:157] + "..."
    return f"  {e.sequence:>4} {e.created_at} {e.type} {payload}"


def describe_run(run_id: str, logs: Mapping[str, Any], ledger: list[dict[str, Any]],
                 raw: Mapping[str, list[tuple[int, bytes]]]) -> str:
    lines = [f"--- run {run_id}"]
    events = logs.get(run_id)
    if isinstance(events, BaseException):
        lines.append(f"  (unreadable: {type(events).__name__}: {events})")
        lines += [f"  {seq:>4} (stored) {data[:200]!r}" for seq, data in raw.get(run_id, [])]
    elif events is None:
        lines.append("  (no log)")
    else:
        lines += [describe_event(e) for e in events]
    mine = [r for r in ledger if r["run"] == run_id]
    if mine:
        lines.append(f"  ledger ({len(mine)} executions):")
        for r in mine:
            lines.append(f"    #{r['line']} inc={r['inc'][:8]} {r['path']} attempt={r['attempt']} "
                         f"pid={r['pid']} {r['outcome']} {json.dumps(r['output'])} "
                         f"[{r['started']:.3f}..{r['ended']:.3f}]")
    return "\n".join(lines)


def read_raw(world: Any, logs: Mapping[str, Any]) -> dict[str, list[tuple[int, bytes]]]:
    """What storage holds for each unreadable log (the events around the hole)."""
    out = {}
    for run_id, events in logs.items():
        if isinstance(events, BaseException):
            try:
                out[run_id] = list(world.events.read_after(run_id, 0))
            except Exception:  # noqa: BLE001 - best effort, for the report only
                out[run_id] = []
    return out


def format_report(violations: list[Violation], logs: Mapping[str, Any],
                  ledger: list[dict[str, Any]], header: str, runs_shown: int = 4,
                  raw: Mapping[str, list[tuple[int, bytes]]] | None = None) -> str:
    counts = collections.Counter(v.rule for v in violations)
    lines = [header, f"{len(violations)} violations: {dict(counts)}"]
    lines += [f"  {v}" for v in violations[:40]]
    shown: list[str] = []
    for v in violations:  # one offending history per rule first, then more
        if v.run_id not in shown and v.rule not in {w.rule for w in violations
                                                     if w.run_id in shown}:
            shown.append(v.run_id)
    for v in violations:
        if len(shown) >= runs_shown:
            break
        if v.run_id not in shown:
            shown.append(v.run_id)
    for run_id in shown[:max(runs_shown, len(counts))]:
        lines.append(describe_run(run_id, logs, ledger, raw or {}))
    return "\n".join(lines)


# ---- what users see ---------------------------------------------------------------------

STATUSES = ("created", "running", "waiting", "completed", "failed", "cancelled")


@dataclass
class CatalogueView:
    """The run catalogue as `lw.list_runs` shows it: every run's status, unfiltered, and
    the runs each status filter lists. `error`: a listing that raised."""

    listed: dict[str, str] = field(default_factory=dict)
    by_status: dict[str, set[str]] = field(default_factory=dict)
    error: str | None = None


def read_catalogue(world: Any) -> CatalogueView:
    """Every page of `lw.list_runs`, unfiltered first (what `little runs` shows), then
    for each status. Read after `read_world`, which finishes deletions a crash left."""
    import little_workflow as lw

    def every(**filters: Any) -> dict[str, str]:
        out, cursor = {}, None
        while True:
            page = lw.list_runs(world, limit=500, cursor=cursor, **filters)
            out.update({r.run_id: r.status for r in page.runs})
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor

    view = CatalogueView()
    try:
        view.listed = every()
        for s in STATUSES:
            view.by_status[s] = set(every(status=s))
    except Exception as e:  # noqa: BLE001 - a listing that fails is a finding
        view.error = f"{type(e).__name__}: {e}"
    return view


def log_status(events: list[Any]) -> str | None:
    """The status the runtime folds from a log (None: a log that holds no run)."""
    from little_workflow.runtime.state import RunLog

    log = RunLog(run_id="")
    for e in events:
        log.apply(e)
    return log.status if log.created is not None else None


def check_what_users_see(logs: Mapping[str, Any], catalogue: CatalogueView,
                         before_drain: Mapping[str, Any] | None = None) -> list[Violation]:
    out: list[Violation] = []
    for run_id, events in logs.items():
        if not isinstance(events, BaseException) and events:
            out += check_idempotency(run_id, events)
    out += check_catalogue(logs, catalogue)
    if before_drain is not None:
        out += check_cancelled_sub_runs(before_drain, logs)
    return out


def check_catalogue(logs: Mapping[str, Any], catalogue: CatalogueView) -> list[Violation]:
    """The catalogue is the fold of the logs, for every run and every status filter."""
    if catalogue.error is not None:
        return [Violation("catalogue-status", "-", f"listing runs failed: {catalogue.error}")]
    out = []
    truth: dict[str, str] = {}
    for run_id, events in logs.items():
        if isinstance(events, BaseException) or not events:
            continue
        status_now = log_status(events)
        if status_now is not None:
            truth[run_id] = status_now
    for run_id, expected in sorted(truth.items()):
        shown = catalogue.listed.get(run_id)
        if shown is None:
            out.append(Violation("catalogue-missing", run_id,
                                 f"the log says {expected}; no listing shows the run"))
        elif shown != expected:
            out.append(Violation("catalogue-status", run_id,
                                 f"listed as {shown}, the log says {expected}"))
    for run_id in sorted(set(catalogue.listed) - set(truth)):
        if not isinstance(logs.get(run_id), BaseException):
            out.append(Violation("catalogue-ghost", run_id, (
                f"listed as {catalogue.listed[run_id]}, but the run has no log")))
    for status_name, members in sorted(catalogue.by_status.items()):
        expected_members = {r for r, s in truth.items() if s == status_name}
        for run_id in sorted(expected_members - members):
            out.append(Violation("catalogue-filter", run_id,
                                 f"list_runs(status={status_name!r}) leaves it out"))
        for run_id in sorted(members - expected_members):
            if run_id in truth:
                out.append(Violation("catalogue-filter", run_id, (
                    f"list_runs(status={status_name!r}) shows it; the log says {truth[run_id]}")))
    return out


def check_idempotency(run_id: str, events: list[Any]) -> list[Violation]:
    """A key sent twice is one event: by the envelope's key, and by the key the sender
    wrote into the payload (which survives a sender that dropped the key itself)."""
    out = []
    seen: dict[tuple[str, Any], int] = {}
    for e in events:
        if e.type != "signal.received":
            continue
        p = plain(e.payload)
        sent = p.get("payload") if isinstance(p, dict) else None
        keys = [("envelope", getattr(e, "append_idempotency_key", None))]
        if isinstance(sent, dict):
            keys.append(("payload", sent.get("key")))
        for where, key in keys:
            if not key:
                continue
            first = seen.setdefault((where, key), e.sequence)
            if first != e.sequence:
                out.append(Violation("idempotency-repeated", run_id, (
                    f"events {first} and {e.sequence} were both sent with idempotency key "
                    f"{key!r} ({where})")))
    return out


def check_cancelled_sub_runs(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Violation]:
    """A run ends `cancelled` only once each sub-run it started is finished or asked to
    cancel. Seen two ways, since the workers finish an orphaned sub-run during the chaos
    and the drain after it: in the logs before the drain (an unfinished sub-run of a
    cancelled run carries `run.cancel_requested`), and by time in the final logs (a
    sub-run that ended after its parent's `run.cancelled` was asked before it)."""
    out = []
    for run_id, events in before.items():
        if isinstance(events, BaseException) or not events or status(events) != "cancelled":
            continue
        for sub in sub_run_ids(events):
            sub_events = before.get(sub)
            if isinstance(sub_events, BaseException) or not sub_events \
                    or status(sub_events) is not None:
                continue
            if not any(e.type == "run.cancel_requested" for e in sub_events):
                out.append(Violation("sub-run-not-cancelled", run_id, (
                    f"run cancelled, its sub-run {sub} was left {log_status(sub_events)} "
                    f"and never asked to cancel (last event {sub_events[-1].type})")))
    for run_id, events in after.items():
        if isinstance(events, BaseException) or not events or status(events) != "cancelled":
            continue
        if any(v.run_id == run_id for v in out):
            continue
        cancelled_at = epoch(next(e for e in events if e.type == "run.cancelled").created_at)
        for sub in sub_run_ids(events):
            sub_events = after.get(sub)
            if isinstance(sub_events, BaseException) or not sub_events or cancelled_at is None:
                continue
            asked = next((e for e in sub_events if e.type == "run.cancel_requested"), None)
            end = next((e for e in sub_events if e.type in TERMINAL), None)
            asked_at = epoch(asked.created_at) if asked is not None else None
            ended_at = epoch(end.created_at) if end is not None else None
            if asked_at is not None and asked_at <= cancelled_at:
                continue  # asked in time
            if end is None or (ended_at is not None and ended_at <= cancelled_at):
                continue  # finished before its parent was cancelled (unfinished: the drain's rule)
            out.append(Violation("sub-run-not-cancelled", run_id, (
                f"run cancelled at {events[-1].created_at}; its sub-run {sub} went on to "
                f"{end.type} at {end.created_at}, never asked to cancel before")))
    return out
