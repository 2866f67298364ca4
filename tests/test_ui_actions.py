"""`little ui` acts (DESIGN §18 "The UI acts, safely"): cancel, send an event, fork, resume
and approve, each a POST with the server's token, refused (403) without it, with a wrong
one, from a foreign Host or Origin; bad input is a 400 with the message. The server is the
real one on 127.0.0.1; each action is checked as the public API reads the run after it."""

from __future__ import annotations

import http.client
import json
import threading

import pytest
from checkout import SRC

import little_workflow as lw
from little_workflow.ops.ui import make_server


def double(x: int) -> int:
    return x * 2


@lw.workflow(id="gate")
async def gate(ctx: lw.RunContext, input: dict) -> dict:
    a = await ctx.step("prepare", double, input["n"])
    decision = await ctx.wait_for_event("decision", "approval")
    b = await ctx.step("finish", double, a)
    return {"decision": decision, "total": b}


@pytest.fixture
def ui(tmp_path):
    world = lw.local_world(str(tmp_path / "data"))
    said: list[str] = []
    server = make_server(world, port=0, workflows=[gate], say=said.append)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield world, server, said
    finally:
        server.shutdown()
        server.server_close()


def waiting_run(world, run_id: str = "run_gate") -> str:
    result = lw.run_workflow(gate, {"n": 3}, world=world, run_id=run_id, suspend=True)
    assert result.status == "waiting"
    return run_id


def post(server, path: str, body=None, *, token: str | None = "own", host: str | None = None,
         origin: str | None = None, form: bool = False, raw: bytes | None = None) -> tuple[int, dict]:
    port = server.server_address[1]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Host": host or f"127.0.0.1:{port}"}
    if origin is not None:
        headers["Origin"] = origin
    if form:
        from urllib.parse import urlencode

        fields = dict(body or {})
        if token is not None:
            fields["token"] = server.token if token == "own" else token
        data = urlencode(fields).encode()
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    else:
        if token is not None:
            headers["X-Little-Token"] = server.token if token == "own" else token
        data = raw if raw is not None else json.dumps(body or {}).encode()
        headers["Content-Type"] = "application/json"
    conn.request("POST", path, body=data, headers=headers)
    resp = conn.getresponse()
    text = resp.read().decode()
    conn.close()
    try:
        return resp.status, json.loads(text)
    except ValueError:
        return resp.status, {"text": text}


def status(world, run_id: str) -> str:
    return lw.get_run(world, run_id).status()


# ---- refused ----------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["no token", "wrong token", "foreign host", "foreign origin",
                                  "rebound name with token", "form without token"])
def test_an_action_without_the_token_or_from_elsewhere_is_403_and_changes_nothing(ui, case):
    world, server, _ = ui
    rid = waiting_run(world)
    port = server.server_address[1]
    kwargs: dict = {
        "no token": {"token": None},
        "wrong token": {"token": server.token[:-2] + "xx"},
        "foreign host": {"host": "evil.example:80"},
        "foreign origin": {"origin": "http://evil.example"},
        "rebound name with token": {"host": f"evil.example:{port}", "origin": f"http://evil.example:{port}"},
        "form without token": {"token": None, "form": True},
    }[case]
    code, body = post(server, f"/api/runs/{rid}/cancel", {"reason": "x"}, **kwargs)
    assert code == 403, body
    assert status(world, rid) == "waiting"
    assert [e.type for e in world.list_events(rid)][-1] != "run.cancel_requested"
    assert not any(e.type.startswith("run.cancel") for e in world.list_events(rid))


def test_without_the_token_a_bad_body_is_still_403(ui):
    world, server, _ = ui
    rid = waiting_run(world)
    assert post(server, f"/api/runs/{rid}/events", raw=b"{not json", token=None)[0] == 403
    assert post(server, f"/api/runs/{rid}/explode", {}, token=None)[0] == 403


def test_the_printed_url_carries_the_token_and_each_server_has_its_own(tmp_path):
    world = lw.local_world(str(tmp_path / "data"))
    one, two = make_server(world, port=0), make_server(world, port=0)
    try:
        assert one.token != two.token and len(one.token) >= 24
        assert one.url == f"http://127.0.0.1:{one.server_address[1]}/?token={one.token}"
    finally:
        one.server_close()
        two.server_close()


def test_own_origin_with_the_token_may_act(ui):
    world, server, _ = ui
    rid = waiting_run(world)
    port = server.server_address[1]
    code, body = post(server, f"/api/runs/{rid}/cancel", {"reason": "not needed"},
                      host=f"localhost:{port}", origin=f"http://localhost:{port}")
    assert (code, body["status"]) == (200, "cancelled"), body


# ---- each action, as the public API reads the run after it --------------------------------

