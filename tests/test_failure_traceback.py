"""A failed run keeps where it failed: `run.failed` stores the traceback (bounded) beside
`{type, message}`, and `little run`, `little events`, the inspector and `little ui` show
it. The in-process error names the run once and chains only the real cause."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from browser import dump_dom, file_url
from checkout import SRC

import little_workflow as lw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLOWS = '''
import little_workflow as lw


def parse_invoice(n):
    raise ValueError(f"invoice {n} has no total")


def deep(n):
    if n == 0:
        raise RuntimeError("bottom of a deep stack")
    return deeper(n - 1)


def deeper(n):  # two functions take turns: Python does not fold their frames into one line
    return deep(n)


@lw.workflow(id="billing")
async def billing(ctx, input):
    await ctx.step("load", lambda: 1)
    return await ctx.step("parse", parse_invoice, 7)


@lw.workflow(id="deep")
async def deep_flow(ctx, input):
    return await ctx.step("recurse", deep, 400)


@lw.workflow(id="outside")
async def outside(ctx, input):
    await ctx.step("load", lambda: 1)
    return {}["missing"]
'''


def little(*args: str, cwd: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "little_workflow.cli", *args], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def flows(tmp_path, monkeypatch):
    (tmp_path / "flows.py").write_text(FLOWS)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("flows", None)
    import flows as module

    return module


def failed_payload(world, run_id: str) -> dict:
    return [e for e in world.list_events(run_id) if e.type == "run.failed"][-1].payload


def test_run_failed_stores_the_traceback_beside_type_and_message(flows, tmp_path):
    world = lw.local_world(str(tmp_path / "data"))
    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(flows.billing, {}, world=world, run_id="run_bill")
    payload = failed_payload(world, "run_bill")
    assert payload["error"]["type"] == "StepFailedError"
    assert "invoice 7 has no total" in payload["error"]["message"]
    tb = payload["traceback"]
    assert tb.startswith("Traceback (most recent call last):"), tb
    assert "flows.py" in tb and "in parse_invoice" in tb and "ValueError: invoice 7 has no total" in tb
    assert "no running event loop" not in tb


def test_a_failure_outside_any_step_keeps_its_line_too(flows, tmp_path):
    world = lw.local_world(str(tmp_path / "data"))
    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(flows.outside, {}, world=world, run_id="run_out")
    tb = failed_payload(world, "run_out")["traceback"]
    assert "in outside" in tb and "KeyError: 'missing'" in tb, tb


def test_a_deep_traceback_is_bounded_and_keeps_its_ends(flows, tmp_path):
    world = lw.local_world(str(tmp_path / "data"))
    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(flows.deep_flow, {}, world=world, run_id="run_deep")
    tb = failed_payload(world, "run_deep")["traceback"]
    assert len(tb.encode()) <= 8 * 1024, len(tb.encode())
    assert tb.startswith("Traceback (most recent call last):")
    assert "RuntimeError: bottom of a deep stack" in tb  # the root cause survives the cut
    assert "StepFailedError" in tb.splitlines()[-1]      # and so does the end


def test_the_in_process_error_names_the_run_once_and_chains_only_the_cause(tmp_path):
    (tmp_path / "flows.py").write_text(FLOWS)
    script = "import flows, little_workflow as lw\n" \
             "lw.run_workflow(flows.billing, {}, world='memory://w', run_id='run_once')\n"
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": f"{SRC}:{tmp_path}"}, timeout=120)
    assert r.returncode == 1
    assert "no running event loop" not in r.stderr, r.stderr
    assert "During handling of the above exception" not in r.stderr, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last == ("little_workflow.errors.WorkflowFailedError: run run_once failed: "
                    "step 'parse' failed: ValueError: invoice 7 has no total"), last


def test_little_run_and_events_show_the_traceback(tmp_path):
    (tmp_path / "flows.py").write_text(FLOWS)
    cwd = str(tmp_path)
    r = little("run", "flows:billing", "--run-id", "run_cli", cwd=cwd)
    assert r.returncode == 1
    assert "in parse_invoice" in r.stderr and "ValueError: invoice 7 has no total" in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1] == (
        "error: run run_cli failed: step 'parse' failed: ValueError: invoice 7 has no total")
    r = little("events", "run_cli", cwd=cwd)
    assert r.returncode == 0 and "in parse_invoice" in r.stdout, r.stdout
    assert "Traceback (most recent call last):" in r.stdout
    r = little("events", "run_cli", "--json", cwd=cwd)
    failed = [e for e in json.loads(r.stdout) if e["type"] == "run.failed"][0]
    assert "in parse_invoice" in failed["payload"]["traceback"]
    # Asked again, the stored failure is shown with its stored traceback.
    r = little("run", "flows:billing", "--run-id", "run_cli", cwd=cwd)
    assert r.returncode == 1 and "in parse_invoice" in r.stderr, r.stderr


def test_the_inspector_page_shows_the_traceback(flows, tmp_path):
    world = lw.local_world(str(tmp_path / "data"))
    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(flows.billing, {}, world=world, run_id="run_page")
    from little_workflow.ops.inspect import render_run_html

    page = tmp_path / "run_page.html"
    page.write_text(render_run_html(world, "run_page"))
    dom = dump_dom(file_url(str(page)))
    shown = dom.find_all(data_field="traceback")
    assert len(shown) == 1, [n.attrs for n in dom.find_all(data_field=True)]
    assert "in parse_invoice" in shown[0].text() and "ValueError: invoice 7" in shown[0].text()


def test_little_ui_serves_the_traceback_on_the_run_page(flows, tmp_path):
    import threading
    import urllib.request

    from little_workflow.ops.ui import make_server

    world = lw.local_world(str(tmp_path / "data"))
    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(flows.billing, {}, world=world, run_id="run_ui")
    server = make_server(world, port=0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        base = "http://127.0.0.1:%d" % server.server_address[1]
        with urllib.request.urlopen(base + "/api/runs/run_ui", timeout=30) as r:
            data = json.loads(r.read())["data"]
        assert "in parse_invoice" in data["traceback"]
        dom = dump_dom(base + "/runs/run_ui", real_wait_ms=3000)
        shown = dom.find_all(data_field="traceback")
        assert len(shown) == 1 and "ValueError: invoice 7" in shown[0].text()
    finally:
        server.shutdown()
        server.server_close()
