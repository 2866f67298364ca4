"""Run handles (DESIGN §18): `lw.get_run`, `lw.start_workflow(..., handle=True)`;
`.status()`, `.result(timeout=)`, `.aresult()`, `.cancel()`, `.send()` — from this process
and across processes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from decimal import Decimal
from typing import Any

import pytest
from checkout import SRC

import little_workflow as lw
from little_workflow.runtime import followers

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
sys.path.insert(0, TESTS)

from watch_flows import Quote, greet, priced, touch  # noqa: E402


def child_env() -> dict[str, str]:
    return {**os.environ,
            "PYTHONPATH": os.pathsep.join([SRC, TESTS, os.environ.get("PYTHONPATH", "")])}


@lw.workflow(id="waits")
async def waits(ctx: lw.RunContext, input: dict[str, Any]) -> dict[str, Any]:
    first = await ctx.step("first", lambda: 1)
    decision = await ctx.wait_for_event("decision", "go")
    return {"first": first, "decision": decision}


@lw.workflow(id="boom")
async def boom(ctx: lw.RunContext, input: None) -> None:
    def explode() -> None:
        raise ValueError("the oven caught fire")

    await ctx.step("explode", explode)


def test_a_handle_in_the_parent_waits_for_a_run_a_worker_subprocess_executes(tmp_path: Any) -> None:
    data, gate = str(tmp_path / "data"), str(tmp_path / "gate")
    with lw.local_world(data) as world:
        handle = lw.start_workflow(priced, {"item": "tea", "gate": gate}, world=world,
                                   run_id="run_priced", handle=True)
        assert isinstance(handle, lw.RunHandle) and handle.run_id == "run_priced"
        assert handle.status() == "created"
        worker = subprocess.Popen(
            [sys.executable, "-m", "little_workflow.cli", "worker", "watch_flows",
             "--until-idle", "--data-dir", data],
            env=child_env(), cwd=TESTS, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            seen: list[str] = []

            def open_the_gate_once_running() -> None:
                while handle.status() != "running":
                    time.sleep(0.02)
                seen.append(handle.status())
                touch(gate)

            opener = threading.Thread(target=open_the_gate_once_running, daemon=True)
            opener.start()
            out = handle.result(timeout=120)  # the run is executed by the subprocess
            opener.join(10)
        finally:
            worker.wait(60)
        assert worker.returncode == 0, worker.stderr
        # Typed like the workflow's output: the value codec decodes the stored JSON.
        assert isinstance(out, Quote) and out == Quote(item="tea", price=Decimal("4.20"))
        assert seen == ["running"] and handle.status() == "completed"
        # Another handle, from the id alone, in this process: the stored JSON, or typed.
        assert lw.get_run(world, "run_priced").result() == {"item": "tea", "price": "4.20"}
        assert lw.get_run(world, "run_priced", workflow=priced).result().price == Decimal("4.20")


def test_get_run_of_an_unknown_run_is_run_not_found(memory_world: Any) -> None:
    with pytest.raises(lw.RunNotFoundError, match="run_nobody"):
        lw.get_run(memory_world, "run_nobody")
    with pytest.raises(lw.WorldPathError):
        lw.get_run(memory_world, "not a run id")
    lw.start_workflow(greet, {"name": "ada"}, world=memory_world, run_id="run_g")
    with pytest.raises(lw.WorkflowMismatchError):
        lw.get_run(memory_world, "run_g", workflow=waits)


def test_status_follows_the_run_and_send_and_cancel_drive_it(memory_world: Any) -> None:
    handle = lw.start_workflow(waits, {}, world=memory_world, run_id="run_w1", handle=True)
    assert handle.status() == "created"
    r = lw.run_workflow(waits, {}, world=memory_world, run_id="run_w1", suspend=True)
    assert r.status == "waiting" and handle.status() == "waiting"
    handle.send("go", {"ok": True})
    done = lw.run_workflow(waits, {}, world=memory_world, run_id="run_w1")
    assert handle.status() == "completed"
    assert handle.result() == done.output == {"first": 1, "decision": {"ok": True}}

    other = lw.start_workflow(waits, {}, world=memory_world, run_id="run_w2", handle=True)
    other.cancel("no longer needed")
    assert other.status() == "cancelled"
    with pytest.raises(lw.RunCancelledError, match="no longer needed"):
        other.result(timeout=5)


def test_result_raises_the_failure_and_times_out(memory_world: Any) -> None:
    failing = lw.start_workflow(boom, None, world=memory_world, run_id="run_boom", handle=True)
    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(boom, None, world=memory_world, run_id="run_boom")
    with pytest.raises(lw.WorkflowFailedError, match="the oven caught fire") as e:
        failing.result()
    assert e.value.run_id == "run_boom" and e.value.error["type"] == "StepFailedError"
    assert e.value.traceback and "explode" in e.value.traceback

    idle = lw.start_workflow(greet, {"name": "bo"}, world=memory_world, handle=True)
    with pytest.raises(TimeoutError, match=f"{idle.run_id} did not finish within 0.2 s .*created"):
        idle.result(timeout=0.2)

    async def wait_async() -> None:
        with pytest.raises(TimeoutError):
            await idle.aresult(timeout=0.2)

    asyncio.run(wait_async())


def test_an_append_in_this_process_wakes_a_waiting_handle_at_once(memory_world: Any,
                                                                  monkeypatch: Any) -> None:
    # With the poll interval made an hour, only the in-process wake-up can end the wait
    # before the join below gives up.
    monkeypatch.setattr(followers, "POLL_SECONDS", 3600.0)
    lw.start_workflow(waits, {}, world=memory_world, run_id="run_wake")
    runner = threading.Thread(target=lw.run_workflow, args=(waits, {}),
                              kwargs={"world": memory_world, "run_id": "run_wake"}, daemon=True)
    runner.start()
    handle = lw.get_run(memory_world, "run_wake")
    while handle.status() != "waiting":
        time.sleep(0.01)
    results: dict[str, Any] = {}

    def wait_sync() -> None:
        results["sync"] = handle.result()

    async def wait_async() -> None:
        results["async"] = await lw.get_run(memory_world, "run_wake").aresult()

    waiters = [threading.Thread(target=wait_sync, daemon=True),
               threading.Thread(target=asyncio.run, args=(wait_async(),), daemon=True)]
    for t in waiters:
        t.start()
    time.sleep(0.2)  # both are blocked on their wake-up now (or will read the end first)
    handle.send("go", "yes")
    for t in waiters + [runner]:
        t.join(30)
        assert not t.is_alive(), "a handle was not woken by the run's end in this process"
    assert results == {"sync": {"first": 1, "decision": "yes"},
                       "async": {"first": 1, "decision": "yes"}}


def test_a_handle_waiting_across_processes_reads_the_log_once_per_poll(tmp_path: Any) -> None:
    """No busy polling: while a run another process executes takes its time, the handle
    reads the log about once per POLL_SECONDS (the bound grows with the time it waited)."""
    data, gate = str(tmp_path / "data"), str(tmp_path / "gate")
    reads: list[str] = []
    with lw.local_world(data) as world:
        lw.start_workflow(priced, {"item": "tea", "gate": gate}, world=world, run_id="run_polled")
        traced = lw.tracing_world(world, lambda name, args, kwargs: reads.append(name))
        handle = lw.get_run(traced, "run_polled")
        worker = subprocess.Popen(
            [sys.executable, "-m", "little_workflow.cli", "worker", "watch_flows",
             "--until-idle", "--data-dir", data],
            env=child_env(), cwd=TESTS, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            threading.Timer(1.5, touch, args=(gate,)).start()
            reads.clear()
            started = time.monotonic()
            assert handle.result(timeout=120).get("item") == "tea"
            waited = time.monotonic() - started
        finally:
            worker.wait(60)
    log_reads = reads.count("list_events")
    assert 2 <= log_reads <= waited / followers.POLL_SECONDS + 3, (log_reads, waited)
