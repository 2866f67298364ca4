"""DESIGN §10 rules the runtime keeps: one attempt at a time, nothing after the end, one
step cap per World across threads and loops, bounded events, lock owners identified by
more than a pid."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from conftest import private_memory

import little_workflow as lw
from little_workflow.world.locks import process_start_time, this_process


class Overlap:
    """Counts how many calls of a function run at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.calls = 0

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.calls += 1
            self.most = max(self.most, self.now)

    def __exit__(self, *exc) -> None:
        with self.lock:
            self.now -= 1


def wait_until(predicate, seconds: float = 10.0) -> None:
    deadline = time.time() + seconds
    while not predicate():
        assert time.time() < deadline, "timed out waiting"
        time.sleep(0.01)


def test_a_sync_step_that_overruns_its_timeout_never_overlaps_its_retry(memory_world):
    overlap = Overlap()
    late_errors: list[BaseException] = []

    def slow() -> int:
        with overlap:
            time.sleep(0.3)
        try:  # an abandoned attempt that tries to record something after the run ended
            step = lw.current_step()
            step.call_tool("late", lambda a: a, {"attempt": step.attempt})
        except lw.LittleWorkflowError as e:
            late_errors.append(e)
        return 1

    @lw.workflow(id="overrun")
    async def overrun(ctx, input):
        return await ctx.step("slow", slow, timeout=0.1,
                              retry=lw.Retry(max_attempts=3, backoff=0.001))

    with pytest.raises(lw.WorkflowFailedError) as info:
        lw.run_workflow(overrun, {}, world=memory_world, run_id="run_overrun")
    assert "StepTimeoutError" in str(info.value.error)
    wait_until(lambda: overlap.calls == 3 and overlap.now == 0 and len(late_errors) >= 1)
    time.sleep(0.05)
    assert overlap.most == 1, f"{overlap.most} attempts of one step ran at once"
    events = memory_world.list_events("run_overrun")
    assert events[-1].type == "run.failed", [e.type for e in events[-3:]]
    assert any(isinstance(e, lw.RunFinishedError) for e in late_errors)


def test_a_group_child_cannot_record_after_the_run_failed(memory_world):
    errors: list[BaseException] = []
    finished = threading.Event()

    def fails() -> None:
        raise lw.FatalError("boom")

    def slow_then_records() -> int:
        time.sleep(0.3)
        try:
            lw.current_step().call_tool("t", lambda a: a, {"late": True})
        except BaseException as e:
            errors.append(e)
        finally:
            finished.set()
        return 1

    @lw.workflow(id="group-fail")
    async def group_fail(ctx, input):
        return await ctx.parallel("g", [slow_then_records, fails])

    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(group_fail, {}, world=memory_world, run_id="run_groupfail")
    assert finished.wait(5)
    types = [e.type for e in memory_world.list_events("run_groupfail")]
    assert types[-1] == "run.failed", types
    assert errors and isinstance(errors[0], lw.RunFinishedError)


def test_nothing_is_appended_after_the_end_on_every_backend(make_world):
    world = make_world()

    @lw.workflow(id="ends")
    async def ends(ctx, input):
        return await ctx.step("one", lambda: 1)

    lw.run_workflow(ends, {}, world=world, run_id="run_ends")
    with pytest.raises(lw.RunFinishedError) as info:
        world.append_event("run_ends", "step.started", {"stepPath": "late"})
    assert info.value.run_id == "run_ends" and info.value.status == "completed"
    fresh = make_world.reopen()  # another process learns the end from the log
    with pytest.raises(lw.RunFinishedError):
        fresh.append_event("run_ends", "x", {})
    # The outer loop's record of a cycle is the one exception (DESIGN §5).
    fresh.append_event("run_ends", "outer_loop.cycle_completed", {"cycleNumber": 1})