def test_cancel_cancels_with_its_reason(ui):
    world, server, _ = ui
    rid = waiting_run(world)
    code, body = post(server, f"/api/runs/{rid}/cancel", {"reason": "budget spent"})
    assert code == 200 and body["status"] == "cancelled"
    with pytest.raises(lw.RunCancelledError):
        lw.get_run(world, rid).result(timeout=10)
    cancelled = [e for e in world.list_events(rid) if e.type == "run.cancelled"]
    assert cancelled and "budget spent" in json.dumps(cancelled[0].payload)


def test_send_event_then_resume_completes_the_waiting_run(ui):
    world, server, _ = ui
    rid = waiting_run(world)
    code, body = post(server, f"/api/runs/{rid}/events", {"name": "approval", "payload": {"ok": True}})
    assert code == 200, body
    sent = [e for e in world.list_events(rid) if e.sequence == body["sequence"]]
    assert sent and sent[0].payload["name"] == "approval"
    code, body = post(server, f"/api/runs/{rid}/resume")
    assert code == 202 and body["resuming"], body
    result = lw.get_run(world, rid).result(timeout=60)
    assert result == {"decision": {"ok": True}, "total": 12}


def test_send_event_as_a_form_with_the_token_field(ui):
    world, server, _ = ui
    rid = waiting_run(world)
    code, body = post(server, f"/api/runs/{rid}/events", {"name": "approval", "payload": '"yes"'}, form=True)
    assert code == 200, body
    assert [e.payload for e in world.list_events(rid) if e.sequence == body["sequence"]][0]["payload"] == "yes"


def test_fork_from_a_step_makes_a_run_that_resume_runs(ui):
    world, server, _ = ui
    rid = waiting_run(world)
    post(server, f"/api/runs/{rid}/events", {"name": "approval", "payload": 1})
    post(server, f"/api/runs/{rid}/resume")
    lw.get_run(world, rid).result(timeout=60)
    code, body = post(server, f"/api/runs/{rid}/fork", {"fromStep": "finish", "newRunId": "run_forked"})
    assert (code, body["runId"]) == (200, "run_forked"), body
    forked = lw.materialize_run_state(world, "run_forked")
    assert forked.workflow_id == "gate" and "prepare" in forked.steps and "finish" not in forked.steps
    code, body = post(server, "/api/runs/run_forked/resume")
    assert code == 202, body
    assert lw.get_run(world, "run_forked").result(timeout=60)["total"] == 12


# ---- bad input: 400 (or 404) with the message, never a dropped connection ------------------

@pytest.mark.parametrize("path, body, code, words", [
    ("/api/runs/{rid}/events", {"payload": 1}, 400, "name"),
    ("/api/runs/{rid}/events", {"name": 7}, 400, "name"),
    ("/api/runs/{rid}/cancel", {"reason": 5}, 400, "reason"),
    ("/api/runs/{rid}/fork", {"fromStep": "no-such-step"}, 400, "no-such-step"),
    ("/api/runs/{rid}/fork", {"newRunId": "not a run id"}, 400, "not a run id"),
    ("/api/runs/{rid}/explode", {}, 404, "no action"),
    ("/api/runs/run_nope/cancel", {}, 404, "run_nope"),
    ("/api/runs/bad id/cancel", {}, 400, "invalid run id"),
    ("/api/runs/{rid}/approve/call_nope", {}, 400, "call_nope"),
])
def test_bad_input_is_a_400_naming_what_was_wrong(ui, path, body, code, words):
    world, server, _ = ui
    rid = waiting_run(world)
    got, answer = post(server, path.format(rid=rid).replace(" ", "%20"), body)
    assert got == code, answer
    assert words in answer["error"], answer
    assert status(world, rid) == "waiting"


def test_a_body_that_is_not_json_is_a_400(ui):
    world, server, _ = ui
    rid = waiting_run(world)
    code, body = post(server, f"/api/runs/{rid}/events", raw=b"{not json")
    assert code == 400 and "not valid JSON" in body["error"]
    code, body = post(server, f"/api/runs/{rid}/events", raw=b"[1, 2]")
    assert code == 400 and "JSON object" in body["error"]


def test_resume_of_a_finished_run_or_of_code_it_was_not_given_is_a_400(ui, tmp_path):
    world, server, _ = ui
    rid = waiting_run(world)
    post(server, f"/api/runs/{rid}/cancel")
    code, body = post(server, f"/api/runs/{rid}/resume")
    assert code == 400 and "cancelled" in body["error"]

    @lw.workflow(id="elsewhere")
    async def elsewhere(ctx: lw.RunContext, input: dict) -> dict:
        await ctx.wait_for_event("w", "go")
        return {}

    lw.run_workflow(elsewhere, {}, world=world, run_id="run_other", suspend=True)
    code, body = post(server, "/api/runs/run_other/resume")
    assert code == 400 and "elsewhere" in body["error"] and "little ui MODULE" in body["error"]
    assert status(world, "run_other") == "waiting"


