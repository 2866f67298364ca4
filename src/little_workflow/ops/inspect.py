"""`little inspect`: one self-contained HTML page for a run (inline CSS, JS and SVG; no
network access).

Python folds the log into a small JSON document (`run_page_data`); the page's script
draws the header, the timeline and the event table from it. The same document feeds the
live pages of `little ui`, which poll for a fresh one while a run progresses. The event
table is virtualized (only the rows in view exist in the DOM), so a run of 10,000 steps
stays usable; each rendered row still carries its `data-event-*` hooks.
"""

from __future__ import annotations

import json
import os
import re
import sysconfig
from datetime import datetime, timezone
from importlib import resources
from typing import Any

import little_workflow as lw

from ..runtime.fork import fork_points
from ..runtime.state import RunLog
from ..runtime.streams import record_label
from ..runtime.values import stored_value
from ..world.protocol import WorldLike
from ..world.vocabulary import OWNER_EVENTS, RUN_ENDINGS

TERMINAL_EVENTS = RUN_ENDINGS
# Wait events are recognized by prefix: `wait.<something>` with a stepPath opens or closes
# a wait span; these suffixes open one, any other closes it.
_WAIT_OPENERS = ("started", "scheduled", "begun", "waiting")
# Payload text kept per event row: enough to read and search, bounded for huge outputs.
PAYLOAD_TEXT_LIMIT = 1000


def _epoch(iso: Any) -> float | None:
    if isinstance(iso, (int, float)):
        return float(iso)
    if not isinstance(iso, str) or not iso:
        return None
    try:
        moment = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def _plain(value: Any) -> Any:
    """Frozen payloads → plain JSON values (dict/list subclasses serialize as they are)."""
    return json.loads(json.dumps(value, default=str))


def _payload_text(payload: Any) -> str:
    text = json.dumps(payload, ensure_ascii=False, sort_keys=True, default=str)
    if len(text) > PAYLOAD_TEXT_LIMIT:
        text = text[:PAYLOAD_TEXT_LIMIT] + f"… ({len(text)} chars)"
    return text


def _attempt_error(world: WorldLike, error: Any) -> Any:
    """A failed attempt's error as its tooltip shows it: a message the World spilled read
    back, and bounded as an event row's text is."""
    error = stored_value(world, error)
    message = error.get("message") if isinstance(error, dict) else None
    if isinstance(message, str) and len(message) > PAYLOAD_TEXT_LIMIT:
        error["message"] = message[:PAYLOAD_TEXT_LIMIT] + f"… ({len(message)} chars)"
    return error


def _open_waits(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in spans if s["end"] is None]


def waiting_for(spans: list[dict[str, Any]]) -> str | None:
    """One line saying what an unfinished run waits for, from its open idle spans."""
    parts = []
    for s in _open_waits(spans):
        if s["kind"] == "sleep":
            parts.append(f"sleep {s['stepPath']} until {s.get('wakeAt') or '?'}")
        else:
            line = f"event {s.get('name') or '?'} ({s['stepPath']})"
            if s.get("deadline"):
                line += f" until {s['deadline']}"
            parts.append(line)
    return "; ".join(parts) or None


