"""The run inspector and `little ui`, checked in headless Chromium: what a person sees
(step bars with statuses and attempts, idle spans, links, the event filter) through the
page's stable data hooks (DESIGN.md §12)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from functools import partial

import pytest
from browser import Page, dump_dom, file_url
from checkout import SRC

import little_workflow as lw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def little(*args: str, cwd: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "little_workflow.cli", *args], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=timeout)


def little_bg(*args: str, cwd: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "little_workflow.cli", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def iso(seconds_from_now: float) -> str:
    moment = datetime.now(timezone.utc) + timedelta(seconds=seconds_from_now)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def work(i: int) -> int:
    time.sleep(0.01 * (i + 1))
    return i * i


def make_flaky(failures: int):
    calls = {"n": 0}

    def flaky(x: int) -> int:
        calls["n"] += 1
        if calls["n"] <= failures:
            raise RuntimeError(f"transient failure #{calls['n']}")
        return x * 2

    return flaky


def broken(_: int) -> int:
    raise lw.FatalError("the upstream answered 403")


def make_runs(data_dir: str) -> lw.World:
    """Two real runs: one completed after retries and a parallel group, one failed."""
    world = lw.local_world(data_dir)
    flaky = make_flaky(2)

    @lw.workflow(id="report", version="3")
    async def report(ctx: lw.RunContext, input: dict) -> dict:
        a = await ctx.step("fetch", work, 2)
        b = await ctx.step("flaky-api", flaky, a, retry=lw.Retry(max_attempts=4, backoff=0.01))
        parts = await ctx.parallel("chunks", [partial(work, i) for i in range(3)])
        return {"total": b + sum(parts)}

    @lw.workflow(id="publish")
    async def publish(ctx: lw.RunContext, input: dict) -> dict:
        await ctx.step("render", work, 1)
        await ctx.step("upload", broken, 1)
        return {}

    lw.run_workflow(report, {"topic": "weekly"}, world=world, run_id="run_report")
    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(publish, {"topic": "weekly"}, world=world, run_id="run_broken")
    return world


def step_bars(dom) -> dict[str, dict[str, str]]:
    return {n.attrs["data-step-path"]: n.attrs for n in dom.find_all(data_step_path=True)}


def event_rows(dom) -> list[tuple[int, str]]:
    return [(int(n.attrs["data-event-seq"]), n.attrs["data-event-type"])
            for n in dom.find_all(data_event_seq=True)]


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("inspect")
    make_runs(str(path / "data"))
    return path


def test_inspect_page_shows_header_step_bars_attempts_and_every_event(runs_dir):
    cwd = str(runs_dir)
    r = little("inspect", "run_report", "--html", "report.html", "--data-dir", "data", cwd=cwd)
    assert r.returncode == 0, r.stderr
    html = (runs_dir / "report.html").read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html), "the page must need no network"
    dom = dump_dom(file_url(str(runs_dir / "report.html")))
    world = lw.local_world(str(runs_dir / "data"))
    state = lw.materialize_run_state(world, "run_report")

    bars = step_bars(dom)
    assert set(bars) == set(state.steps) == {"fetch", "flaky-api", "chunks/0", "chunks/1", "chunks/2"}
    for path, s in state.steps.items():
        assert bars[path]["data-status"] == s.status == "succeeded"
        assert bars[path]["data-attempts"] == str(s.attempts)
    assert bars["flaky-api"]["data-attempts"] == "3"
    # Each attempt is drawn inside its bar, retries marked.
    flaky_bar = dom.find_all(data_step_path="flaky-api")[0]
    outcomes = [n.attrs["data-outcome"] for n in flaky_bar.find_all(data_attempt=True)]
    assert outcomes == ["retried", "retried", "succeeded"]
    assert len(flaky_bar.find_all(lambda n: n.has_class("retry"))) == 2
    # The parallel children are one group, each in its own lane.
    assert [n.attrs["data-group-path"] for n in dom.find_all(data_group_path=True)] == ["chunks"]

    header = dom.find_all(lambda n: n.tag == "header")[0].text()
    for expected in ("report", "run_report", "completed", "3", "weekly", "duration"):
        assert expected in header
    assert json.loads(dom.find_all(data_field="output")[0].text()) == {"total": 13}

    events = world.list_events("run_report")
    assert event_rows(dom) == [(e.sequence, e.type) for e in events]


def test_failed_run_page_shows_the_error_and_the_failed_step(runs_dir):
    cwd = str(runs_dir)
    assert little("inspect", "run_broken", "--html", "broken.html", "--data-dir", "data",
                  cwd=cwd).returncode == 0
    dom = dump_dom(file_url(str(runs_dir / "broken.html")))
    bars = step_bars(dom)
    assert bars["upload"]["data-status"] == "failed" and bars["render"]["data-status"] == "succeeded"
    assert "FatalError: the upstream answered 403" in dom.find_all(data_field="error")[0].text()
    assert dom.find_all(data_run_status="failed")


def test_event_filter_by_type_and_search_from_the_url(runs_dir):
    cwd = str(runs_dir)
    assert little("inspect", "run_report", "--html", "report.html", "--data-dir", "data",
                  cwd=cwd).returncode == 0
    page = str(runs_dir / "report.html")
    world = lw.local_world(str(runs_dir / "data"))
    events = world.list_events("run_report")
    failed = [(e.sequence, e.type) for e in events if e.type == "step.failed"]
    assert len(failed) == 2

    dom = dump_dom(file_url(page, "type=step.failed"))
    assert event_rows(dom) == failed
    assert dom.find_all(data_filter="type")[0].tag in ("select", "input")
    assert "2 of %d events" % len(events) in dom.find_all(data_event_count=True)[0].text()

    dom = dump_dom(file_url(page, "q=transient failure #2"))
    assert event_rows(dom) == [failed[1]]

    dom = dump_dom(file_url(page, "step=chunks/1"))
    assert [t for _, t in event_rows(dom)] == ["step.started", "step.succeeded"]


def build_waiting_log(world: lw.World, *, finish: bool) -> None:
    """A log as §11's runtime writes it: a fork of another run, a sleep, a sub-run, a wait."""
    world.append_event("run_src", "run.created", {"workflowId": "approve", "input": {}})
    world.append_event("run_child", "run.created", {"workflowId": "notify", "input": {}})
    rid = "run_fork"
    world.append_event(rid, "run.created", {
        "workflowId": "approve", "workflowVersionId": "v2", "input": {"topic": "q3"},
        "forkedFrom": {"runId": "run_src", "stepPath": "draft"}})
    world.append_event(rid, "run.started", {"start": 1})
    world.append_event(rid, "step.started", {"stepPath": "draft", "attempt": 1})
    world.append_event(rid, "step.succeeded", {"stepPath": "draft", "attempt": 1, "output": "text"})
    world.append_event(rid, "timer.scheduled", {"stepPath": "cool-off", "wakeAt": iso(0.4)})
    time.sleep(0.5)  # idle time, far longer than the steps: the axis compresses it
    world.append_event(rid, "timer.fired", {"stepPath": "cool-off"})
    world.append_event(rid, "harness.tool_call.started", {
        "callPath": "call-0-notify", "name": "call_workflow",
        "args": {"workflow": "notify", "input": {}, "subRunId": "run_child"}})
    world.append_event(rid, "harness.tool_call.succeeded", {
        "callPath": "call-0-notify", "name": "call_workflow",
        "result": {"runId": "run_child", "workflow": "notify", "output": None}})
    world.append_event(rid, "wait.started", {"stepPath": "decision", "name": "approval",
                                             "deadline": iso(86400)})
    if finish:
        world.append_event(rid, "signal.received", {"name": "approval", "payload": {"ok": True}})
        world.append_event(rid, "wait.completed", {"stepPath": "decision", "name": "approval"})
        world.append_event(rid, "run.completed", {"output": {"approved": True}})


