"""The durable runtime through the public API, on memory, local fsspec and local_world."""

from __future__ import annotations

import asyncio
import functools
import threading
import time

import pytest
from conftest import private_memory
from pydantic import BaseModel

import little_workflow as lw


@pytest.fixture(params=["memory", "local-file", "local_world"])
def rworld(request, tmp_path):
    if request.param == "memory":
        return lw.virtual_world(private_memory(), "/wf")
    if request.param == "local-file":
        return lw.virtual_world(f"file://{tmp_path}/vw")
    return lw.local_world(str(tmp_path / "lw"))


class Counter:
    def __init__(self):
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def record(self, name):
        with self.lock:
            self.calls.append(name)


def test_steps_sync_async_parallel_and_served_again(rworld):
    c = Counter()

    def add(a, b):
        c.record("add")
        return a + b

    async def mul(a, b):
        c.record("mul")
        await asyncio.sleep(0)
        return a * b

    def child(i):
        c.record(f"child{i}")
        return i * 10

    @lw.workflow(id="basic")
    async def basic(ctx, input):
        x = await ctx.step("add", add, input["a"], 1)
        y = await ctx.step("mul", mul, x, 3)
        kids = await ctx.parallel("kids", [functools.partial(child, i) for i in range(5)],
                                  max_concurrency=2)
        return {"y": y, "kids": kids}

    r = lw.run_workflow(basic, {"a": 1}, world=rworld, run_id="run_basic")
    assert r.status == "completed" and r.output == {"y": 6, "kids": [0, 10, 20, 30, 40]}
    assert sorted(c.calls) == sorted(["add", "mul"] + [f"child{i}" for i in range(5)])
    again = lw.run_workflow(basic, {"a": 1}, world=rworld, run_id="run_basic")
    assert again.output == r.output and len(c.calls) == 7
    state = lw.materialize_run_state(rworld, "run_basic")
    assert state.status == "completed"
    assert state.steps["kids/3"].output == 30 and state.steps["add"].attempts == 1
    assert set(state.steps) == {"add", "mul", "kids/0", "kids/1", "kids/2", "kids/3", "kids/4"}
    assert lw.replay_run(rworld, "run_basic", basic).output == r.output
    types = [e.type for e in rworld.list_events("run_basic")]
    assert types[:2] == ["run.created", "run.started"] and types[-1] == "run.completed"


def test_resume_runs_only_what_was_not_committed(rworld):
    c = Counter()
    fail_once = {"armed": True}

    def step(i):
        c.record(f"s{i}")
        if i == 3 and fail_once["armed"]:
            fail_once["armed"] = False
            raise KeyboardInterrupt  # like a crash: the run is left unfinished
        return i

    @lw.workflow(id="resume")
    async def wf(ctx, input):
        return [await ctx.step(f"s{i}", step, i) for i in range(6)]

    with pytest.raises(KeyboardInterrupt):
        lw.run_workflow(wf, None, world=rworld, run_id="run_resume")
    assert lw.materialize_run_state(rworld, "run_resume").status == "running"
    r = lw.run_workflow(wf, None, world=rworld, run_id="run_resume")
    assert r.output == [0, 1, 2, 3, 4, 5]
    assert c.calls == ["s0", "s1", "s2", "s3", "s3", "s4", "s5"]
    assert lw.materialize_run_state(rworld, "run_resume").steps["s3"].attempts == 2


def test_input_mismatch_and_workflow_failed(rworld):
    @lw.workflow(id="fails")
    async def wf(ctx, input):
        if input["x"] > 0:
            await ctx.step("boom", lambda: 1 / 0)
        return input

    assert lw.run_workflow(wf, {"x": 0}, world=rworld, run_id="run_ok").output == {"x": 0}
    with pytest.raises(lw.InputMismatchError) as info:
        lw.run_workflow(wf, {"x": 1}, world=rworld, run_id="run_ok")
    assert info.value.run_id == "run_ok"
    with pytest.raises(lw.WorkflowFailedError) as failed:
        lw.run_workflow(wf, {"x": 1}, world=rworld, run_id="run_bad")
    assert failed.value.run_id == "run_bad"
    assert isinstance(failed.value.cause, lw.StepFailedError)
    assert isinstance(failed.value.cause.__cause__, ZeroDivisionError)
    assert lw.materialize_run_state(rworld, "run_bad").status == "failed"
    with pytest.raises(lw.WorkflowFailedError):  # a failed run stays failed
        lw.run_workflow(wf, {"x": 1}, world=rworld, run_id="run_bad")