def fold_events(events: list[Any]) -> dict[str, Any]:
    """Everything the page draws that the materialized state does not say: attempt spans,
    idle spans, resumes, sub-runs, the fork source, times — with times in seconds after
    the run's first event."""
    t0 = _epoch(events[0].created_at) if events else None
    t0 = t0 or 0.0

    def rel(iso: Any) -> float | None:
        at = _epoch(iso)
        return None if at is None else round(at - t0, 6)

    steps: dict[str, dict[str, Any]] = {}
    idle: list[dict[str, Any]] = []
    open_idle: dict[str, dict[str, Any]] = {}
    sub_runs: dict[str, dict[str, Any]] = {}
    starts: list[float] = []
    created: dict[str, Any] = {}
    ended: dict[str, Any] | None = None
    rows: list[list[Any]] = []
    for e in events:
        p = e.payload if isinstance(e.payload, dict) else {}
        t = rel(e.created_at) or 0.0
        path = p.get("stepPath") if isinstance(p.get("stepPath"), str) else None
        rows.append([e.sequence, e.type, t, path or p.get("callPath") or p.get("name")
                     or record_label(e.type, p) or "",
                     _payload_text(p if p else e.payload)])
        kind = e.type
        if kind == "run.created":
            created = _plain(p)
        elif kind == "run.started":
            starts.append(t)
        elif kind in TERMINAL_EVENTS:
            ended = {"status": TERMINAL_EVENTS[kind], "at": t, "error": _plain(p.get("error")),
                     "traceback": p.get("traceback") if isinstance(p.get("traceback"), str) else None}
        elif kind.startswith("step.") and path:
            step = steps.setdefault(path, {"path": path, "spans": []})
            spans = step["spans"]
            if kind == "step.started":
                for span in spans:  # an attempt left open by a dead process
                    if span["end"] is None:
                        span.update(end=t, outcome="interrupted")
                spans.append({"attempt": p.get("attempt", len(spans) + 1), "start": t,
                              "end": None, "outcome": "running"})
            elif kind in ("step.succeeded", "step.failed"):
                span = next((s for s in reversed(spans) if s["end"] is None), None)
                if span is None:
                    span = {"attempt": p.get("attempt", len(spans) + 1), "start": t}
                    spans.append(span)
                outcome = "succeeded" if kind == "step.succeeded" else (
                    "retried" if p.get("willRetry") else "failed")
                span.update(end=t, outcome=outcome)
                if kind == "step.failed" and isinstance(p.get("error"), dict):
                    span["error"] = _plain(p["error"])
        elif kind == "timer.scheduled" and path:
            span = {"stepPath": path, "kind": "sleep", "start": t, "end": None,
                    "wakeAt": p.get("wakeAt"), "plannedEnd": rel(p.get("wakeAt"))}
            open_idle[path] = span
            idle.append(span)
        elif kind.startswith("wait.") and path:
            if path not in open_idle and kind.rsplit(".", 1)[-1] in _WAIT_OPENERS:
                span = {"stepPath": path, "kind": "wait", "start": t, "end": None,
                        "name": p.get("name"), "deadline": p.get("deadline"),
                        "plannedEnd": rel(p.get("deadline"))}
                open_idle[path] = span
                idle.append(span)
            elif path in open_idle:
                open_idle.pop(path).update(end=t, outcome=kind.rsplit(".", 1)[-1])
        elif kind == "timer.fired" and path and path in open_idle:
            open_idle.pop(path).update(end=t, outcome="fired")
        elif kind.startswith("harness.tool_call."):
            call = p.get("callPath")
            if not isinstance(call, str):
                continue
            given = p.get("args")
            args: dict[str, Any] = given if isinstance(given, dict) else {}
            if kind.endswith(".started") and "subRunId" in args:
                sub_runs[call] = {"callPath": call, "runId": args["subRunId"],
                                  "workflow": args.get("workflow"), "status": "started",
                                  "start": t}
            elif call in sub_runs:
                sub_runs[call]["status"] = kind.rsplit(".", 1)[-1]
                sub_runs[call]["end"] = t
    return {
        "t0": t0, "steps": steps, "idle": idle, "subRuns": list(sub_runs.values()),
        "starts": starts, "created": created, "ended": ended, "rows": rows,
        "lastT": rows[-1][2] if rows else 0.0,
    }


def run_page_data(world: WorldLike, run_id: str) -> dict[str, Any]:
    """The JSON document the page draws: header, steps with attempt spans, idle spans,
    sub-runs, fork source and every event (payload text bounded)."""
    events = world.list_events(run_id)
    if not events:
        raise lw.RunNotFoundError(run_id, f" in {world.data_dir}")
    state = lw.materialize_run_state(world, run_id)
    folded = fold_events(events)
    created = folded["created"]
    steps = []
    for path, step_state in state.steps.items():
        spans = folded["steps"].get(path, {}).get("spans", [])
        for span in spans:
            if "error" in span:
                span["error"] = _attempt_error(world, span["error"])
        steps.append({"path": path, "status": step_state.status,
                      "attempts": step_state.attempts, "spans": spans,
                      "error": _plain(step_state.error)})
    ended = folded["ended"]
    open_spans = [] if ended else folded["idle"]
    traceback = (ended or {}).get("traceback")
    forked = created.get("forkedFrom") if isinstance(created.get("forkedFrom"), dict) else None
    return {
        "runId": run_id,
        "workflowId": state.workflow_id or _owner_label(events),
        "version": state.workflow_version_id or created.get("workflowVersion"),
        "status": state.status,
        "input": _plain(state.input),
        "output": _plain(state.output) if state.status == "completed" else None,
        "error": _plain(state.error) or (ended or {}).get("error"),
        "traceback": traceback,
        "userTraceback": user_frames_first(traceback) if traceback else None,
        "t0": folded["t0"],
        "createdAt": state.created_at,
        # As the runs list counts (the catalogue's summaries): from run.created to the run's
        # end; an unfinished run's duration is "so far", counted by the page at its now.
        "startedAt": folded["t0"],
        "durationSeconds": ended["at"] if ended else None,
        "finished": ended is not None,
        "waitingFor": waiting_for(open_spans),
        "forkedFrom": _plain(forked),
        "queue": _queue_of(created),
        "subRuns": folded["subRuns"],
        "starts": folded["starts"],
        "steps": steps,
        "idle": folded["idle"],
        "events": folded["rows"],
        "lastSequence": state.last_sequence,
        "forkPoints": list(fork_points(RunLog.fold(run_id, events))),
    }


