"""DESIGN §13, the smaller rules of many writers: an idempotency key names one payload,
the local UI answers only its own origin, closing a World never drops a lock a running
attempt holds, and a worker that cannot execute a run now backs off instead of spinning."""

from __future__ import annotations

import http.client
import subprocess
import sys
import threading
import time
from typing import Any

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


# ---- closing a World with a run in flight -------------------------------------------

CLOSE_KINDS = ["memory", "local-file", "local_world"]

TRY_LOCK = """
import sys
import little_workflow as lw
world = lw.local_world(sys.argv[1])
try:
    with world.run_lock(sys.argv[2]):
        print("taken")
except lw.RunLockedError:
    print("locked")
"""


class BlockedStep:
    """A step that runs until released, counting its executions."""

    def __init__(self) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        self.executions = 0

        @lw.workflow(id="held_step")
        async def wf(ctx, _input):
            return await ctx.step("slow", self.run)

        self.workflow = wf

    def run(self) -> int:
        self.executions += 1
        self.started.set()
        assert self.release.wait(60)
        return 1

    def start(self, world: Any, run_id: str) -> tuple[threading.Thread, dict[str, Any]]:
        out: dict[str, Any] = {}

        def target() -> None:
            try:
                out["result"] = lw.run_workflow(self.workflow, None, world=world, run_id=run_id)
            except BaseException as e:  # noqa: BLE001 (handed to the test)
                out["error"] = e

        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        assert self.started.wait(30)
        return thread, out


@pytest.mark.parametrize("make_world", CLOSE_KINDS, indirect=True)
def test_close_with_a_run_in_flight_refuses_and_keeps_its_lock(make_world):
    world = make_world()
    step = BlockedStep()
    thread, out = step.start(world, "run_inflight")

    t = time.monotonic()
    with pytest.raises(lw.WorldBusyError, match="run_inflight") as err:
        world.close(timeout=0.3)
    assert 0.3 <= time.monotonic() - t < 10
    assert isinstance(err.value, lw.LittleWorkflowError) and err.value.run_ids == ["run_inflight"]
    assert not world.closed

    # Another World in this process, and another process, find the run held.
    second = make_world.reopen()
    with pytest.raises(lw.RunLockedError):
        lw.run_workflow(step.workflow, None, world=second, run_id="run_inflight")
    if make_world.kind == "local_world":
        child = subprocess.run([sys.executable, "-c", TRY_LOCK, make_world.data_dir,
                                "run_inflight"], capture_output=True, text=True, timeout=60)
        assert child.stdout.strip() == "locked", child.stderr

    step.release.set()
    thread.join(30)
    assert out["result"].output == 1 and step.executions == 1
    world.close(timeout=0.3)
    assert world.closed
    second.close()
    types = [e.type for e in make_world.reopen().list_events("run_inflight")]
    assert types.count("step.succeeded") == 1 and types[-1] == "run.completed"


@pytest.mark.parametrize("make_world", CLOSE_KINDS, indirect=True)
def test_close_waits_for_a_run_in_flight_to_finish(make_world):
    world = make_world()
    step = BlockedStep()
    thread, out = step.start(world, "run_waited")
    closer_done = threading.Event()
    closer_error: list[BaseException] = []

    def closer() -> None:
        try:
            world.close(timeout=60)
        except BaseException as e:  # noqa: BLE001
            closer_error.append(e)
        closer_done.set()

    threading.Thread(target=closer, daemon=True).start()
    assert not closer_done.wait(0.5)  # waits while the step runs
    # Meanwhile the run is still held: nobody else runs it.
    second = make_world.reopen()
    with pytest.raises(lw.RunLockedError):
        lw.run_workflow(step.workflow, None, world=second, run_id="run_waited")
    step.release.set()
    assert closer_done.wait(30) and not closer_error
    thread.join(30)
    assert world.closed and out["result"].output == 1 and step.executions == 1
    assert lw.run_workflow(step.workflow, None, world=second, run_id="run_waited").output == 1
    assert step.executions == 1
    second.close()


def test_close_with_nothing_in_flight_does_not_wait(local_world_):
    t = time.monotonic()
    local_world_.close()
    assert time.monotonic() - t < 0.5 and local_world_.closed


# ---- failing fast is not spinning -------------------------------------------------------