# ---- pending tool approvals (lw.pending_approvals / lw.approve_tool_call) -----------------

CALLS = [{"toolCallId": "call_1", "toolName": "refund", "args": {"amount": 40}},
         {"toolCallId": "call_2", "toolName": "delete_account", "args": {"user": "u7"}}]


@lw.workflow(id="asks")
async def asks(ctx: lw.RunContext, input: dict) -> dict:
    answer = await ctx.wait_for_event("approvals", "tool-approvals",
                                      request={"kind": "tool-approval", "calls": CALLS})
    return {"answer": answer}


def asking_run(world, run_id: str = "run_asks") -> str:
    assert lw.run_workflow(asks, {}, world=world, run_id=run_id, suspend=True).status == "waiting"
    return run_id


def get(server, path: str) -> dict:
    port = server.server_address[1]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}"})
    resp = conn.getresponse()
    body = json.loads(resp.read())
    conn.close()
    assert resp.status == 200, body
    return body["data"]


def test_pending_approvals_are_listed_and_approve_and_deny_answer_them(ui):
    world, server, _ = ui
    rid = asking_run(world)
    listed = get(server, "/api/runs")["approvals"]
    assert [(a["runId"], a["toolCallId"], a["toolName"], a["args"]) for a in listed] == [
        (rid, "call_1", "refund", {"amount": 40}), (rid, "call_2", "delete_account", {"user": "u7"})]
    assert [a["toolCallId"] for a in get(server, f"/api/runs/{rid}")["approvals"]] == ["call_1", "call_2"]
    code, body = post(server, f"/api/runs/{rid}/approve/call_1", {"approved": "maybe?"})
    assert code == 400 and "approved" in body["error"], body

    code, body = post(server, f"/api/runs/{rid}/approve/call_1", {"approved": True})
    assert code == 200, body
    assert [p.tool_call_id for p in lw.pending_approvals(world, run_id=rid)] == ["call_2"]
    code, body = post(server, f"/api/runs/{rid}/approve/call_2", {"approved": False, "reason": "never"})
    assert code == 200, body
    assert lw.pending_approvals(world, run_id=rid) == []
    answers = [e.payload["payload"] for e in world.list_events(rid) if e.type.startswith("signal.")]
    assert answers == [{"approvals": {"call_1": True}}, {"approvals": {"call_2": "never"}}]
    assert get(server, "/api/runs")["approvals"] == []

    code, body = post(server, f"/api/runs/{rid}/approve/call_1", {"approved": True})
    assert code == 400 and "call_1" in body["error"], body  # answered already: not pending


def test_approve_without_the_token_is_403_and_the_call_stays_pending(ui):
    world, server, _ = ui
    rid = asking_run(world)
    code, _ = post(server, f"/api/runs/{rid}/approve/call_1", {"approved": True}, token=None)
    assert code == 403
    assert [p.tool_call_id for p in lw.pending_approvals(world, run_id=rid)] == ["call_1", "call_2"]


# ---- resume says when it did not run --------------------------------------------------------

SLOW_FLOWS = '''
import time
import little_workflow as lw

def nap(x: int) -> int:
    time.sleep(120)
    return x

@lw.workflow(id="slow")
async def slow(ctx: lw.RunContext, input: dict) -> dict:
    await ctx.step("nap", nap, 1)
    return {}
'''


def test_resume_of_a_run_another_process_executes_is_409_naming_it(tmp_path):
    import os
    import subprocess
    import sys
    import time

    from little_workflow.ops.cli_support import load_workflows

    (tmp_path / "slow_flows.py").write_text(SLOW_FLOWS)
    holder = subprocess.Popen([sys.executable, "-m", "little_workflow.cli", "run", "slow_flows.py:slow",
                               "--input", "{}", "--run-id", "run_busy", "--data-dir", "data"],
                              cwd=str(tmp_path), env={**os.environ, "PYTHONPATH": SRC},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    world = lw.local_world(str(tmp_path / "data"))
    server = None
    try:
        deadline = time.monotonic() + 60
        while not any(e.type == "step.started" for e in world.list_events("run_busy")):
            assert holder.poll() is None and time.monotonic() < deadline, "the holder did not start its step"
            time.sleep(0.05)
        server = make_server(world, port=0, workflows=load_workflows(str(tmp_path / "slow_flows.py")))
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        code, body = post(server, "/api/runs/run_busy/resume")
        assert code == 409, body
        assert "run_busy" in body["error"] and str(holder.pid) in body["error"], body
        assert [e.type for e in world.list_events("run_busy")].count("run.started") == 1
    finally:
        holder.kill()
        holder.wait()
        if server is not None:
            server.shutdown()
            server.server_close()