def _queue_of(created: dict[str, Any]) -> dict[str, Any] | None:
    """A queued run's queue, key and priority (DESIGN §17), as `run.created` holds them."""
    fields = created.get("queue")
    if not isinstance(fields, dict) or not isinstance(fields.get("name"), str):
        return None
    return {"name": fields["name"], "key": fields.get("key"),
            "priority": fields.get("priority", 0), "order": fields.get("order")}


def _owner_label(events: list[Any]) -> str | None:
    """The workflow id the catalogue lists a data-only run under (a LangGraph thread)."""
    return OWNER_EVENTS.get(events[0].type) if events else None


def run_summary(world: WorldLike, run_id: str) -> dict[str, Any]:
    """One row of the runs list: status, workflow, started, duration, what it waits for."""
    events = world.list_events(run_id)
    if not events:
        raise lw.RunNotFoundError(run_id)
    state = lw.materialize_run_state(world, run_id)
    folded = fold_events(events)
    ended = folded["ended"]
    error = _plain(state.error) or (ended or {}).get("error")
    return {
        "runId": run_id,
        "workflowId": state.workflow_id or _owner_label(events),
        "status": state.status,
        "startedAt": folded["t0"],
        "durationSeconds": ended["at"] if ended else None,
        "finished": ended is not None,
        "waitingFor": None if ended else waiting_for(folded["idle"]),
        "error": error_line(error),
        "steps": len(state.steps),
        "lastSequence": state.last_sequence,
    }


def error_line(error: Any) -> str | None:
    """A run's error as one line of text: its message, or a cancelled run's reason."""
    if not isinstance(error, dict):
        return None
    if isinstance(error.get("message"), str):
        return error["message"]
    if error.get("type") == "RunCancelledError":
        reason = error.get("reason")
        return f"cancelled: {reason}" if reason else "cancelled (no reason given)"
    return None


_FRAME = re.compile(r'^  File "(?P<file>[^"]+)", line \d+, in .*$')


def _library_roots() -> tuple[str, ...]:
    roots = {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))}  # little_workflow/
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(os.path.abspath(path))
    return tuple(sorted(roots))


def user_frames_first(traceback: str) -> str:
    """A traceback with the frames of the user's code (not this library's, the standard
    library's or an installed package's) first, each with its source line, then the
    exception it raised, then the whole traceback as Python printed it."""
    roots = _library_roots()
    lines = traceback.rstrip("\n").splitlines()
    frames: list[str] = []
    exception = None
    for i, line in enumerate(lines):
        m = _FRAME.match(line)
        if m:
            where = m.group("file")
            if where.startswith("<") or os.path.abspath(where).startswith(roots):
                continue
            frame = [line.strip()]
            if i + 1 < len(lines) and lines[i + 1].startswith("    ") and not _FRAME.match(lines[i + 1]):
                frame.append("  " + lines[i + 1].strip())
            text = "\n".join(frame)
            if text not in frames:
                frames.append(text)
        elif exception is None and frames and line and not line.startswith(" "):
            exception = line  # the first exception raised under the user's frames
    if not frames:
        return traceback
    head = "\n".join(frames) + ("\n" + exception if exception else "")
    return head + "\n\n" + traceback.rstrip("\n")


def _asset(name: str) -> str:
    return resources.files("little_workflow.ops").joinpath("assets", name).read_text("utf-8")


def _script_json(value: Any) -> str:
    # Inside <script type="application/json">, only "<" can end the element early; JSON
    # strings may spell it \u003c.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def render_page(kind: str, data: Any, config: dict[str, Any], title: str) -> str:
    """A complete HTML document: the shared CSS and script inline, `data` embedded."""
    esc = (title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{esc}</title><style>{_asset('inspect.css')}</style></head>"
        f"<body data-page=\"{kind}\"><div id=\"app\"><p class=\"loading\">loading…</p></div>"
        f"<script type=\"application/json\" id=\"lw-data\">{_script_json(data)}</script>"
        f"<script type=\"application/json\" id=\"lw-config\">{_script_json(config)}</script>"
        f"<script>{_asset('inspect.js')}</script></body></html>\n"
    )


def render_run_html(world: WorldLike, run_id: str, *, run_link: str = "{runId}.html",
                    live_url: str | None = None, back_link: str | None = None) -> str:
    """The inspector page of one run. `run_link` turns a run id into the link for sub-runs
    and fork sources (by default a sibling `<runId>.html`); `live_url` makes the page poll
    that JSON endpoint for a fresh document (used by `little ui`)."""
    data = run_page_data(world, run_id)
    config = {"runLink": run_link, "liveUrl": live_url, "backLink": back_link}
    return render_page("run", data, config, f"{run_id} · little inspect")
