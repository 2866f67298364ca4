"""Every reader resolves spilled values (DESIGN §13, §10 bounded events).

A payload value whose canonical JSON is larger than the inline limit is stored as an
artifact and referenced as `{"$ref": "artifact://…"}`. Whatever reads it back — a resumed
or replayed run, a fork, a worker, `materialize_run_state`, the CLI, the inspector — gets
the value. The interesting sizes are the limit ± a few bytes: a value just under the
limit passes a step's own size check and stays inline, yet its event (the value plus the
envelope's other keys) is over the limit, so the World spills it.
"""

from __future__ import annotations

import hashlib
import json
import threading

import pytest
from click.testing import CliRunner
from conftest import WorldMaker

import little_workflow as lw
from little_workflow.testing import FakeClock

LIMIT = 64 * 1024
T0 = 1_800_000_000.0
#: Canonical-JSON sizes of the values tested (a string of n-2 characters is n bytes).
SIZES = [LIMIT - 24, LIMIT - 8, LIMIT - 1, LIMIT, LIMIT + 1, LIMIT + 8, 70_000]
KINDS = ["local_world", "memory", "local-file"]


@pytest.fixture(params=KINDS)
def maker(request, tmp_path) -> WorldMaker:
    return WorldMaker(request.param, tmp_path, request)


def text_of(size: int, letter: str = "x") -> str:
    """A string whose canonical JSON is `size` bytes."""
    return letter * (size - 2)


def digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def spilled(world, run_id: str, type_: str) -> bool:
    """Whether some event `type_` of the run holds a spilled value (the test is about
    the size where that happens; make sure it does)."""
    return any(e.type == type_ and '"$ref"' in json.dumps(e.payload)
               for e in world.list_events(run_id))


# ---- 1. signal payloads: first execution, resume, replay, fork ---------------------------

def test_a_spilled_event_payload_reads_back_on_every_path(maker):
    clock = FakeClock(start=T0)
    world = maker(clock=clock)
    seen: list[str] = []

    @lw.workflow(id="listen")
    async def listen(ctx, input):
        got = await ctx.wait_for_event("w", "big")
        seen.append(digest(got))
        await ctx.sleep("nap", 60)
        return {"got": digest(got), "type": type(got).__name__}

    for size in SIZES:
        value = {"text": text_of(size - 9)}  # {"text":…} is `size` bytes
        assert len(json.dumps(value, separators=(",", ":"))) == size
        want = {"got": digest(value), "type": "dict"}
        run_id = f"run_sig{size}"
        assert lw.run_workflow(listen, {}, world=world, run_id=run_id, suspend=True).status == "waiting"
        lw.send_event(world, run_id, "big", value)
        assert spilled(world, run_id, "signal.received")
        # first execution: the wait takes the event
        lw.run_workflow(listen, {}, world=world, run_id=run_id, suspend=True)
        assert seen[-1] == want["got"], f"{size}: the first execution got the reference"
        clock.advance(60)
        # resume: the wait is served from the log
        assert lw.run_workflow(listen, {}, world=world, run_id=run_id).output == want, size
        assert lw.replay_run(world, run_id, listen).output == want, size
        # a fork from the sleep copies the wait and the event it took
        fork_id = lw.fork_run(world, run_id, from_step="nap")
        lw.run_workflow(listen, {}, world=world, run_id=fork_id, suspend=True)
        clock.advance(60)
        assert lw.run_workflow(listen, {}, world=world, run_id=fork_id).output == want, size
        assert lw.replay_run(world, fork_id, listen).output == want, size