def test_the_step_cap_holds_across_threads_and_event_loops():
    world = lw.virtual_world(private_memory(), "/wf", max_concurrent_steps=2)
    overlap = Overlap()

    def work(i: int) -> int:
        with overlap:
            time.sleep(0.05)
        return i

    @lw.workflow(id="capped")
    async def capped(ctx, input):
        import functools

        return await ctx.parallel("g", [functools.partial(work, i) for i in range(6)])

    threads = [threading.Thread(target=lw.run_workflow, args=(capped, {"t": t}),
                                kwargs={"world": world, "run_id": f"run_cap{t}"}) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlap.calls == 18
    assert overlap.most <= 2, f"{overlap.most} steps ran at once on a World capped at 2"


def test_large_values_in_any_event_become_artifacts(make_world):
    world = make_world()
    big = "x" * 300_000

    def tool_step() -> str:
        return lw.current_step().call_tool("fetch", lambda a: {"body": big}, {"url": "u"})["body"][:3]

    @lw.workflow(id="big-input")
    async def big_input(ctx, input):
        head = await ctx.step("tool", tool_step)
        return {"len": len(input["blob"]), "head": head}

    result = lw.run_workflow(big_input, {"blob": big}, world=world, run_id="run_bigin")
    assert result.output == {"len": 300_000, "head": "xxx"}
    for event in world.list_events("run_bigin"):
        size = len(json.dumps(dict(event.payload)))
        assert size < 64 * 1024, f"{event.type} carries {size} bytes inline"
    created = world.list_events("run_bigin")[0]
    assert set(created.payload["input"]["blob"]) == {"$ref"}
    assert lw.materialize_run_state(world, "run_bigin").input == {"blob": big}
    # The same input again is the same run (its input hash is of the value, not the ref).
    again = lw.run_workflow(big_input, {"blob": big}, world=make_world.reopen(), run_id="run_bigin")
    assert again.output == result.output
    assert lw.replay_run(world, "run_bigin", big_input).output == result.output


# ---- lock owners --------------------------------------------------------------------


def write_owner(data_dir: str, run_id: str, **owner) -> str:
    lock_dir = os.path.join(data_dir, "locks", hashlib.sha256(run_id.encode()).hexdigest())
    os.makedirs(lock_dir, exist_ok=True)
    with open(os.path.join(lock_dir, "owner.json"), "w") as f:
        json.dump({"token": "t0", "createdAt": "2026-01-01T00:00:00Z", **owner}, f)
    return lock_dir


def test_a_reused_pid_does_not_keep_a_dead_owners_lock(tmp_path):
    data = str(tmp_path / "d")
    world = lw.local_world(data)
    me = this_process()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        wait_until(lambda: process_start_time(sleeper.pid) != "")
        # A live process, but not the one that wrote the lock (other start time): dead owner.
        write_owner(data, "run_pidreuse", pid=sleeper.pid, host=me["host"], bootId=me["bootId"],
                    startTime="1")
        with world.run_lock("run_pidreuse"):
            pass
        # The real holder (matching start time) is respected.
        write_owner(data, "run_alive", pid=sleeper.pid, host=me["host"], bootId=me["bootId"],
                    startTime=process_start_time(sleeper.pid))
        with pytest.raises(lw.RunLockedError) as info:
            with world.run_lock("run_alive"):
                pass
        assert info.value.owner_pid == sleeper.pid
    finally:
        sleeper.kill()
        sleeper.wait()


def test_lock_owners_from_another_boot_or_host(tmp_path):
    data = str(tmp_path / "d")
    world = lw.local_world(data)
    me = this_process()
    # Same host, another boot: every process of that boot is gone, whatever its pid.
    write_owner(data, "run_reboot", pid=os.getppid(), host=me["host"], bootId="other-boot",
                startTime=process_start_time(os.getppid()))
    with world.run_lock("run_reboot"):
        pass
    # Another host (a container sharing the data dir) with our very pid: not us, and not
    # checkable from here, so respected.
    write_owner(data, "run_container", pid=os.getpid(), host="other-container",
                bootId=me["bootId"], startTime=me["startTime"])
    with pytest.raises(lw.RunLockedError, match="other-container"):
        with world.run_lock("run_container"):
            pass


def test_owner_json_identifies_the_process(tmp_path):
    world = lw.local_world(str(tmp_path / "d"))
    with world.run_lock("run_whoami"):
        lock_dir = os.path.join(str(tmp_path / "d"), "locks",
                                hashlib.sha256(b"run_whoami").hexdigest())
        owner = json.load(open(os.path.join(lock_dir, "owner.json")))
    me = this_process()
    assert {k: owner[k] for k in ("pid", "host", "bootId", "startTime")} == me
    assert owner["token"] and owner["createdAt"]


def test_reading_a_log_while_it_grows_is_never_taken_for_a_hole(make_world):
    """A whole-log read that races appends sees a prefix of the log, never a gap."""
    world = make_world()
    reader = make_world.reopen()  # another World (another host, where the backend has one)
    stop = threading.Event()
    problems: list[BaseException] = []

    def read_forever() -> None:
        while not stop.is_set():
            try:
                events = reader.list_events("run_growing")
                assert [e.sequence for e in events] == list(range(1, len(events) + 1))
            except BaseException as e:  # noqa: BLE001 - reported below
                problems.append(e)
                return

    t = threading.Thread(target=read_forever)
    t.start()
    try:
        for i in range(60):
            world.append_event("run_growing", "tick", {"i": i})
    finally:
        stop.set()
        t.join()
    assert problems == []