def test_sleeps_waits_sub_runs_and_fork_source_are_drawn_and_linked(tmp_path):
    world = lw.local_world(str(tmp_path / "data"))
    build_waiting_log(world, finish=False)
    assert little("inspect", "run_fork", "--html", "fork.html", "--data-dir", "data",
                  cwd=str(tmp_path)).returncode == 0
    dom = dump_dom(file_url(str(tmp_path / "fork.html")))

    idle = {n.attrs["data-idle-path"]: n for n in dom.find_all(data_idle_path=True)}
    assert idle["cool-off"].attrs["data-kind"] == "sleep"
    assert idle["decision"].attrs["data-kind"] == "wait" and idle["decision"].has_class("open")
    # Idle time is compressed: the 0.5 s sleep does not take the axis from ~ms of work.
    width = float(re.search(r"width:([\d.]+)%", idle["cool-off"].attrs["style"]).group(1))
    assert width < 10
    assert dom.find_all(lambda n: n.has_class("gap"))
    waiting = dom.find_all(data_waiting_for=True)[0].text()
    assert "event approval (decision) until" in waiting

    assert {n.attrs["href"] for n in dom.find_all(data_sub_run="run_child")} == {"run_child.html"}
    fork = dom.find_all(data_fork_source="run_src")[0]
    assert fork.attrs["href"] == "run_src.html"
    assert "at step draft" in fork.parent.text()
    assert step_bars(dom)["draft"]["data-status"] == "succeeded"