HOLD = """
import sys
import little_workflow as lw
world = lw.local_world(sys.argv[1])
with world.run_lock(sys.argv[2]):
    print("held", flush=True)
    sys.stdin.read()  # until the parent closes our stdin
"""


@lw.workflow(id="quick")
async def quick(ctx, input):
    return await ctx.step("one", lambda: (input or {}).get("n", 0) + 1)


@lw.workflow(id="quick", input_schema={"type": "object", "required": ["name"]})
async def quick_v2(ctx, input):
    return input["name"]


class CountingWorld:
    """A tracing World counting every World call of the worker, by name."""

    def __init__(self, world: Any) -> None:
        self.calls: dict[str, int] = {}
        self.world = lw.tracing_world(world, self.count)

    def count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def total(self) -> int:
        return sum(self.calls.values())


class RunningWorker:
    def __init__(self, world: Any, workflows: list[Any]) -> None:
        self.worker = lw.Worker(world, workflows, concurrency=2)
        self.thread = threading.Thread(target=self.worker.run, daemon=True)

    def __enter__(self) -> "RunningWorker":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.worker.stop()
        self.thread.join(30)
        assert not self.thread.is_alive()


def finished(world: Any, run_id: str, within: float) -> float | None:
    """Seconds until the run's log holds its terminal event, or None."""
    start = time.monotonic()
    while time.monotonic() - start < within:
        types = [e.type for e in world.list_events(run_id)]
        if types and types[-1] in ("run.completed", "run.failed", "run.cancelled"):
            return time.monotonic() - start
        time.sleep(0.05)
    return None


def test_worker_backs_off_a_run_another_process_holds(tmp_path, caplog):
    caplog.set_level("INFO", logger="little_workflow.worker")
    data = str(tmp_path / "lw")
    world = lw.local_world(data)
    lw.start_workflow(quick, {"n": 1}, world=world, run_id="run_held")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, data, "run_held"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        counting = CountingWorld(world)
        cpu = time.process_time()
        with RunningWorker(counting.world, [quick]):
            time.sleep(3.0)
            cpu = time.process_time() - cpu
            attempts, calls = counting.calls.get("run_lock", 0), counting.total()
            holder.stdin.close()
            holder.wait(30)
            picked_up = finished(world, "run_held", within=15)
    finally:
        holder.kill()
        holder.wait()
    print(f"held run over 3 s: {attempts} attempts, {calls} World calls, {cpu:.3f} s CPU; "
          f"picked up {picked_up} s after release")
    # Backoff 0.5, 1, 2 s (±20 %): 3 or 4 attempts in 3 s, not thousands.
    assert 2 <= attempts <= 6
    assert calls < 60  # about 3 sweeps of a few calls each, plus the attempts
    assert cpu < 0.5
    # Released: picked up at its next attempt (backoff then about 4 s) or sooner.
    assert picked_up is not None and picked_up < 8
    assert lw.materialize_run_state(world, "run_held").output == 2
    # One report when it became blocked, one when it ran again: not one per attempt.
    lines = [r.getMessage() for r in caplog.records if "run_held" in r.getMessage()]
    assert len([m for m in lines if "cannot run now" in m]) == 1, lines
    assert len([m for m in lines if "runs again" in m]) == 1, lines


def test_worker_backs_off_a_run_whose_input_no_longer_validates(local_world_, caplog):
    caplog.set_level("INFO", logger="little_workflow.worker")
    world = local_world_
    lw.start_workflow(quick, {"n": 1}, world=world, run_id="run_old_input")
    counting = CountingWorld(world)
    cpu = time.process_time()
    with RunningWorker(counting.world, [quick_v2]):
        time.sleep(3.0)
        cpu = time.process_time() - cpu
        calls = counting.total()
    print(f"run with a stale input over 3 s: {calls} World calls, {cpu:.3f} s CPU")
    assert calls < 60
    assert cpu < 0.5
    lines = [r.getMessage() for r in caplog.records if "run_old_input" in r.getMessage()]
    assert len(lines) == 1 and "cannot run now" in lines[0] and "schema" in lines[0], lines
    # Still unfinished and resumable by a worker that knows its version.
    assert [e.type for e in world.list_events("run_old_input")] == ["run.created"]
    worker = lw.Worker(world, [quick])
    worker.run_until_idle()
    worker.close()
    assert lw.materialize_run_state(world, "run_old_input").output == 2


