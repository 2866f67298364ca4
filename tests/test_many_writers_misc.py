"""DESIGN §13, the smaller rules of many writers: an idempotency key names one payload,
the local UI answers only its own origin, closing a World never drops a lock a running
attempt holds, and a worker that cannot execute a run now backs off instead of spinning."""

from __future__ import annotations

import http.client

import pytest

import little_workflow as lw

CHEAP_KINDS = ["memory", "local-file", "local_world", "s3"]


# ---- send_event: one idempotency key, one payload -------------------------------------

@lw.workflow(id="waits_once")
async def waits_once(ctx, _input):
    return await ctx.wait_for_event("w", "approval")


@pytest.mark.parametrize("make_world", CHEAP_KINDS, indirect=True)
def test_a_reused_idempotency_key_with_another_payload_is_refused(make_world):
    world = make_world()
    run_id = lw.start_workflow(waits_once, None, world=world, run_id="run_keyed")
    first = lw.send_event(world, run_id, "approval", {"ok": 1}, idempotency_key="mail-1")
    again = lw.send_event(world, run_id, "approval", {"ok": 1}, idempotency_key="mail-1")
    assert again.sequence == first.sequence  # the same payload again: a no-op

    with pytest.raises(lw.IdempotencyConflictError, match="mail-1"):
        lw.send_event(world, run_id, "approval", {"ok": 2}, idempotency_key="mail-1")
    with pytest.raises(lw.IdempotencyConflictError, match="mail-1"):
        lw.send_event(world, run_id, "rejection", {"ok": 1}, idempotency_key="mail-1")
    # Another process, which knows nothing of this key yet, is told the same.
    other = make_world.reopen()
    with pytest.raises(lw.IdempotencyConflictError, match="mail-1"):
        lw.send_event(other, run_id, "approval", {"ok": 2}, idempotency_key="mail-1")
    assert lw.send_event(other, run_id, "approval", {"ok": 1},
                         idempotency_key="mail-1").sequence == first.sequence

    types = [e.type for e in world.list_events(run_id)]
    assert types.count("signal.received") == 1
    r = lw.run_workflow(waits_once, None, world=world, run_id=run_id, suspend=True)
    assert r.status == "completed" and r.output == {"ok": 1}
    # The run is over: the same send is still a no-op, another payload still a conflict.
    assert lw.send_event(world, run_id, "approval", {"ok": 1},
                         idempotency_key="mail-1").sequence == first.sequence
    with pytest.raises(lw.IdempotencyConflictError):
        lw.send_event(world, run_id, "approval", {"ok": 3}, idempotency_key="mail-1")


def test_a_reused_key_with_a_spilled_payload_compares_the_payload(memory_world):
    world = memory_world
    run_id = lw.start_workflow(waits_once, None, world=world, run_id="run_big")
    big = "x" * (70 * 1024)
    first = lw.send_event(world, run_id, "approval", {"text": big}, idempotency_key="k")
    assert lw.send_event(world, run_id, "approval", {"text": big},
                         idempotency_key="k").sequence == first.sequence
    with pytest.raises(lw.IdempotencyConflictError):
        lw.send_event(world, run_id, "approval", {"text": big + "y"}, idempotency_key="k")


# ---- the local UI answers only its own origin ---------------------------------------

def _get(port: int, path: str, host: str | None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=True)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@pytest.fixture
def ui_server(tmp_path):
    import threading

    from little_workflow.ops.ui import make_server

    world = lw.local_world(str(tmp_path / "data"))
    world.append_event("run_secret", "run.created", {"workflowId": "w", "input": {"pw": "hunter2"}})
    server = make_server(world, port=0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        world.close()


@pytest.mark.parametrize("path", ["/", "/api/runs", "/runs/run_secret", "/api/runs/run_secret",
                                  "/nope"])
@pytest.mark.parametrize("host", ["evil.example:{port}", "evil.example", "127.0.0.1:1",
                                  "localhost", "127.0.0.1.evil.example:{port}", "", None])
def test_ui_refuses_a_host_that_is_not_its_own_origin(ui_server, path, host):
    port = ui_server
    status, body = _get(port, path, None if host is None else host.format(port=port))
    assert status == 403
    assert b"hunter2" not in body


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}"])
def test_ui_answers_its_own_origin(ui_server, host):
    port = ui_server
    status, body = _get(port, "/api/runs/run_secret", host.format(port=port))
    assert status == 200 and b"hunter2" in body


def test_ui_has_no_write_endpoint(ui_server):
    port = ui_server
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request(method, "/api/runs/run_secret", body=b"{}",
                         headers={"Host": f"127.0.0.1:{port}"})
            assert conn.getresponse().status in (403, 405, 501)
        finally:
            conn.close()