def test_a_10000_step_page_renders_and_filters(tmp_path):
    world = lw.local_world(str(tmp_path / "data"))
    rid = "run_big"
    world.append_event(rid, "run.created", {"workflowId": "big", "input": {"n": 10000}}, durable=False)
    world.append_event(rid, "run.started", {"start": 1}, durable=False)
    for i in range(10000):
        world.append_event(rid, "step.started", {"stepPath": f"items/{i}", "attempt": 1}, durable=False)
        world.append_event(rid, "step.succeeded", {"stepPath": f"items/{i}", "attempt": 1,
                                                   "output": i}, durable=False)
    world.append_event(rid, "run.completed", {"output": {"n": 10000}})
    assert little("inspect", rid, "--html", "big.html", "--data-dir", "data",
                  cwd=str(tmp_path)).returncode == 0
    page = str(tmp_path / "big.html")

    dom = dump_dom(file_url(page), budget_ms=10000)
    bars = step_bars(dom)
    assert 20 < len(bars) < 200, "the timeline draws only the rows in view"
    assert bars["items/0"] == {**bars["items/0"], "data-status": "succeeded", "data-attempts": "1"}
    rows = event_rows(dom)
    assert rows[:3] == [(1, "run.created"), (2, "run.started"), (3, "step.started")]
    assert len(rows) < 100, "the event table renders only the rows in view"
    assert "20003 events" in dom.find_all(data_event_count=True)[0].text()

    dom = dump_dom(file_url(page, "type=run.completed"), budget_ms=10000)
    assert event_rows(dom) == [(20003, "run.completed")]
    dom = dump_dom(file_url(page, "step=items/9999"), budget_ms=10000)
    assert event_rows(dom) == [(20001, "step.started"), (20002, "step.succeeded")]
    assert step_bars(dom)["items/9999"]["data-status"] == "succeeded", "the step is scrolled into view"


def test_inspect_unknown_run_is_one_line_error(tmp_path):
    lw.local_world(str(tmp_path / "data"))
    r = little("inspect", "run_nope", "--html", "x.html", "--data-dir", "data", cwd=str(tmp_path))
    assert r.returncode != 0 and "run_nope" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.html").exists()


# ---- little ui -------------------------------------------------------------------------

def start_ui(cwd: str, *args: str) -> tuple[subprocess.Popen, str]:
    proc = little_bg("ui", "--port", "0", *args, cwd=cwd)
    line = proc.stdout.readline()
    m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    if not m:
        proc.kill()
        raise AssertionError(f"no URL from little ui: {line!r} {proc.stderr.read()}")
    return proc, m.group(0)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def test_ui_lists_runs_filters_by_status_and_serves_run_pages(runs_dir, tmp_path):
    world = lw.local_world(str(runs_dir / "data"))
    build_waiting_log(world, finish=False)
    proc, base = start_ui(str(runs_dir), "--data-dir", "data")
    try:
        dom = dump_dom(base)
        rows = {n.attrs["data-run-id"]: n for n in dom.find_all(data_run_id=True)}
        assert set(rows) == set(world.list_runs())
        assert rows["run_report"].attrs["data-status"] == "completed"
        assert rows["run_broken"].attrs["data-status"] == "failed"
        assert "the upstream answered 403" in rows["run_broken"].text()
        assert "event approval (decision)" in rows["run_fork"].text()
        assert rows["run_report"].find_all(lambda n: n.tag == "a")[0].attrs["href"] == "/runs/run_report"

        dom = dump_dom(base + "#status=failed")
        assert [n.attrs["data-run-id"] for n in dom.find_all(data_run_id=True)] == ["run_broken"]
        assert dom.find_all(data_filter="status")

        dom = dump_dom(base + "runs/run_report")
        assert step_bars(dom)["flaky-api"]["data-attempts"] == "3"
        assert len(event_rows(dom)) == len(world.list_events("run_report"))

        last = world.list_events("run_report")[-1].sequence
        assert get_json(f"{base}api/runs/run_report?since={last}") == {"changed": False}
        assert get_json(f"{base}api/runs/run_report?since=1")["data"]["lastSequence"] == last
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + "runs/run_nope", timeout=10)
        assert err.value.code == 404
    finally:
        stop(proc)
    assert proc.returncode is not None


def test_ui_is_bound_to_loopback_only(tmp_path):
    from little_workflow.ops.ui import make_server

    server = make_server(lw.local_world(str(tmp_path / "data")), port=0)
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.server_close()


BARS_JS = ("[...document.querySelectorAll('[data-step-path]')]"
           ".map(b => [b.dataset.stepPath, b.dataset.status])")
ROWS_JS = "[...document.querySelectorAll('[data-event-seq]')].map(r => r.dataset.eventType)"


