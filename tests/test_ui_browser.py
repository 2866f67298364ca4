"""`little ui` acts in a real browser (headless Chromium over the DevTools protocol): a
person opens the URL `little ui` printed, clicks a button, and the run changes as the
public API reads it. Without the token the same click is refused and nothing changes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from browser import Page
from checkout import SRC

import little_workflow as lw
from little_workflow.ops.cli_support import load_workflows

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLOWS = textwrap.dedent('''
    import little_workflow as lw

    def double(x: int) -> int:
        return x * 2

    @lw.workflow(id="gate")
    async def gate(ctx: lw.RunContext, input: dict) -> dict:
        a = await ctx.step("prepare", double, input["n"])
        decision = await ctx.wait_for_event("decision", "approval")
        b = await ctx.step("finish", double, a)
        return {"decision": decision, "total": b}

    @lw.workflow(id="asks")
    async def asks(ctx: lw.RunContext, input: dict) -> dict:
        calls = [{"toolCallId": "call_1", "toolName": "refund", "args": {"amount": 40}},
                 {"toolCallId": "call_2", "toolName": "delete_account", "args": {"user": "u7"}}]
        answer = await ctx.wait_for_event("approvals", "tool-approvals",
                                          request={"kind": "tool-approval", "calls": calls})
        return {"answer": answer}
''')


@pytest.fixture
def site(tmp_path):
    """A World with one waiting run of `gate`, and `little ui flows.py` serving it."""
    (tmp_path / "flows.py").write_text(FLOWS)
    world = lw.local_world(str(tmp_path / "data"))
    [gate] = load_workflows(str(tmp_path / "flows.py") + ":gate")
    [asks] = load_workflows(str(tmp_path / "flows.py") + ":asks")
    assert lw.run_workflow(gate, {"n": 3}, world=world, run_id="run_gate", suspend=True).status == "waiting"
    assert lw.run_workflow(asks, {}, world=world, run_id="run_asks", suspend=True).status == "waiting"
    env = {**os.environ, "PYTHONPATH": SRC, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "little_workflow.cli", "ui", "flows.py",
                             "--port", "0", "--data-dir", "data"], cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        m = re.search(r"(http://127\.0\.0\.1:\d+/)\?token=([A-Za-z0-9_-]+)", line)
        assert m, f"no URL with a token from little ui: {line!r}"
        yield world, m.group(1), m.group(2)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def status_badge(page: Page) -> str:
    return page.eval("document.querySelector('h1 ~ [data-run-status]').dataset.runStatus")


def click(page: Page, action: str) -> None:
    page.eval(f"document.querySelector('[data-action={action}]').click()")


def type_into(page: Page, name: str, value: str) -> None:
    page.eval(f"(() => {{ const n = document.querySelector('[data-field=\"{name}\"]'); "
              f"n.value = {json.dumps(value)}; n.dispatchEvent(new Event('input')); "
              "n.dispatchEvent(new Event('change')); })()")


def test_send_an_event_then_resume_in_the_browser_completes_the_run(site):
    world, base, token = site
    with Page() as page:
        page.open(f"{base}?token={token}")  # the printed URL: the tab keeps the token
        assert "token=" not in page.eval("location.href")  # and takes it out of the address bar
        page.open(base + "runs/run_gate")
        assert status_badge(page) == "waiting"
        assert page.eval("document.querySelector('[data-field=\"event-name\"]').value") == "approval"
        type_into(page, "event-payload", '{"ok": true}')
        click(page, "send")
        page.wait_for("document.querySelector('[data-action-result]').textContent.startsWith('sent')", timeout=30)
        assert [e.payload["payload"] for e in world.list_events("run_gate")
                if e.type.startswith("signal.")] == [{"ok": True}]
        click(page, "resume")
        page.wait_for("document.querySelector('h1 ~ [data-run-status]').dataset.runStatus === 'completed'", timeout=60)
        assert page.eval("document.querySelector('[data-step-path=finish]').dataset.status") == "succeeded"
    assert lw.get_run(world, "run_gate").result(timeout=10) == {"decision": {"ok": True}, "total": 12}


def test_cancel_in_the_browser_cancels_with_the_reason(site):
    world, base, token = site
    with Page() as page:
        page.open(f"{base}runs/run_gate?token={token}")
        type_into(page, "reason", "nobody will approve this")
        click(page, "cancel")
        page.wait_for("document.querySelector('h1 ~ [data-run-status]').dataset.runStatus === 'cancelled'", timeout=30)
    assert lw.get_run(world, "run_gate").status() == "cancelled"
    [cancelled] = [e for e in world.list_events("run_gate") if e.type == "run.cancelled"]
    assert "nobody will approve this" in str(cancelled.payload)


def test_fork_in_the_browser_links_to_the_new_run(site):
    world, base, token = site
    with Page() as page:
        page.open(f"{base}runs/run_gate?token={token}")
        page.eval("document.querySelector('[data-field=\"fork-from\"]').value = 'decision';"
                  "document.querySelector('[data-field=\"fork-from\"]').dispatchEvent(new Event('change'))")
        click(page, "fork")
        fork_id = page.wait_for("document.querySelector('[data-forked-run]')?.dataset.forkedRun", timeout=30)
        page.open(base + "runs/" + fork_id)
        assert page.eval("document.querySelector('[data-fork-source]').dataset.forkSource") == "run_gate"
    forked = lw.materialize_run_state(world, fork_id)
    assert forked.workflow_id == "gate" and list(forked.steps) == ["prepare"]


def test_without_the_token_the_click_is_refused_and_nothing_changes(site):
    world, base, _ = site
    with Page() as page:
        page.open(base + "runs/run_gate")  # not the printed URL: this tab has no token
        assert page.eval("!!document.querySelector('.notoken')")
        click(page, "cancel")
        page.wait_for("document.querySelector('[data-action-result]').textContent.startsWith('403')", timeout=30)
        assert status_badge(page) == "waiting"
    assert lw.get_run(world, "run_gate").status() == "waiting"
    assert not any(e.type.startswith("run.cancel") for e in world.list_events("run_gate"))


APPROVALS_JS = "[...document.querySelectorAll('[data-approval]')].map(n => n.dataset.approval)"


def test_approve_and_deny_pending_tool_calls_in_the_browser(site):
    world, base, token = site
    with Page() as page:
        page.open(f"{base}?token={token}")  # the runs list: every waiting run's pending calls
        assert page.eval(APPROVALS_JS) == ["call_1", "call_2"]
        page.eval("document.querySelector('[data-approval=call_1] [data-action=approve]').click()")
        page.wait_for(f"JSON.stringify({APPROVALS_JS}) === '[\"call_2\"]'", timeout=30)
        assert [p.tool_call_id for p in lw.pending_approvals(world)] == ["call_2"]
        page.open(base + "runs/run_asks")  # the run's own page lists what is left
        assert page.eval(APPROVALS_JS) == ["call_2"]
        type_into(page, "reason", "not without a ticket")
        page.eval("document.querySelector('[data-approval=call_2] [data-action=deny]').click()")
        page.wait_for(f"{APPROVALS_JS}.length === 0", timeout=30)
        click(page, "resume")
        page.wait_for("document.querySelector('h1 ~ [data-run-status]').dataset.runStatus === 'completed'", timeout=60)
    assert lw.get_run(world, "run_asks").result(timeout=10)["answer"] == {"approvals": {"call_1": True}}
    answers = [e.payload["payload"] for e in world.list_events("run_asks") if e.type.startswith("signal.")]
    assert answers == [{"approvals": {"call_1": True}}, {"approvals": {"call_2": "not without a ticket"}}]
