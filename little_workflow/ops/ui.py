"""`little ui`: a local web server (standard library only) with the runs list and each
run's inspector page, updated live.

Bound to 127.0.0.1: it shows inputs, outputs and errors, so it is not for a network.
A request whose `Host` is not this server's own origin (`127.0.0.1:PORT`,
`localhost:PORT`) gets 403: a web page whose DNS name is rebound to 127.0.0.1 must not
read runs through the browser. The server only reads (GET); it has no write endpoint.
Pages poll a small JSON endpoint about once a second; an endpoint answers
`{"changed": false}` when the client's `since` token is still current, so an idle page
costs one `list_events(after=…)` per second.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

import little_workflow as lw

from ..world.protocol import WorldLike
from ..world.vocabulary import FINISHED_STATUSES
from .inspect import render_page, run_page_data

#: Runs per page of the runs list, and the most a `limit=` in the URL may ask for.
PAGE_SIZE = 50
MAX_PAGE_SIZE = 500


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
        return [ui_row(r) for r in page.runs], page.next_cursor

    def document(self, query: dict[str, str] | None = None) -> dict[str, Any]:
        q = {k: v for k, v in (query or {}).items() if k in ("status", "workflow", "limit", "cursor") and v}
        runs, next_cursor = self.summaries(q)
        token = hashlib.sha256(json.dumps(
            [(r["runId"], r["lastSequence"], r["status"]) for r in runs]).encode()).hexdigest()[:16]
        next_page = "/?" + urlencode({**q, "cursor": next_cursor}) if next_cursor else None
        return {"runs": runs, "dataDir": str(self.world.data_dir), "lastSequence": token,
                "finished": False, "nextPage": next_page,
                "filters": {k: v for k, v in q.items() if k != "cursor"}}

    def run_document(self, run_id: str, since: str | None) -> dict[str, Any] | None:
        """None when the client's `since` sequence is still the last one."""
        with self.lock:
            if since and since.isdigit() and int(since) > 0:
                if not self.world.list_events(run_id, after=int(since)):
                    return None
            return run_page_data(self.world, run_id)


def ui_row(summary: Any) -> dict[str, Any]:
    """A row of the runs list from a catalogue `RunSummary`."""
    error = summary.error.get("message") if isinstance(summary.error, dict) else None
    return {"runId": summary.run_id, "workflowId": summary.workflow_id, "status": summary.status,
            "startedAt": summary.created_at.timestamp(),
            "durationSeconds": round((summary.updated_at - summary.created_at).total_seconds(), 6),
            "finished": summary.status in FINISHED_STATUSES,
            "waitingFor": waiting_text(summary.waiting), "error": error, "steps": summary.steps,
            "lastSequence": summary.updated_at.isoformat()}


def waiting_text(waiting: dict[str, Any] | None) -> str | None:
    if not waiting:
        return None
    if waiting.get("kind") == "sleep":
        return f"sleep {waiting.get('stepPath')} until {waiting.get('wakeAt') or '?'}"
    line = f"event {waiting.get('name') or '?'} ({waiting.get('stepPath')})"
    return line + (f" until {waiting['deadline']}" if waiting.get("deadline") else "")


def make_handler(index: RunsIndex) -> type[BaseHTTPRequestHandler]:
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

        def own_origin(self) -> bool:
            port = int(self.server.server_address[1])  # type: ignore[index]
            host = (self.headers.get("Host") or "").strip().lower()
            return host in (f"127.0.0.1:{port}", f"localhost:{port}")

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if not self.own_origin():
                self.send_body(403, "forbidden: this server answers only "
                               "http://127.0.0.1:PORT/ and http://localhost:PORT/\n",
                               "text/plain; charset=utf-8")
                return
            url = urlsplit(self.path)
            params = {k: v[0] for k, v in parse_qs(url.query).items()}
            since = params.pop("since", None)
            parts = [unquote(p) for p in url.path.split("/") if p]
            try:
                if not parts:
                    doc = index.document(params)
                    live = "/api/runs" + ("?" + urlencode(params) if params else "")
                    self.send_body(200, render_page("runs", doc, {
                        "liveUrl": live, "runLink": "/runs/{runId}"},
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
                        "backLink": "/"}, f"{parts[1]} · little ui"), "text/html; charset=utf-8")
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

    return Handler


def make_server(world: WorldLike, port: int = 8765) -> ThreadingHTTPServer:
    """A server on 127.0.0.1:port (0 picks a free port: see `server.server_address`)."""
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(RunsIndex(world)))
    server.daemon_threads = True
    return server


def serve(world: WorldLike, *, port: int = 8765, say: Callable[[str], None] = print) -> None:
    """Serve until interrupted (Ctrl-C)."""
    server = make_server(world, port)
    host, bound = str(server.server_address[0]), int(server.server_address[1])
    say(f"little ui: http://{host}:{bound}/  (Ctrl-C to stop)")
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