def test_ui_pages_update_live_while_the_run_progresses(tmp_path):
    world = lw.local_world(str(tmp_path / "data"))
    rid = "run_live"
    world.append_event(rid, "run.created", {"workflowId": "live", "input": {}})
    world.append_event(rid, "run.started", {"start": 1})
    world.append_event(rid, "step.started", {"stepPath": "one", "attempt": 1})
    proc, base = start_ui(str(tmp_path), "--data-dir", "data")
    try:
        with Page() as page, Page() as runs_page:
            page.open(base + "runs/" + rid)
            runs_page.open(base)
            assert page.eval(BARS_JS) == [["one", "running"]]
            assert runs_page.eval("document.querySelector('[data-run-id=run_live]').dataset.status") == "running"
            world.append_event(rid, "step.succeeded", {"stepPath": "one", "attempt": 1, "output": 1})
            world.append_event(rid, "step.started", {"stepPath": "two", "attempt": 1})
            page.wait_for(f"JSON.stringify({BARS_JS}) === "
                          "'[[\"one\",\"succeeded\"],[\"two\",\"running\"]]'", timeout=15)
            world.append_event(rid, "step.succeeded", {"stepPath": "two", "attempt": 1, "output": 2})
            world.append_event(rid, "run.completed", {"output": 3})
            page.wait_for(f"{ROWS_JS}.at(-1) === 'run.completed'", timeout=15)
            assert page.eval(BARS_JS) == [["one", "succeeded"], ["two", "succeeded"]]
            runs_page.wait_for("document.querySelector('[data-run-id=run_live]')"
                               ".dataset.status === 'completed'", timeout=15)
    finally:
        stop(proc)


def test_event_filter_works_when_a_person_uses_it(runs_dir):
    assert little("inspect", "run_report", "--html", "report.html", "--data-dir", "data",
                  cwd=str(runs_dir)).returncode == 0
    with Page() as page:
        page.open(file_url(str(runs_dir / "report.html")))
        everything = page.eval(ROWS_JS)
        assert everything[0] == "run.created" and "step.failed" in everything
        page.eval("(() => { const s = document.querySelector('[data-filter=type]');"
                  " s.value = 'step.succeeded'; s.dispatchEvent(new Event('change')); })()")
        shown = page.eval(ROWS_JS)
        assert shown == ["step.succeeded"] * everything.count("step.succeeded")
        assert page.eval("location.hash") == "#type=step.succeeded"
        page.eval("(() => { const q = document.querySelector('[data-filter=search]');"
                  " q.value = 'chunks/2'; q.dispatchEvent(new Event('input')); })()")
        assert page.eval(ROWS_JS) == ["step.succeeded"]
        # Clicking a step bar shows that step's events.
        page.eval("(() => { document.querySelector('[data-filter=search]').value = '';"
                  " document.querySelector('[data-filter=search]').dispatchEvent(new Event('input'));"
                  " const s = document.querySelector('[data-filter=type]'); s.value = '';"
                  " s.dispatchEvent(new Event('change'));"
                  " document.querySelector('[data-step-path=\"flaky-api\"]').click(); })()")
        assert page.eval(ROWS_JS) == ["step.started", "step.failed"] * 2 + ["step.started", "step.succeeded"]


# ---- little events --follow ------------------------------------------------------------

def test_events_follow_prints_appended_events_until_the_run_ends(tmp_path):
    world = lw.local_world(str(tmp_path / "data"))
    rid = "run_follow"
    world.append_event(rid, "run.created", {"workflowId": "f", "input": {}})
    proc = little_bg("events", rid, "--follow", "--data-dir", "data", cwd=str(tmp_path))
    try:
        first = proc.stdout.readline()
        assert "run.created" in first
        world.append_event(rid, "run.started", {"start": 1})
        assert "run.started" in proc.stdout.readline()
        world.append_event(rid, "step.started", {"stepPath": "s1", "attempt": 1})
        world.append_event(rid, "step.failed", {"stepPath": "s1", "attempt": 1, "willRetry": False,
                                                "error": {"type": "ValueError", "message": "bad row 7"}})
        assert proc.poll() is None, "follow keeps going while the run is unfinished"
        world.append_event(rid, "run.failed", {"error": {"type": "ValueError", "message": "bad row 7"}})
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = out.strip().splitlines()
    assert [line.split()[1] for line in lines] == ["step.started", "step.failed", "run.failed"]
    assert "ValueError: bad row 7" in lines[-1]
    assert proc.returncode == 0


def test_events_follow_json_lines_on_a_finished_run_returns_at_once(runs_dir):
    r = little("events", "run_report", "--follow", "--json", "--data-dir", "data",
               cwd=str(runs_dir), timeout=30)
    assert r.returncode == 0, r.stderr
    types = [json.loads(line)["type"] for line in r.stdout.splitlines()]
    assert types[0] == "run.created" and types[-1] == "run.completed"
