"""Headless Chromium (Debian's `chromium` package) for page tests: the DOM after the
page's script ran, and screenshots. Plus a small DOM reader over html.parser."""

from __future__ import annotations

import os
import subprocess
import tempfile
from html.parser import HTMLParser
from typing import Any, Callable, Iterator

from external_tools import require_tool


def chromium_path() -> str:
    return require_tool("chromium", "chromium-browser")


def _chromium(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="lw-chromium-") as profile:
        cmd = [chromium_path(), "--headless", "--no-sandbox", "--disable-gpu",
               "--no-first-run", "--disable-extensions", "--hide-scrollbars",
               f"--user-data-dir={profile}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def dump_dom(url: str, *, budget_ms: int = 3000, real_wait_ms: int | None = None,
             window: tuple[int, int] = (1400, 1000)) -> "Node":
    """The DOM after scripts ran. `budget_ms` is virtual time (timers run at once);
    `real_wait_ms` waits in real time instead, for pages that poll a live server."""
    timing = [f"--timeout={real_wait_ms}"] if real_wait_ms else [f"--virtual-time-budget={budget_ms}"]
    proc = _chromium(f"--window-size={window[0]},{window[1]}", *timing, "--dump-dom", url)
    assert proc.returncode == 0 and "<html" in proc.stdout, proc.stderr[-2000:]
    return parse_html(proc.stdout)


def screenshot(url: str, path: str, *, window: tuple[int, int] = (1400, 1000),
               budget_ms: int = 3000) -> None:
    proc = _chromium(f"--window-size={window[0]},{window[1]}", f"--virtual-time-budget={budget_ms}",
                     f"--screenshot={os.path.abspath(path)}", url)
    assert proc.returncode == 0 and os.path.getsize(path) > 0, proc.stderr[-2000:]


def file_url(path: str, fragment: str = "") -> str:
    return "file://" + os.path.abspath(path) + (("#" + fragment) if fragment else "")


# ---- a small DOM --------------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict[str, str], parent: "Node | None"):
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node | str] = []

    def __repr__(self) -> str:
        return f"<{self.tag} {self.attrs}>"

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self) -> Iterator["Node"]:
        for c in self.children:
            if isinstance(c, Node):
                yield c
                yield from c.iter()

    def find_all(self, pred: Callable[["Node"], bool] | None = None, **attrs: Any) -> list["Node"]:
        out = []
        for n in self.iter():
            if all((n.attrs.get(k.replace("_", "-")) == v if v is not True
                    else k.replace("_", "-") in n.attrs) for k, v in attrs.items()):
                if pred is None or pred(n):
                    out.append(n)
        return out

    def has_class(self, name: str) -> bool:
        return name in self.attrs.get("class", "").split()


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: (v if v is not None else "") for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_endtag(self, tag: str) -> None:
        n: Node | None = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data: str) -> None:
        self.cur.children.append(data)


def parse_html(html: str) -> Node:
    b = _Builder()
    b.feed(html)
    return b.root


# ---- a live page, driven over the DevTools protocol on a pipe (stdlib only) -----------

class Page:
    """Headless Chromium with `--remote-debugging-pipe`: the protocol's JSON messages,
    NUL-terminated, on file descriptors 3 (to Chromium) and 4 (from it). For pages that
    must stay open in real time (live updates) or be clicked."""

    def __init__(self, window: tuple[int, int] = (1400, 1000)):
        import json
        import queue
        import threading

        self._json = json
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def wire_fds() -> None:  # runs in the child, before exec and before fds are closed
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._profile = tempfile.TemporaryDirectory(prefix="lw-chromium-")
        self.proc = subprocess.Popen(
            [chromium_path(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-pipe", f"--user-data-dir={self._profile.name}",
             f"--window-size={window[0]},{window[1]}", "about:blank"],
            pass_fds=(3, 4), preexec_fn=wire_fds,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next_id = 0
        self._replies: "queue.Queue[dict]" = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.call("Target.attachToTarget",
                                  {"targetId": target, "flatten": True})["sessionId"]

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_chrome, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = self._json.loads(raw)
                if "id" in msg:
                    self._replies.put(msg)

    def call(self, method: str, params: dict | None = None, *, session: bool = False,
             timeout: float = 60) -> dict:
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self._session
        os.write(self._to_chrome, self._json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._replies.get(timeout=timeout)
            if reply["id"] == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def eval(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, session=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(self, url: str, timeout: float = 30) -> None:
        self.call("Page.navigate", {"url": url}, session=True)
        self.wait_for("document.body && document.body.dataset.ready === '1'", timeout)

    def wait_for(self, expression: str, timeout: float = 30) -> Any:
        import time

        deadline = time.monotonic() + timeout
        while True:
            value = self.eval(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {expression}")
            time.sleep(0.1)

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_chrome)
        self._profile.cleanup()

    def __enter__(self) -> "Page":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