def test_retry_backoff_and_fatal(rworld):
    attempts = {"flaky": 0, "fatal": 0}

    def flaky():
        attempts["flaky"] += 1
        if attempts["flaky"] < 3:
            raise ConnectionError("try again")
        return lw.current_step().attempt

    def fatal():
        attempts["fatal"] += 1
        raise lw.FatalError("no point retrying")

    @lw.workflow(id="retry")
    async def wf(ctx, input):
        a = await ctx.step("flaky", flaky, retry=lw.Retry(max_attempts=5, backoff=0.001))
        try:
            await ctx.step("fatal", fatal, retry=lw.Retry(max_attempts=5, backoff=0.001))
        except lw.StepFailedError as e:
            return {"attempt": a, "fatal": e.error["type"]}
        return {}

    r = lw.run_workflow(wf, None, world=rworld, run_id="run_retry")
    assert r.output == {"attempt": 3, "fatal": "FatalError"}
    assert attempts == {"flaky": 3, "fatal": 1}
    state = lw.materialize_run_state(rworld, "run_retry")
    assert state.steps["flaky"].attempts == 3 and state.steps["fatal"].status == "failed"
    # resuming serves the recorded failure: the fatal step is not called again
    assert lw.replay_run(rworld, "run_retry", wf).output == r.output
    assert attempts == {"flaky": 3, "fatal": 1}


def test_step_timeout(rworld):
    def slow():
        time.sleep(0.5)
        return 1

    async def slow_async():
        await asyncio.sleep(5)

    @lw.workflow(id="timeouts")
    async def wf(ctx, input):
        out = []
        for name, fn in (("sync", slow), ("async", slow_async)):
            try:
                await ctx.step(name, fn, timeout=0.05)
            except lw.StepFailedError as e:
                out.append(e.error["type"])
        return out

    assert lw.run_workflow(wf, None, world=rworld).output == ["StepTimeoutError", "StepTimeoutError"]


def test_failing_child_cancels_siblings(rworld):
    finished = []

    async def slow(i):
        await asyncio.sleep(2)
        finished.append(i)
        return i

    async def bad():
        raise ValueError("child failed")

    @lw.workflow(id="cancel")
    async def wf(ctx, input):
        await ctx.parallel("g", [functools.partial(slow, 0), bad, functools.partial(slow, 2)])

    with pytest.raises(lw.WorkflowFailedError) as info:
        lw.run_workflow(wf, None, world=rworld, run_id="run_cancel")
    # The group waits for every child before it raises: had the slow siblings not been
    # cancelled, they would have finished and been recorded here.
    assert finished == []
    assert info.value.cause.step_path == "g/1"


def test_world_wide_cap_and_group_cap(tmp_path):
    world = lw.virtual_world(private_memory(), "/wf", max_concurrent_steps=3)
    active = {"now": 0, "max": 0}

    async def work():
        active["now"] += 1
        active["max"] = max(active["max"], active["now"])
        await asyncio.sleep(0.01)
        active["now"] -= 1
        return 1

    @lw.workflow(id="caps")
    async def wf(ctx, input):
        a, b = await asyncio.gather(
            ctx.parallel("a", [work] * 10, max_concurrency=input["group"]),
            ctx.parallel("b", [work] * 10, max_concurrency=input["group"]),
        )
        return sum(a) + sum(b)

    assert lw.run_workflow(wf, {"group": 8}, world=world).output == 20
    assert active["max"] == 3
    active["max"] = 0
    assert lw.run_workflow(wf, {"group": 1}, world=world).output == 20
    assert active["max"] == 2  # one per group, two groups


def test_step_paths_outputs_and_pydantic(rworld):
    class Point(BaseModel):
        x: int
        y: int

    @lw.workflow(id="paths")
    async def wf(ctx, input):
        p = await ctx.step("point", lambda: Point(x=1, y=2))
        out = {"point": p}
        for bad in ("../up", "a//b", "", "a/./b", "sp ace"):
            try:
                await ctx.step(bad, lambda: 1)
            except lw.WorldPathError:
                out.setdefault("bad", []).append(bad)
        try:
            await ctx.step("point", lambda: 2)
        except lw.StepError as e:
            out["dup"] = e.step_path
        try:
            await ctx.step("obj", lambda: object())
        except lw.StepFailedError as e:
            out["nonjson"] = e.step_path
        return out

    r = lw.run_workflow(wf, None, world=rworld)
    assert r.output == {"point": {"x": 1, "y": 2}, "bad": ["../up", "a//b", "", "a/./b", "sp ace"],
                        "dup": "point", "nonjson": "obj"}