def test_idle_worker_with_a_held_run_on_s3_stays_within_the_sweep_budget(moto_s3, caplog):
    from s3_server import RequestCounter

    caplog.set_level("INFO", logger="little_workflow.worker")
    bucket = moto_s3.new_bucket()
    fs = moto_s3.filesystem()
    world = lw.virtual_world(fs, f"{bucket}/wf")
    lw.start_workflow(quick, {"n": 1}, world=world, run_id="run_leased")
    other_host = lw.virtual_world(moto_s3.filesystem(), f"{bucket}/wf")
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with other_host.run_lock("run_leased"):
            held.set()
            release.wait(60)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(30)
    counter = RequestCounter(fs)
    seconds = 4.0
    try:
        with RunningWorker(world, [quick]):
            time.sleep(seconds)
            requests, by_method = counter.total, dict(counter.by_method)
            release.set()
            holder.join(30)
            picked_up = finished(world, "run_leased", within=20)
    finally:
        release.set()
    print(f"idle worker, one held run on S3: {requests / seconds:.1f} requests/s "
          f"({by_method}); picked up {picked_up} s after release")
    # The README's budget: a sweep a second of 2 requests plus 1 per unfinished run,
    # and a run that cannot run now retried at 0.5, 1, 2, 4 … s (a few requests each).
    assert requests <= seconds * 3 + 4 * 5 + 4
    assert picked_up is not None and picked_up < 12
    assert lw.materialize_run_state(world, "run_leased").output == 2


def test_idle_worker_leaves_a_run_of_an_unknown_workflow_alone_cheaply(local_world_):
    world = local_world_
    lw.start_workflow(quick, {"n": 1}, world=world, run_id="run_unknown_wf")
    counting = CountingWorld(world)

    @lw.workflow(id="another")
    async def another(ctx, input):
        return input

    with RunningWorker(counting.world, [another]):
        time.sleep(2.0)
    assert counting.calls.get("run_lock", 0) == 0
    assert counting.total() < 40  # a sweep a second: the index, then the run's new events
    assert [e.type for e in world.list_events("run_unknown_wf")] == ["run.created"]


SLOW_THEN_WAIT = """
import sys, time
import little_workflow as lw

@lw.workflow(id="slow_then_wait", version="1")
async def wf(ctx, _input):
    await ctx.step("slow", lambda: time.sleep(3) or 1)
    return await ctx.wait_for_event("w", "go")

world = lw.local_world(sys.argv[1])
print(lw.run_workflow(wf, None, world=world, run_id=sys.argv[2], suspend=True).status, flush=True)
"""


# The same version as the holder's (slower) body: a run either one created, both may run.
@lw.workflow(id="slow_then_wait", version="1")
async def slow_then_wait(ctx, _input):
    await ctx.step("slow", lambda: 1)
    return await ctx.wait_for_event("w", "go")


def test_a_held_run_its_holder_suspends_is_not_left_to_the_backoff(tmp_path, monkeypatch):
    from little_workflow.runtime import retry

    monkeypatch.setattr(retry, "RETRY_FIRST_SECONDS", 20.0)  # far beyond the test
    monkeypatch.setattr(retry, "RETRY_HELD_CAP_SECONDS", 20.0)
    data = str(tmp_path / "lw")
    world = lw.local_world(data)
    lw.start_workflow(slow_then_wait, None, world=world, run_id="run_let_go")
    holder = subprocess.Popen([sys.executable, "-c", SLOW_THEN_WAIT, data, "run_let_go"],
                              stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while "step.started" not in [e.type for e in world.list_events("run_let_go")]:
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.05)
        counting = CountingWorld(world)
        with RunningWorker(counting.world, [slow_then_wait]):
            assert holder.stdout.readline().strip() == "waiting"  # it held the run ~3 s
            holder.wait(30)
            assert counting.calls.get("run_lock", 0) == 1  # tried, found held, backed off
            lw.send_event(world, "run_let_go", "go", {"ok": True})
            took = finished(world, "run_let_go", within=15)
    finally:
        holder.kill()
        holder.wait()
    # Its backoff had 12 s or more to go; the event is taken within a sweep and a poll
    # (well under a second on a quiet machine; 5 s leaves room for a loaded one).
    assert took is not None and took < 5, took
    assert lw.materialize_run_state(world, "run_let_go").output == {"ok": True}
