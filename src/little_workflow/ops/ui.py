"""`little ui`: a local web server (standard library only) with the runs list and each
run's inspector page, updated live.

Bound to 127.0.0.1: it shows inputs, outputs and errors, so it is not for a network.
A request whose `Host` is not this server's own origin (`127.0.0.1:PORT`,
`localhost:PORT`) gets 403: a web page whose DNS name is rebound to 127.0.0.1 must not
read runs through the browser.

It also acts (cancel, send an event, approve or deny a pending tool call, fork, resume),
each a POST to `/api/runs/RUN_ID/ACTION` that must carry the per-server token printed at
start (`X-Little-Token` header or a `token` field), and whose `Origin`, when sent, is this
server's own: another web page the browser has open cannot act (CSRF), and neither can a
rebound name. Each action goes through the public API (`lw.cancel_run`, `lw.send_event`,
`lw.approve_tool_call`, `lw.fork_run`; resume is `lw.run_workflow(..., suspend=True)` as a
worker does, in a thread, with the workflows `little ui` was given).

Pages poll a small JSON endpoint about once a second; an endpoint answers
`{"changed": false}` when the client's `since` token is still current, so an idle page
costs one `list_events(after=…)` per second. The runs list also reads, for its pending
approvals, the log of each waiting run on the page it shows (at most a page of them).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

import little_workflow as lw

from ..runtime.values import stored_value
from ..world.ids import validate_run_id
from ..world.protocol import WorldLike
from ..world.vocabulary import FINISHED_STATUSES
from .inspect import error_line, render_page, run_page_data
from .owners import describe_owner

#: Runs per page of the runs list, and the most a `limit=` in the URL may ask for.
PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
#: The largest POST body an action reads (an event payload included).
MAX_BODY = 1 << 20
#: The header (or body field `token`) an action carries the server's token in.
TOKEN_HEADER = "X-Little-Token"
ACTIONS = ("cancel", "events", "fork", "resume", "approve")
#: At most this long (seconds) a resume's answer waits for the run to start here; a run
#: that starts later (its storage is slow) is shown starting by the page's live updates.
RESUME_ANSWER_WAIT = 30.0


class ActionError(Exception):
    """An action the server refuses: its HTTP status and a one-line message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class RunsIndex:
    """The runs list, one catalogue page at a time (`lw.list_runs`): a refresh costs
    O(page), whatever the World holds."""

    def __init__(self, world: WorldLike):
        self.world = world
        self.lock = threading.Lock()  # one World shared by the server's threads

    def summaries(self, query: dict[str, str] | None = None) -> tuple[list[dict[str, Any]], str | None]:
        """One page of rows for `query` (`status`, `workflow`, `cursor`, `limit`) and the
        cursor of the next page."""
        q = query or {}
        asked = q.get("limit", "")
        limit = min(int(asked), MAX_PAGE_SIZE) if asked.isdigit() and int(asked) > 0 else PAGE_SIZE
        with self.lock:
            page = lw.list_runs(self.world, status=q.get("status") or None,
                                workflow_id=q.get("workflow") or None,
                                cursor=q.get("cursor") or None, limit=limit)
            rows = [ui_row(r) for r in page.runs]
            for r, row in zip(page.runs, rows, strict=True):
                thread = describe_owner(self.world, r.workflow_id, r.run_id)
                if thread is not None:
                    row["thread"] = thread
        return rows, page.next_cursor

    def document(self, query: dict[str, str] | None = None) -> dict[str, Any]:
        q = {k: v for k, v in (query or {}).items() if k in ("status", "workflow", "limit", "cursor") and v}
        runs, next_cursor = self.summaries(q)
        approvals = self.page_approvals(runs)
        token = hashlib.sha256(json.dumps(
            [[(r["runId"], r["lastSequence"], r["status"]) for r in runs],
             [(a["runId"], a["toolCallId"]) for a in approvals]]).encode()).hexdigest()[:16]
        next_page = "/?" + urlencode({**q, "cursor": next_cursor}) if next_cursor else None
        return {"runs": runs, "approvals": approvals, "dataDir": str(self.world.data_dir), "lastSequence": token,
                "finished": False, "nextPage": next_page,
                "filters": {k: v for k, v in q.items() if k != "cursor"}}

    def run_document(self, run_id: str, since: str | None) -> dict[str, Any] | None:
        """None when the client's `since` sequence is still the last one."""
        with self.lock:
            if since and since.isdigit() and int(since) > 0:
                if not self.world.list_events(run_id, after=int(since)):
                    return None
            data = run_page_data(self.world, run_id)
            data["approvals"] = (approval_rows(lw.pending_approvals(self.world, run_id=run_id))
                                 if data["status"] == "waiting" else [])
            return data

    def page_approvals(self, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The pending tool calls of the waiting runs on this page (one log each: the
        list costs O(page), like the page)."""
        out: list[dict[str, Any]] = []
        with self.lock:
            for row in runs:
                if row["status"] == "waiting":
                    out.extend(approval_rows(lw.pending_approvals(self.world, run_id=row["runId"])))
        return out


class Actions:
    """What the UI can do to runs, each through the public API. `workflows` are the code
    a resume may run (`little ui MODULE...`); without them, resume says how to get it."""

    def __init__(self, world: WorldLike, lock: threading.Lock, workflows: Iterable[Any] = (),
                 say: Callable[[str], None] = print):
        self.world = world
        self.lock = lock
        self.workflows = {wf.id: wf for wf in workflows}
        self.say = say
        self.resumes: list[threading.Thread] = []

    def run(self, action: str, run_id: str, body: dict[str, Any], rest: list[str]) -> tuple[int, dict[str, Any]]:
        validate_run_id(run_id)
        if action == "cancel":
            reason = optional_text(body, "reason")
            with self.lock:
                lw.cancel_run(self.world, run_id, reason=reason)
            return 200, {"runId": run_id, "status": self.status(run_id)}
        if action == "events":
            name = body.get("name")
            if not isinstance(name, str) or not name.strip():
                raise ActionError(400, "name: an event name is a non-empty string")
            payload = json_field(body, "payload")
            key = optional_text(body, "idempotencyKey")
            with self.lock:
                event = lw.send_event(self.world, run_id, name.strip(), payload, idempotency_key=key)
            return 200, {"runId": run_id, "sequence": event.sequence, "status": self.status(run_id)}
        if action == "approve":
            if len(rest) != 1 or not rest[0]:
                raise ActionError(404, "approve: POST /api/runs/RUN_ID/approve/TOOL_CALL_ID")
            approved = body.get("approved", True)
            if isinstance(approved, str):  # a form's field
                approved = {"true": True, "approve": True, "false": False, "deny": False}.get(approved.lower(), approved)
            if not isinstance(approved, bool):
                raise ActionError(400, "approved: true or false")
            with self.lock:
                event = lw.approve_tool_call(self.world, run_id, rest[0], approved=approved,
                                             reason=optional_text(body, "reason"))
            return 200, {"runId": run_id, "toolCallId": rest[0], "approved": approved,
                         "sequence": event.sequence}
        if action == "fork":
            from_step = optional_text(body, "fromStep")
            new_id = optional_text(body, "newRunId")
            with self.lock:
                fork_id = lw.fork_run(self.world, run_id, from_step=from_step, new_run_id=new_id)
            return 200, {"runId": fork_id, "forkedFrom": run_id, "fromStep": from_step}
        if action == "resume":
            return 202, self.resume(run_id)
        raise ActionError(404, f"no action {action!r}; one of: {', '.join(ACTIONS)}")

    def status(self, run_id: str) -> str:
        with self.lock:
            return str(lw.materialize_run_state(self.world, run_id).status)

    def resume(self, run_id: str) -> dict[str, Any]:
        with self.lock:
            events = self.world.list_events(run_id)
            if not events:
                raise lw.RunNotFoundError(run_id, f" in {self.world.data_dir}")
            state = lw.materialize_run_state(self.world, run_id)
            created = events[0].payload if isinstance(events[0].payload, dict) else {}
            value = stored_value(self.world, created.get("input"))
        if state.status in ("completed", "failed", "cancelled"):
            raise ActionError(400, f"run {run_id} is {state.status}: nothing to resume "
                              "(fork it to run it again from a step)")
        wf = self.workflows.get(state.workflow_id or "")
        if wf is None:
            loaded = ", ".join(sorted(self.workflows)) or "none"
            raise ActionError(400, f"run {run_id} is of workflow {state.workflow_id!r}, whose code "
                              f"this server was not given (loaded: {loaded}); start it as "
                              "`little ui MODULE` to resume from here, or run `little worker MODULE`")

        # The answer waits until the run has started here (its run.started is appended) or
        # the attempt ended without starting it (locked by another process, code refused),
        # so the page says which; what the run does after that it shows from the log.
        began = threading.Event()
        refused: list[BaseException] = []

        def on_call(name: str, args: tuple, kwargs: dict) -> None:
            if name == "append_event" and len(args) >= 2 and args[1] == "run.started":
                began.set()

        def execute() -> None:
            try:
                lw.run_workflow(wf, value, world=lw.tracing_world(self.world, on_call),
                                run_id=run_id, suspend=True)
            except (lw.WorkflowFailedError, lw.RunCancelledError):
                pass  # its end is in its log, where the page shows it
            except Exception as e:  # not run (locked elsewhere, refused code): say so
                refused.append(e)
                self.say(f"little ui: resume of {run_id} did not run: {e}")
            finally:
                began.set()

        thread = threading.Thread(target=execute, name=f"resume {run_id}", daemon=True)
        self.resumes.append(thread)
        thread.start()
        began.wait(RESUME_ANSWER_WAIT)
        if refused:
            raise refused[0]
        return {"runId": run_id, "resuming": True, "workflowId": wf.id}


def optional_text(body: dict[str, Any], field: str) -> str | None:
    value = body.get(field)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ActionError(400, f"{field}: a string, not {json.dumps(value)}")
    return value


def json_field(body: dict[str, Any], field: str) -> Any:
    """A JSON value: as it is in a JSON body, parsed from its text in a form body."""
    value = body.get(field)
    if not body.get("__form__"):
        return value
    if value is None or value == "":
        return None
    try:
        return json.loads(value)
    except ValueError as e:
        raise ActionError(400, f"{field}: not valid JSON: {e}") from None


def approval_rows(pending: list[Any]) -> list[dict[str, Any]]:
    """`lw.PendingApproval`s as the pages draw them."""
    return [{"runId": p.run_id, "workflowId": p.workflow_id, "stepPath": p.step_path,
             "eventName": p.event_name, "toolCallId": p.tool_call_id, "toolName": p.tool_name,
             "args": p.args, "requestedAt": p.requested_at} for p in pending]


def ui_row(summary: Any) -> dict[str, Any]:
    """A row of the runs list from a catalogue `RunSummary`."""
    finished = summary.status in FINISHED_STATUSES
    # As the run page counts: from run.created to the run's end (its summary's last
    # change); an unfinished run's is "so far", counted by the page at its now.
    duration = round((summary.updated_at - summary.created_at).total_seconds(), 6) if finished else None
    return {"runId": summary.run_id, "workflowId": summary.workflow_id, "status": summary.status,
            "startedAt": summary.created_at.timestamp(), "durationSeconds": duration,
            "finished": finished, "waitingFor": waiting_text(summary.waiting),
            "error": error_line(summary.error), "steps": summary.steps,
            "lastSequence": summary.updated_at.isoformat()}


def waiting_text(waiting: dict[str, Any] | None) -> str | None:
    if not waiting:
        return None
    if waiting.get("kind") == "sleep":
        return f"sleep {waiting.get('stepPath')} until {waiting.get('wakeAt') or '?'}"
    line = f"event {waiting.get('name') or '?'} ({waiting.get('stepPath')})"
    return line + (f" until {waiting['deadline']}" if waiting.get("deadline") else "")


def make_handler(index: RunsIndex, actions: Actions, token: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "little-ui"

        def log_message(self, format: str, *args: Any) -> None:  # quiet by default
            pass

        def send_body(self, status: int, body: str, content_type: str) -> None:
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def send_json(self, value: Any, status: int = 200) -> None:
            self.send_body(status, json.dumps(value, ensure_ascii=False, default=str),
                           "application/json; charset=utf-8")

        def own_hosts(self) -> tuple[str, str]:
            address: Any = self.server.server_address  # (host, port) for an AF_INET server
            return f"127.0.0.1:{address[1]}", f"localhost:{address[1]}"

        def own_origin(self) -> bool:
            host = (self.headers.get("Host") or "").strip().lower()
            return host in self.own_hosts()

        def refuse_foreign(self) -> bool:
            if self.own_origin():
                return False
            self.send_body(403, "forbidden: this server answers only "
                           "http://127.0.0.1:PORT/ and http://localhost:PORT/\n",
                           "text/plain; charset=utf-8")
            return True

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.refuse_foreign():
                return
            url = urlsplit(self.path)
            params = {k: v[0] for k, v in parse_qs(url.query).items()}
            since = params.pop("since", None)
            params.pop("token", None)  # the page keeps it for its actions; not a filter
            parts = [unquote(p) for p in url.path.split("/") if p]
            try:
                if not parts:
                    doc = index.document(params)
                    live = "/api/runs" + ("?" + urlencode(params) if params else "")
                    self.send_body(200, render_page("runs", doc, {
                        "liveUrl": live, "runLink": "/runs/{runId}", "actions": True},
                        "runs · little ui"), "text/html; charset=utf-8")
                elif parts == ["api", "runs"]:
                    doc = index.document(params)
                    if since == doc["lastSequence"]:
                        self.send_json({"changed": False})
                    else:
                        self.send_json({"changed": True, "data": doc})
                elif len(parts) == 2 and parts[0] == "runs":
                    data = index.run_document(parts[1], None)
                    assert data is not None
                    self.send_body(200, render_page("run", data, {
                        "liveUrl": f"/api/runs/{parts[1]}", "runLink": "/runs/{runId}",
                        "backLink": "/", "actions": True}, f"{parts[1]} · little ui"),
                        "text/html; charset=utf-8")
                elif len(parts) == 3 and parts[:2] == ["api", "runs"]:
                    data = index.run_document(parts[2], since)
                    self.send_json({"changed": False} if data is None
                                   else {"changed": True, "data": data})
                else:
                    self.send_body(404, "not found\n", "text/plain; charset=utf-8")
            except (lw.RunNotFoundError, lw.WorldPathError) as e:
                self.send_body(404, f"{e}\n", "text/plain; charset=utf-8")
            except lw.CatalogueQueryError as e:
                self.send_body(400, f"{e}\n", "text/plain; charset=utf-8")
            except lw.LittleWorkflowError as e:
                # A run whose log is damaged, a storage failure: said, not a dropped connection.
                what = f"run {parts[-1]}" if len(parts) >= 2 and parts[-2] == "runs" else "this page"
                self.send_body(500, f"{what} cannot be shown: {type(e).__name__}: {e}\n",
                               "text/plain; charset=utf-8")

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            try:
                self.check_may_act()
                parts = [unquote(p) for p in urlsplit(self.path).path.split("/") if p]
                if len(parts) < 4 or parts[:2] != ["api", "runs"]:
                    raise ActionError(404, "not found: actions are POST /api/runs/RUN_ID/ACTION")
                body = self.read_body()
                status, result = actions.run(parts[3], parts[2], body, parts[4:])
                self.send_json({"ok": True, **result}, status)
            except ActionError as e:
                self.send_json({"ok": False, "error": str(e)}, e.status)
            except lw.RunNotFoundError as e:
                self.send_json({"ok": False, "error": str(e)}, 404)
            except lw.RunLockedError as e:
                self.send_json({"ok": False, "error": str(e)}, 409)
            except (lw.LittleWorkflowError, ValueError, TypeError) as e:
                self.send_json({"ok": False, "error": str(e) or type(e).__name__}, 400)
            except Exception as e:  # a bug here still answers, with what went wrong
                self.send_json({"ok": False, "error": f"{type(e).__name__}: {e}"}, 500)

        def check_may_act(self) -> None:
            """403 unless the request is this server's own page with its token."""
            if not self.own_origin():
                raise ActionError(403, "forbidden: this server answers only "
                                  "http://127.0.0.1:PORT/ and http://localhost:PORT/")
            origin = self.headers.get("Origin")
            if origin is not None and origin.strip().lower() not in (
                    "http://" + h for h in self.own_hosts()):
                raise ActionError(403, f"forbidden: a request from {origin} may not act here")
            given = self.headers.get(TOKEN_HEADER)
            if not given:
                given = self.peek_form_token()
            if not given or not hmac.compare_digest(given.encode(), token.encode()):
                raise ActionError(403, "forbidden: actions need this server's token (open the "
                                  "URL `little ui` printed, with ?token=...)")

        def peek_form_token(self) -> str:
            """A form's `token` field; "" for any other body (unread: a request without the
            token gets 403 whatever else is wrong with it)."""
            kind = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            if kind != "application/x-www-form-urlencoded":
                return ""
            try:
                value = self.read_body().get("token")
            except ActionError:
                return ""
            return value if isinstance(value, str) else ""

        def read_body(self) -> dict[str, Any]:
            """The request's fields: a JSON object, or a form (`__form__` marks it)."""
            cached: dict[str, Any] | None = getattr(self, "_fields", None)
            if cached is not None:
                return cached
            length_text = self.headers.get("Content-Length") or "0"
            if not length_text.isdigit():
                raise ActionError(400, "Content-Length is not a number")
            length = int(length_text)
            if length > MAX_BODY:
                raise ActionError(413, f"the body is {length} bytes; at most {MAX_BODY}")
            raw = self.rfile.read(length) if length else b""
            kind = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            fields: dict[str, Any]
            if kind == "application/x-www-form-urlencoded":
                fields = {k: v[0] for k, v in parse_qs(raw.decode("utf-8", "replace")).items()}
                fields["__form__"] = True
            elif not raw.strip():
                fields = {}
            else:
                try:
                    value = json.loads(raw)
                except ValueError as e:
                    raise ActionError(400, f"the body is not valid JSON: {e}") from None
                if not isinstance(value, dict):
                    raise ActionError(400, "the body is a JSON object of the action's fields")
                fields = value
            self._fields = fields
            return fields

    return Handler


class UIServer(ThreadingHTTPServer):
    """The `little ui` server: `token` is what its actions must carry, `url` the address
    to open (with the token)."""

    token: str

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/?token={self.token}"


def make_server(world: WorldLike, port: int = 8765, *, workflows: Iterable[Any] = (),
                token: str | None = None,
                say: Callable[[str], None] = print) -> UIServer:
    """A server on 127.0.0.1:port (0 picks a free port: see `server.server_address`).
    `workflows` are the code a resume may run; `token` defaults to a fresh random one."""
    index = RunsIndex(world)
    token = token or secrets.token_urlsafe(24)
    actions = Actions(world, index.lock, workflows, say)
    server = UIServer(("127.0.0.1", port), make_handler(index, actions, token))
    server.token = token
    server.daemon_threads = True
    return server


def serve(world: WorldLike, *, port: int = 8765, workflows: Iterable[Any] = (),
          say: Callable[[str], None] = print) -> None:
    """Serve until interrupted (Ctrl-C)."""
    server = make_server(world, port, workflows=workflows,
                         say=lambda line: print(line, file=sys.stderr, flush=True))
    say(f"little ui: {server.url}  (Ctrl-C to stop; actions need the token in this URL)")
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