def test_large_outputs_go_to_artifacts(rworld):
    big = "x" * 200_000

    @lw.workflow(id="big")
    async def wf(ctx, input):
        s = await ctx.step("big", lambda: {"text": big})
        return {"n": len(s["text"])}

    r = lw.run_workflow(wf, None, world=rworld, run_id="run_big")
    succeeded = [e for e in rworld.list_events("run_big") if e.type == "step.succeeded"][0]
    assert "output" not in succeeded.payload and succeeded.payload["outputRef"].startswith("artifact://")
    assert lw.materialize_run_state(rworld, "run_big").steps["big"].output == {"text": big}
    assert r.output == {"n": 200_000}


def test_schemas_format_ignored_property_named_format_validated(rworld):
    schema = {"type": "object", "required": ["format", "email"],
              "properties": {"format": {"type": "string", "enum": ["csv", "json"]},
                             "email": {"type": "string", "format": "email"}}}

    @lw.workflow(id="schema", input_schema=schema, output_schema={"type": "integer"})
    async def wf(ctx, input):
        return 1 if input["format"] == "csv" else "not an int"

    assert lw.run_workflow(wf, {"format": "csv", "email": "not-an-email"}, world=rworld).output == 1
    with pytest.raises(lw.SchemaValidationError):
        lw.run_workflow(wf, {"format": "xml", "email": "a@b"}, world=rworld, run_id="run_bad_in")
    assert rworld.list_events("run_bad_in") == []
    with pytest.raises(lw.WorkflowFailedError) as info:
        lw.run_workflow(wf, {"format": "json", "email": "a@b"}, world=rworld, run_id="run_bad_out")
    assert isinstance(info.value.cause, lw.SchemaValidationError)
    assert isinstance(info.value, lw.SchemaValidationError)  # catchable as either
    assert lw.materialize_run_state(rworld, "run_bad_out").status == "failed"


def test_bad_run_ids_write_nothing(rworld):
    @lw.workflow(id="noop")
    async def wf(ctx, input):
        return 1

    for bad in ("../run_x", "run_a b", "run_" + "x" * 81, "", "RUN_x"):
        with pytest.raises(lw.WorldPathError):
            lw.run_workflow(wf, None, world=rworld, run_id=bad)
    assert rworld.list_runs() == []
    r = lw.run_workflow(wf, None, world=rworld)
    assert r.run_id.startswith("run_") and len(r.run_id) == 36


def test_replay_divergence(rworld):
    @lw.workflow(id="v1")
    async def v1(ctx, input):
        a = await ctx.step("a", lambda: 1)
        b = await ctx.step("b", lambda: 2)
        return a + b

    @lw.workflow(id="v1")
    async def reordered(ctx, input):
        b = await ctx.step("b", lambda: 2)
        a = await ctx.step("a", lambda: 1)
        return a + b

    @lw.workflow(id="v1")
    async def extra(ctx, input):
        await ctx.step("a", lambda: 1)
        await ctx.step("b", lambda: 2)
        return await ctx.step("c", lambda: 3)

    @lw.workflow(id="v1")
    async def dropped(ctx, input):
        return await ctx.step("a", lambda: 1) + 2

    calls = []

    @lw.workflow(id="v1")
    async def same(ctx, input):
        a = await ctx.step("a", lambda: calls.append(1))
        b = await ctx.step("b", lambda: calls.append(1))
        return a + b

    lw.run_workflow(v1, None, world=rworld, run_id="run_v1")
    with pytest.raises(lw.ReplayDivergenceError) as info:
        lw.replay_run(rworld, "run_v1", reordered)
    assert info.value.step_path == "b" and info.value.log_step_path == "a"
    assert not info.value.resuming
    with pytest.raises(lw.ReplayDivergenceError) as info:
        lw.replay_run(rworld, "run_v1", extra)
    assert info.value.step_path == "c"
    with pytest.raises(lw.ReplayDivergenceError) as info:  # the log's step b is never asked for
        lw.replay_run(rworld, "run_v1", dropped)
    assert info.value.step_path == "(end)" and info.value.log_step_path == "b"
    assert lw.replay_run(rworld, "run_v1", same).output == 3 and calls == []