def test_a_spilled_list_inside_a_payload_reads_back(maker):
    world = maker()

    @lw.workflow(id="nested")
    async def nested(ctx, input):
        got = await ctx.wait_for_event("w", "big")
        return digest(got)

    value = {"rows": [text_of(LIMIT // 2), text_of(LIMIT // 2)], "small": [1, {"a": None}]}
    lw.start_workflow(nested, {}, world=world, run_id="run_nested")
    lw.send_event(world, "run_nested", "big", value)
    assert lw.run_workflow(nested, {}, world=world, run_id="run_nested").output == digest(value)
    assert lw.replay_run(world, "run_nested", nested).output == digest(value)


def test_a_part_spilled_inside_a_spilled_part_reads_back_also_in_a_fork_after_gc(maker):
    """`p` gives up its member `y`, then the payload gives up `p` itself: `p`'s artifact
    holds a reference to `y`'s. A reader follows both; a fork owns copies of both, so
    deleting the source run breaks nothing."""
    clock = FakeClock(start=T0)
    world = maker(clock=clock)

    @lw.workflow(id="deep")
    async def deep(ctx, input):
        got = await ctx.wait_for_event("w", "big")
        await ctx.sleep("nap", 60)
        return digest(got)

    value = {"p": {"x": text_of(40_000, "a"), "y": text_of(40_000, "b")}, "q": text_of(40_000, "c")}
    lw.start_workflow(deep, {}, world=world, run_id="run_deep")
    lw.send_event(world, "run_deep", "big", value)
    stored = next(e for e in world.list_events("run_deep") if e.type == "signal.received")
    outer = world.read_artifact(stored.payload["payload"]["p"]["$ref"])
    assert set(outer["y"]) == {"$ref"}, "the payload no longer nests a spilled part"
    lw.run_workflow(deep, {}, world=world, run_id="run_deep", suspend=True)
    clock.advance(60)
    assert lw.run_workflow(deep, {}, world=world, run_id="run_deep").output == digest(value)
    assert lw.replay_run(world, "run_deep", deep).output == digest(value)
    fork_id = lw.fork_run(world, "run_deep", from_step="nap")
    assert lw.gc(world, older_than=0).run_ids == ["run_deep"]
    lw.run_workflow(deep, {}, world=world, run_id=fork_id, suspend=True)
    clock.advance(60)
    assert lw.run_workflow(deep, {}, world=world, run_id=fork_id).output == digest(value)


def test_the_limit_counts_bytes_of_utf8_not_characters(maker):
    """64 KiB of canonical JSON is bytes: a payload of two-byte characters over the limit
    in bytes, though under it in characters, is spilled too, and reads back."""
    world = maker()

    @lw.workflow(id="accents")
    async def accents(ctx, input):
        return digest(await ctx.wait_for_event("w", "big"))

    for size in SIZES:
        value = "\u00e9" * ((size - 2) // 2)  # é: two bytes in UTF-8
        run_id = f"run_utf{size}"
        lw.start_workflow(accents, {}, world=world, run_id=run_id)
        lw.send_event(world, run_id, "big", value)
        for e in world.list_events(run_id):
            payload = json.dumps(e.payload, ensure_ascii=False, sort_keys=True,
                                 separators=(",", ":")).encode()
            assert len(payload) <= LIMIT, f"{e.type} holds {len(payload)} bytes inline"
        assert lw.run_workflow(accents, {}, world=world, run_id=run_id).output == digest(value)
        assert lw.replay_run(world, run_id, accents).output == digest(value)


def test_a_value_of_many_small_parts_is_spilled_whole(maker):
    """A dict over the limit whose members are each smaller than a reference is stored
    as one artifact, not as thousands of references larger than what they replace."""
    world = maker()

    @lw.workflow(id="wide")
    async def wide(ctx, input):
        return digest(await ctx.wait_for_event("w", "big"))

    value = {f"k{i}": i for i in range(8000)}
    assert len(json.dumps(value, separators=(",", ":"))) > LIMIT
    lw.start_workflow(wide, {}, world=world, run_id="run_wide")
    before = len(world.list_artifacts("run_wide"))
    event = lw.send_event(world, "run_wide", "big", value)
    assert len(json.dumps(event.payload, separators=(",", ":"))) <= LIMIT
    assert len(world.list_artifacts("run_wide")) - before == 1
    assert lw.run_workflow(wide, {}, world=world, run_id="run_wide").output == digest(value)


# ---- 2. inputs, through a worker --------------------------------------------------------

def test_a_worker_runs_a_started_run_with_its_spilled_input(maker):
    world = maker()

    @lw.workflow(id="measure")
    async def measure(ctx, input):
        return {"len": len(input["blob"]), "digest": digest(input)}

    run_ids = {}
    for size in SIZES:
        value = {"blob": text_of(size)}
        run_ids[size] = lw.start_workflow(measure, value, world=world, run_id=f"run_in{size}")
    assert spilled(world, run_ids[LIMIT - 24], "run.created")
    worker = lw.Worker(world, workflows=[measure], concurrency=2)
    thread = threading.Thread(target=worker.run_until_idle, daemon=True)
    thread.start()
    thread.join(30)
    stuck = thread.is_alive()
    worker.close()
    thread.join(10)
    assert not stuck, "the worker never finished the runs (the input read back wrong)"
    for size, run_id in run_ids.items():
        value = {"blob": text_of(size)}
        state = lw.materialize_run_state(world, run_id)
        assert state.status == "completed", (size, state.status)
        assert state.output == {"len": size - 2, "digest": digest(value)}
        assert state.input == value


# ---- 3. step outputs and run outputs just under the step's own check ---------------------

def test_step_and_run_outputs_near_the_limit_read_back_on_resume_and_replay(maker):
    clock = FakeClock(start=T0)
    world = maker(clock=clock)
    calls: list[str] = []

    def produce(size: int) -> str:
        calls.append("produce")
        return text_of(size)

    @lw.workflow(id="outputs")
    async def outputs(ctx, input):
        text = await ctx.step("produce", produce, input["size"])
        await ctx.sleep("nap", 60)
        assert isinstance(text, str), f"the step's output came back as {text!r:.80}"
        return text  # the run's output, as big as the step's

    for size in SIZES:
        run_id = f"run_out{size}"
        first = lw.run_workflow(outputs, {"size": size}, world=world, run_id=run_id, suspend=True)
        assert first.status == "waiting"
        clock.advance(60)
        result = lw.run_workflow(outputs, {"size": size}, world=world, run_id=run_id)
        assert result.output == text_of(size), size
        # the finished run, asked again: its output from run.completed
        again = lw.run_workflow(outputs, {"size": size}, world=maker.reopen(clock=clock), run_id=run_id)
        assert again.output == text_of(size), size
        assert lw.replay_run(world, run_id, outputs).output == text_of(size), size
        state = lw.materialize_run_state(world, run_id)
        assert state.steps["produce"].output == text_of(size) and state.output == text_of(size)
    assert calls == ["produce"] * len(SIZES)
    assert spilled(world, f"run_out{LIMIT - 8}", "step.succeeded")
    assert spilled(world, f"run_out{LIMIT - 8}", "run.completed")


def test_a_bash_step_stdout_near_the_limit_reads_back(maker):
    pytest.importorskip("just_bash")
    clock = FakeClock(start=T0)
    world = maker(clock=clock)
    # {"exitCode":0,"stderr":"","stdout":"…"} around a stdout of n bytes is n + 37 bytes:
    # under the step's own check, over the limit as an event.
    stdout = "y" * (LIMIT - 37 - 40)
    world.memory("org").write_text("big.txt", stdout)

    @lw.workflow(id="catbig")
    async def catbig(ctx, input):
        r = await ctx.bash("cat", "cat /memory/org/big.txt")
        await ctx.sleep("nap", 60)
        out = r.stdout.rstrip("\n")
        return {"len": len(out), "same": out == stdout, "code": r.exit_code}

    lw.run_workflow(catbig, {}, world=world, run_id="run_bash", suspend=True)
    assert spilled(world, "run_bash", "step.succeeded")
    world.memory("org").write_text("big.txt", "changed")  # a re-run would see this
    clock.advance(60)
    want = {"len": len(stdout), "same": True, "code": 0}
    assert lw.run_workflow(catbig, {}, world=world, run_id="run_bash").output == want
    assert lw.replay_run(world, "run_bash", catbig).output == want


def test_a_failed_step_error_message_over_the_limit_reads_back(maker):
    world = maker()
    message = text_of(70_000)

    def explode():
        raise lw.FatalError(message)

    @lw.workflow(id="explode")
    async def explode_wf(ctx, input):
        return await ctx.step("boom", explode)

    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(explode_wf, {}, world=world, run_id="run_err")
    assert spilled(world, "run_err", "step.failed")
    with pytest.raises(lw.WorkflowFailedError) as again:
        lw.run_workflow(explode_wf, {}, world=world, run_id="run_err")
    assert message in json.dumps(again.value.error)
    state = lw.materialize_run_state(world, "run_err")
    assert message in json.dumps(state.error) and message in json.dumps(state.steps["boom"].error)


# ---- 4. recorded values, memory reads, harness calls, sub-runs, outer loops --------------

def test_memory_reads_near_the_limit_read_back_as_first_seen(maker):
    clock = FakeClock(start=T0)
    world = maker(clock=clock)

    @lw.workflow(id="reader")
    async def reader(ctx, input):
        text = ctx.memory.org.read_text("notes.md")
        await ctx.sleep("nap", 60)
        return digest(text)

    for size in SIZES:
        content = text_of(size, "m")
        world.memory("org").write_text("notes.md", content)
        run_id = f"run_mem{size}"
        lw.run_workflow(reader, {"size": size}, world=world, run_id=run_id, suspend=True)
        world.memory("org").write_text("notes.md", "changed since")
        clock.advance(60)
        assert lw.run_workflow(reader, {"size": size}, world=world, run_id=run_id).output \
            == digest(content), size
        assert lw.replay_run(world, run_id, reader).output == digest(content), size
    assert spilled(world, f"run_mem{LIMIT - 8}", "memory.read")


def test_harness_results_near_the_limit_are_served_on_retry_and_replay(maker):
    world = maker()
    calls: list[str] = []
    failures = {"left": 0}

    def agent(size: int) -> dict[str, str]:
        step = lw.current_step()
        tool = step.call_tool("fetch", lambda a: calls.append("tool") or text_of(a["n"]), {"n": size})
        model = step.call_model("llm", lambda r: calls.append("model") or {"t": text_of(r["n"])},
                                {"n": size})
        if failures["left"]:
            failures["left"] -= 1
            raise ConnectionError("flaky after both calls")
        return {"tool": digest(tool), "model": digest(model)}

    @lw.workflow(id="agent")
    async def agent_wf(ctx, input):
        return await ctx.step("agent", agent, input["size"],
                              retry=lw.Retry(max_attempts=2, backoff=0))

    for size in (LIMIT - 8, LIMIT, 70_000):
        calls.clear()
        failures["left"] = 1
        run_id = f"run_agent{size}"
        r = lw.run_workflow(agent_wf, {"size": size}, world=world, run_id=run_id)
        want = {"tool": digest(text_of(size)), "model": digest({"t": text_of(size)})}
        assert r.output == want, size
        assert calls == ["tool", "model"], size  # the retry was served from the log
        assert lw.replay_run(world, run_id, agent_wf).output == want
    assert spilled(world, f"run_agent{LIMIT - 8}", "harness.tool_call.succeeded")


def test_sub_run_results_near_the_limit_read_back(maker):
    world = maker()
    crashes = {"left": 0}

    @lw.workflow(id="big-child")
    async def child(ctx, input):
        return text_of(input["size"])

    async def orchestrator(ctx, input):
        got = await ctx.call_workflow("big-child", {"size": input["size"]})
        if crashes["left"]:
            crashes["left"] -= 1
            raise KeyboardInterrupt  # a crash after the sub-run was recorded
        return digest(got)

    for size in (LIMIT - 8, LIMIT, 70_000):
        crashes["left"] = 1
        run_id = f"run_pipe{size}"
        with pytest.raises(KeyboardInterrupt):
            lw.run_pipeline([child], {"size": size}, orchestrator=orchestrator, world=world,
                            run_id=run_id)
        r = lw.run_pipeline([child], {"size": size}, orchestrator=orchestrator, world=world,
                            run_id=run_id)
        assert r.output == digest(text_of(size)), size


def test_outer_loop_cycle_outputs_near_the_limit_read_back(maker):
    world = maker()
    crashes = {"left": 1}

    @lw.workflow(id="grow-big")
    async def grow(ctx, input):
        return text_of(LIMIT - 8)

    def supervise(cycle, history):
        if crashes["left"]:
            crashes["left"] -= 1
            raise KeyboardInterrupt  # a crash after the cycle's run completed
        return lw.Done(digest(cycle["output"]))

    with pytest.raises(KeyboardInterrupt):
        lw.run_workflow(grow, {}, world=world, max_outer_cycles=2, supervise=supervise,
                        outer_loop_id="big")
    r = lw.run_workflow(grow, {}, world=world, max_outer_cycles=2, supervise=supervise,
                        outer_loop_id="big")
    assert r.output == digest(text_of(LIMIT - 8))
    assert r.cycles[0]["output"] == text_of(LIMIT - 8)


def test_recorded_values_read_back_through_the_same_path(maker):
    clock = FakeClock(start=T0)
    world = maker(clock=clock)

    @lw.workflow(id="stamps")
    async def stamps(ctx, input):
        first = (ctx.now().isoformat(), str(ctx.uuid()))
        await ctx.sleep("nap", 60)
        return list(first)

    r1 = lw.run_workflow(stamps, {}, world=world, run_id="run_stamps", suspend=True)
    assert r1.status == "waiting"
    clock.advance(60)
    out = lw.run_workflow(stamps, {}, world=world, run_id="run_stamps").output
    assert lw.replay_run(world, "run_stamps", stamps).output == out


# ---- CLI and inspector -------------------------------------------------------------------

@pytest.fixture(params=["local_world", "local-file"])
def disk_maker(request, tmp_path) -> WorldMaker:
    return WorldMaker(request.param, tmp_path, request)


def world_args(maker: WorldMaker) -> list[str]:
    if maker.kind == "local_world":
        return ["--data-dir", maker.data_dir]
    return ["--world", f"file://{maker.data_dir}"]


def test_cli_replay_and_inspector_show_the_values(disk_maker):
    from little_workflow.cli import cli
    from little_workflow.ops.inspect import run_page_data

    world = disk_maker()
    big_in = text_of(LIMIT - 8, "i")
    big_out = text_of(LIMIT - 8, "o")

    @lw.workflow(id="shown")
    async def shown(ctx, input):
        await ctx.step("produce", lambda: big_out)
        return big_out

    lw.run_workflow(shown, {"blob": big_in}, world=world, run_id="run_shown")
    assert spilled(world, "run_shown", "run.created") and spilled(world, "run_shown", "run.completed")
    runner = CliRunner()
    res = runner.invoke(cli, ["replay", "run_shown", "--json", *world_args(disk_maker)])
    assert res.exit_code == 0, res.output
    state = json.loads(res.output)
    assert state["input"] == {"blob": big_in}
    assert state["output"] == big_out and state["steps"]["produce"]["output"] == big_out
    res = runner.invoke(cli, ["replay", "run_shown", *world_args(disk_maker)])
    assert res.exit_code == 0 and "$ref" not in res.output and "oooo" in res.output
    data = run_page_data(world, "run_shown")
    assert data["input"] == {"blob": big_in} and data["output"] == big_out
    page = disk_maker.tmp_path / "run_shown.html"
    res = runner.invoke(cli, ["inspect", "run_shown", "--html", str(page), *world_args(disk_maker)])
    assert res.exit_code == 0, res.output
    html = page.read_text("utf-8")
    assert big_in in html and big_out in html
    # The event table shows the log as stored: a spilled value as its reference.
    res = runner.invoke(cli, ["events", "run_shown", "--json", *world_args(disk_maker)])
    assert res.exit_code == 0
    created = json.loads(res.output)[0]
    assert created["payload"]["input"]["blob"]["$ref"].startswith("artifact://")


def test_cli_events_prints_a_long_failure_message_in_full(disk_maker):
    from little_workflow.cli import cli

    world = disk_maker()
    message = "boom " + text_of(70_000, "e")

    @lw.workflow(id="fails-long")
    async def fails_long(ctx, input):
        raise ValueError(message)

    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(fails_long, {}, world=world, run_id="run_long_err")
    assert spilled(world, "run_long_err", "run.failed")
    res = CliRunner().invoke(cli, ["events", "run_long_err", *world_args(disk_maker)])
    assert res.exit_code == 0, res.output
    assert f"run failed: ValueError: {message}" in res.output


def test_the_inspector_shows_a_spilled_attempt_error_as_text(disk_maker):
    from little_workflow.ops.inspect import PAYLOAD_TEXT_LIMIT, run_page_data

    world = disk_maker()
    message = "flaky " + text_of(70_000, "f")
    failures = {"left": 1}

    def flaky():
        if failures["left"]:
            failures["left"] -= 1
            raise ConnectionError(message)
        return "ok"

    @lw.workflow(id="flaky-long")
    async def flaky_long(ctx, input):
        return await ctx.step("call", flaky, retry=lw.Retry(max_attempts=2, backoff=0))

    assert lw.run_workflow(flaky_long, {}, world=world, run_id="run_flaky").output == "ok"
    assert spilled(world, "run_flaky", "step.failed")
    spans = run_page_data(world, "run_flaky")["steps"][0]["spans"]
    error = spans[0]["error"]
    assert error["type"] == "ConnectionError" and isinstance(error["message"], str)
    assert error["message"].startswith("flaky fff")
    assert len(error["message"]) <= PAYLOAD_TEXT_LIMIT + 40  # bounded, as event rows are