def test_current_step_and_scratch(rworld):
    def write():
        info = lw.current_step()
        info.scratch.pipe_file("note.txt", b"hello")
        return {"run": info.run_id, "path": info.step_path, "attempt": info.attempt,
                "read": info.scratch.cat_file("note.txt").decode()}

    @lw.workflow(id="scratch")
    async def wf(ctx, input):
        return await ctx.step("w/x", write)

    r = lw.run_workflow(wf, None, world=rworld, run_id="run_scratch")
    assert r.output == {"run": "run_scratch", "path": "w/x", "attempt": 1, "read": "hello"}
    assert rworld.files.cat_file(
        rworld.path("runs", "run_scratch", "steps", "w", "x", "scratch", "note.txt")) == b"hello"
    with pytest.raises(RuntimeError):
        lw.current_step()


def test_run_workflow_inside_running_loop_and_arun(rworld):
    @lw.workflow(id="loop")
    async def wf(ctx, input):
        return await ctx.step("s", lambda: input + 1)

    async def notebook_cell():
        sync_result = lw.run_workflow(wf, 1, world=rworld)  # a loop is already running here
        async_result = await lw.arun_workflow(wf, 2, world=rworld)
        return sync_result.output, async_result.output

    assert asyncio.run(notebook_cell()) == (2, 3)


def test_same_run_id_twice_in_process_is_locked(rworld):
    started = threading.Event()
    release = threading.Event()

    def hold():
        started.set()
        release.wait(5)
        return 1

    @lw.workflow(id="hold")
    async def wf(ctx, input):
        return await ctx.step("hold", hold)

    t = threading.Thread(target=lambda: lw.run_workflow(wf, None, world=rworld, run_id="run_held"))
    t.start()
    started.wait(5)
    with pytest.raises(lw.RunLockedError) as info:
        lw.run_workflow(wf, None, world=rworld, run_id="run_held")
    assert info.value.run_id == "run_held"
    release.set()
    t.join()
    assert lw.run_workflow(wf, None, world=rworld, run_id="run_held").output == 1


def test_workflow_versions_recorded(rworld):
    @lw.workflow(id="versioned", version="7")
    async def wf(ctx, input):
        return 1

    lw.run_workflow(wf, None, world=rworld, run_id="run_ver")
    assert wf.version_id.startswith("wv_") and len(wf.version_id) == 19
    doc = rworld.read_document(f"workflow-versions/{wf.version_id}.json")
    assert doc["workflowId"] == "versioned" and doc["version"] == "7"
    created = rworld.list_events("run_ver")[0]
    assert created.payload["workflowVersionId"] == wf.version_id


def test_nested_groups_never_deadlock_under_a_world_cap():
    world = lw.virtual_world(private_memory(), "/wf", max_concurrent_steps=1)

    @lw.workflow(id="nested")
    async def wf(ctx, input):
        async def branch(i):
            inner = await ctx.parallel(f"outer/{i}/inner",
                                       [functools.partial(lambda x: x * 10, j) for j in range(3)])
            return sum(inner) + i

        return await ctx.parallel("outer", [functools.partial(branch, i) for i in range(3)],
                                  max_concurrency=3)

    async def run():
        return await asyncio.wait_for(lw.arun_workflow(wf, None, world=world), 10)

    assert asyncio.run(run()).output == [30, 31, 32]


def test_parallel_group_syncs_once_before_the_workflow_goes_on(rworld):
    calls = []

    def on_call(name, args, kwargs):
        # A group's children append through submit_event (appends that arrive together
        # share one commit); it is append_event in two halves.
        if name in ("append_event", "submit_event"):
            name = "append_event"
        if name == "sync" or (name == "append_event" and args[1] == "step.succeeded"):
            calls.append((name, args[2]["stepPath"] if name == "append_event" else None,
                          kwargs.get("durable", True)))

    traced = lw.tracing_world(rworld, on_call)

    @lw.workflow(id="group-sync")
    async def wf(ctx, input):
        group = await ctx.parallel("g", [functools.partial(int, i) for i in range(4)])
        after = await ctx.step("after", lambda: 1)
        return sum(group) + after

    assert lw.run_workflow(wf, None, world=traced).output == 7
    children = [c for c in calls if c[1] and c[1].startswith("g/")]
    assert len(children) == 4 and all(durable is False for _, _, durable in children)
    sync_at = calls.index(("sync", None, True))
    assert all(calls.index(c) < sync_at for c in children)  # synced after the children ...
    assert calls[-1] == ("append_event", "after", True)     # ... before the workflow went on
    assert [c[0] for c in calls].count("sync") == 1
