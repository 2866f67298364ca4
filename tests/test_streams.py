"""Durable streams (DESIGN §18): `ctx.write_stream` / `ctx.close_stream` from workflow code
(exactly once across resume), `lw.current_step().write_stream` from a step (at least
once), `lw.read_stream` / `lw.aread_stream` from any process on every World."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from typing import Any

import pytest
from checkout import SRC

import little_workflow as lw
from little_workflow.runtime import followers

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
sys.path.insert(0, TESTS)

from watch_flows import tokens  # noqa: E402


def stream_events(world: Any, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    return [(e.type, {k: v for k, v in e.payload.items() if k != "incarnation"})
            for e in world.list_events(run_id) if e.type.startswith("stream.")]


@lw.workflow(id="chatter", version="1")
async def chatter(ctx: lw.RunContext, input: dict[str, Any]) -> str:
    await ctx.write_stream("tokens", "The")
    await ctx.write_stream("status", {"phase": "thinking"})
    word = await ctx.step("think", lambda: "capital")
    await ctx.write_stream("tokens", word)
    decision = await ctx.wait_for_event("more", "more")
    await ctx.write_stream("tokens", decision)
    await ctx.close_stream("tokens")
    return f"The {word} {decision}"


def test_workflow_writes_are_recorded_with_their_position_and_read_in_order(memory_world: Any) -> None:
    lw.start_workflow(chatter, {}, world=memory_world, run_id="run_c1")
    lw.send_event(memory_world, "run_c1", "more", "city")
    assert lw.run_workflow(chatter, {}, world=memory_world, run_id="run_c1").output == "The capital city"
    assert stream_events(memory_world, "run_c1") == [
        ("stream.written", {"key": "tokens", "value": "The", "position": 0}),
        ("stream.written", {"key": "status", "value": {"phase": "thinking"}, "position": 1}),
        ("stream.written", {"key": "tokens", "value": "capital", "position": 2}),
        ("stream.written", {"key": "tokens", "value": "city", "position": 3}),
        ("stream.closed", {"key": "tokens"}),
    ]
    assert list(lw.read_stream(memory_world, "run_c1", "tokens")) == ["The", "capital", "city"]
    assert list(lw.read_stream(memory_world, "run_c1", "tokens", after=1)) == ["capital", "city"]
    assert list(lw.read_stream(memory_world, "run_c1", "status")) == [{"phase": "thinking"}]
    assert list(lw.read_stream(memory_world, "run_c1", "nothing-here")) == []

    async def read_async() -> list[Any]:
        return [v async for v in lw.aread_stream(memory_world, "run_c1", "tokens", after=2)]

    assert asyncio.run(read_async()) == ["city"]


def test_a_resumed_run_does_not_write_again_what_it_wrote(memory_world: Any) -> None:
    r = lw.run_workflow(chatter, {}, world=memory_world, run_id="run_c2", suspend=True)
    assert r.status == "waiting"
    written = stream_events(memory_world, "run_c2")
    assert [p["value"] for _, p in written] == ["The", {"phase": "thinking"}, "capital"]
    # The run waits: its streams stay open, and a resume (twice) writes nothing again.
    assert lw.run_workflow(chatter, {}, world=memory_world, run_id="run_c2",
                           suspend=True).status == "waiting"
    assert stream_events(memory_world, "run_c2") == written
    lw.send_event(memory_world, "run_c2", "more", "town")
    lw.run_workflow(chatter, {}, world=memory_world, run_id="run_c2")
    assert list(lw.read_stream(memory_world, "run_c2", "tokens")) == ["The", "capital", "town"]
    # Replay serves the writes from the log and appends nothing.
    before = len(memory_world.list_events("run_c2"))
    assert lw.replay_run(memory_world, "run_c2", chatter).output == "The capital town"
    assert len(memory_world.list_events("run_c2")) == before


def test_code_that_writes_other_streams_than_its_log_is_a_divergence(memory_world: Any) -> None:
    lw.run_workflow(chatter, {}, world=memory_world, run_id="run_c3", suspend=True)

    @lw.workflow(id="chatter", version="1")
    async def renamed(ctx: lw.RunContext, input: dict[str, Any]) -> str:
        await ctx.write_stream("words", "The")  # the log's write 0 went to "tokens"
        return "x"

    with pytest.raises(lw.ReplayDivergenceError, match="tokens"):
        lw.run_workflow(renamed, {}, world=memory_world, run_id="run_c3", suspend=True)

    @lw.workflow(id="chatter", version="1")
    async def skips(ctx: lw.RunContext, input: dict[str, Any]) -> str:
        await ctx.step("think", lambda: "capital")  # the log wrote two values before it
        return "x"

    with pytest.raises(lw.ReplayDivergenceError, match="stream"):
        lw.run_workflow(skips, {}, world=memory_world, run_id="run_c3", suspend=True)
    assert lw.get_run(memory_world, "run_c3").status() == "waiting"  # still resumable


def test_writes_from_a_step_are_at_least_once(memory_world: Any) -> None:
    attempts: list[int] = []

    def flaky_speaker() -> str:
        step = lw.current_step()
        step.write_stream("log", f"attempt {step.attempt} starts")
        attempts.append(step.attempt)
        if step.attempt < 2:
            raise ConnectionError("dropped")
        return "spoken"

    async def async_speaker() -> str:
        await lw.current_step().awrite_stream("log", {"async": True})
        lw.current_step().write_stream("log", "sync from async")
        return "done"

    @lw.workflow(id="speaker")
    async def speaker(ctx: lw.RunContext, input: None) -> list[str]:
        a = await ctx.step("speak", flaky_speaker, retry=lw.Retry(max_attempts=3, backoff=0))
        b = await ctx.step("speak-async", async_speaker)
        return [a, b]

    assert lw.run_workflow(speaker, None, world=memory_world, run_id="run_s1").output == \
        ["spoken", "done"]
    assert attempts == [1, 2]
    assert list(lw.read_stream(memory_world, "run_s1", "log")) == [
        "attempt 1 starts", "attempt 2 starts", {"async": True}, "sync from async"]
    first = stream_events(memory_world, "run_s1")[0]
    assert first == ("stream.written", {"key": "log", "value": "attempt 1 starts",
                                        "stepPath": "speak", "attempt": 1})
    # Served from the log on replay: the step functions are not called, nothing is written.
    assert lw.replay_run(memory_world, "run_s1", speaker).output == ["spoken", "done"]
    assert len(list(lw.read_stream(memory_world, "run_s1", "log"))) == 4


def test_writing_after_close_is_a_step_error(memory_world: Any) -> None:
    @lw.workflow(id="late-writer")
    async def late_writer(ctx: lw.RunContext, input: None) -> None:
        await ctx.write_stream("out", 1)
        await ctx.close_stream("out")
        await ctx.close_stream("out")  # closing again changes nothing
        await ctx.write_stream("out", 2)

    with pytest.raises(lw.WorkflowFailedError, match="closed") as e:
        lw.run_workflow(late_writer, None, world=memory_world, run_id="run_late")
    assert isinstance(e.value.cause, lw.StepError) and "'out'" in str(e.value.cause)
    assert list(lw.read_stream(memory_world, "run_late", "out")) == [1]

    def writes_to_a_closed_stream() -> None:
        lw.current_step().write_stream("out", "late")

    @lw.workflow(id="late-step")
    async def late_step(ctx: lw.RunContext, input: None) -> None:
        await ctx.close_stream("out")
        await ctx.step("late", writes_to_a_closed_stream, retry=lw.Retry(max_attempts=3, backoff=0))

    with pytest.raises(lw.WorkflowFailedError, match="closed"):
        lw.run_workflow(late_step, None, world=memory_world, run_id="run_late2")
    state = lw.materialize_run_state(memory_world, "run_late2")
    assert state.steps["late"].attempts == 1  # a StepError is not retried


def test_bad_keys_and_values_are_step_errors_naming_the_stream(memory_world: Any) -> None:
    @lw.workflow(id="bad-stream")
    async def bad(ctx: lw.RunContext, input: str) -> None:
        if input == "key":
            await ctx.write_stream("", 1)
        await ctx.write_stream("objects", object())

    with pytest.raises(lw.WorkflowFailedError, match="stream key"):
        lw.run_workflow(bad, "key", world=memory_world)
    with pytest.raises(lw.WorkflowFailedError, match="'objects'.*JSON"):
        lw.run_workflow(bad, "value", world=memory_world)
    with pytest.raises(lw.RunNotFoundError, match="run_nobody"):
        lw.read_stream(memory_world, "run_nobody", "tokens")
    with pytest.raises(ValueError, match="after"):
        lw.read_stream(memory_world, "run_nobody", "tokens", after=-1)

    async def read_unknown() -> None:
        async for _ in lw.aread_stream(memory_world, "run_nobody", "tokens"):
            pass

    with pytest.raises(lw.RunNotFoundError):
        asyncio.run(read_unknown())


def test_a_follower_ends_when_the_run_ends_without_closing(memory_world: Any) -> None:
    @lw.workflow(id="ender")
    async def ender(ctx: lw.RunContext, input: str) -> None:
        await ctx.write_stream("s", "a")
        await ctx.wait_for_event("w", "go")
        if input == "fail":
            raise RuntimeError("stop")

    for run_id, how in (("run_e1", "complete"), ("run_e2", "fail"), ("run_e3", "cancel")):
        lw.run_workflow(ender, how, world=memory_world, run_id=run_id, suspend=True)
        got: list[Any] = []
        reader = threading.Thread(
            target=lambda r=run_id: got.extend(lw.read_stream(memory_world, r, "s")), daemon=True)
        reader.start()
        reader.join(0.3)
        assert reader.is_alive()  # the run waits: its stream stays open
        if how == "cancel":
            lw.cancel_run(memory_world, run_id)
        elif how == "fail":
            lw.send_event(memory_world, run_id, "go")
            with pytest.raises(lw.WorkflowFailedError):
                lw.run_workflow(ender, how, world=memory_world, run_id=run_id)
        else:
            lw.send_event(memory_world, run_id, "go")
            lw.run_workflow(ender, how, world=memory_world, run_id=run_id)
        reader.join(30)
        assert not reader.is_alive() and got == ["a"], how


@pytest.mark.parametrize("make_world", ["memory", "local_world", "local-file", "s3"],
                         indirect=True)
def test_a_follower_gets_each_value_as_it_is_written(make_world: Any) -> None:
    world = make_world()
    step_gate = threading.Event()

    def wait_for_the_reader() -> str:
        assert step_gate.wait(30)
        return "ok"

    @lw.workflow(id="paced")
    async def paced(ctx: lw.RunContext, input: int) -> int:
        for i in range(input):
            await ctx.write_stream("n", i)
            await ctx.step(f"pace/{i}", wait_for_the_reader)
            step_gate.clear()
        await ctx.close_stream("n")
        return input

    lw.start_workflow(paced, 4, world=world, run_id="run_paced")
    got: list[int] = []

    def follow() -> None:
        for value in lw.read_stream(make_world.reopen(), "run_paced", "n"):  # a World of its own
            got.append(value)
            step_gate.set()  # the run goes on only once the reader has this value

    # A stream not written yet is empty, and the follower waits for it.
    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    assert lw.run_workflow(paced, 4, world=world, run_id="run_paced").output == 4
    reader.join(60)
    assert not reader.is_alive() and got == [0, 1, 2, 3]


def test_an_append_in_this_process_wakes_a_follower_at_once(memory_world: Any,
                                                            monkeypatch: Any) -> None:
    monkeypatch.setattr(followers, "POLL_SECONDS", 3600.0)  # only a wake-up can end the waits
    lw.run_workflow(chatter, {}, world=memory_world, run_id="run_c5", suspend=True)
    got: dict[str, list[Any]] = {"sync": [], "async": []}

    async def follow_async() -> None:
        async for v in lw.aread_stream(memory_world, "run_c5", "tokens"):
            got["async"].append(v)

    readers = [threading.Thread(target=lambda: got["sync"].extend(
                   lw.read_stream(memory_world, "run_c5", "tokens")), daemon=True),
               threading.Thread(target=asyncio.run, args=(follow_async(),), daemon=True)]
    for t in readers:
        t.start()
    time.sleep(0.2)
    lw.send_event(memory_world, "run_c5", "more", "city")
    lw.run_workflow(chatter, {}, world=memory_world, run_id="run_c5")
    for t in readers:
        t.join(30)
        assert not t.is_alive(), "a follower was not woken by this process's appends"
    assert got == {"sync": ["The", "capital", "city"], "async": ["The", "capital", "city"]}


def test_a_fork_keeps_the_writes_before_its_cut(memory_world: Any) -> None:
    lw.run_workflow(chatter, {}, world=memory_world, run_id="run_c6", suspend=True)
    lw.send_event(memory_world, "run_c6", "more", "city")  # after the cut: not copied
    lw.run_workflow(chatter, {}, world=memory_world, run_id="run_c6")
    fork = lw.fork_run(memory_world, "run_c6", from_step="more", new_run_id="run_c6f")
    lw.send_event(memory_world, fork, "more", "village")
    assert lw.run_workflow(chatter, {}, world=memory_world, run_id=fork).output == \
        "The capital village"
    assert list(lw.read_stream(memory_world, fork, "tokens")) == ["The", "capital", "village"]
    assert list(lw.read_stream(memory_world, "run_c6", "tokens")) == ["The", "capital", "city"]


# ---- across processes: the writer is SIGKILLed mid-run and resumed ----------------------

def _child_spec(make_world: Any) -> tuple[str, dict[str, str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, TESTS, os.environ.get("PYTHONPATH", "")])}
    if make_world.kind == "local_world":
        return "local:" + make_world.data_dir, env
    if make_world.kind == "local-file":
        return "file://" + make_world.data_dir, env
    s3 = make_world.request.getfixturevalue("moto_s3")
    env.update({"FSSPEC_S3_ENDPOINT_URL": s3.endpoint, "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                # The killed writer's lease lapses soon, so the second one may take the run.
                "LW_LEASE_SECONDS": "2"})
    return f"s3://{make_world.data_dir}", env


@pytest.mark.parametrize("make_world", ["local_world", "local-file", "s3"], indirect=True)
def test_a_reader_follows_a_stream_while_the_writer_is_killed_and_resumed(make_world: Any,
                                                                           tmp_path: Any) -> None:
    import json
    import signal
    import subprocess

    n, hold = 8, 4
    gate, ledger = str(tmp_path / "gate"), str(tmp_path / "ledger")
    spec, env = _child_spec(make_world)
    run_input = {"n": n, "hold": hold, "gate": gate, "ledger": ledger}
    world = make_world()
    lw.start_workflow(tokens, run_input, world=world, run_id="run_tokens")
    got: list[Any] = []

    def follow() -> None:
        for value in lw.read_stream(make_world.reopen(), "run_tokens", "tokens"):
            got.append(value)

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    args = [sys.executable, os.path.join(TESTS, "stream_writer_child.py"), spec, "run_tokens",
            json.dumps(run_input)]
    first = subprocess.Popen(args, env=env, cwd=TESTS, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while len(got) < hold + 1 and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.02)
        # Token `hold` is written and its step blocks on the gate: kill the writer there.
        if len(got) != hold + 1 and first.poll() is not None:
            raise AssertionError(f"the writer exited ({first.returncode}) after {got}:\n"
                                 f"{first.stderr.read() if first.stderr else ''}")
        assert len(got) == hold + 1, (got, first.poll())
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    assert first.returncode == -signal.SIGKILL
    assert reader.is_alive()  # the run is unfinished: its stream stays open
    with open(gate, "w"):
        pass
    second = subprocess.run(args, env=env, cwd=TESTS, capture_output=True, text=True, timeout=180)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == {"written": n}
    reader.join(60)
    assert not reader.is_alive()
    # Every value once, in order, across the kill and the resume.
    assert got == [{"i": i, "text": f"token-{i}"} for i in range(n)]
    written = [e for e in make_world.reopen().list_events("run_tokens") if e.type == "stream.written"]
    assert [e.payload["position"] for e in written] == list(range(n))
    with open(ledger, encoding="utf-8") as f:  # no completed step ran twice
        assert f.read().split() == [f"work/{i}" for i in range(n) if i != hold]


def test_the_inspector_and_little_events_name_each_stream_record(memory_world: Any,
                                                                 tmp_path: Any) -> None:
    from little_workflow.ops.inspect import run_page_data

    def speaker() -> str:
        lw.current_step().write_stream("log", "from the step")
        return "ok"

    @lw.workflow(id="labelled")
    async def labelled(ctx: lw.RunContext, input: None) -> str:
        await ctx.write_stream("tokens", "hi")
        await ctx.step("speak", speaker)
        await ctx.close_stream("tokens")
        return "done"

    lw.run_workflow(labelled, None, world=memory_world, run_id="run_lb1")
    rows = run_page_data(memory_world, "run_lb1")["events"]
    labels = [(row[1], row[3]) for row in rows if row[1].startswith("stream.")]
    # Workflow-code records carry no step path: labelled by their stream; a step's write by
    # its step.
    assert labels == [("stream.written", "stream/tokens"), ("stream.written", "speak"),
                      ("stream.closed", "stream/tokens")]
    from click.testing import CliRunner

    from little_workflow.cli import cli

    with lw.local_world(str(tmp_path / "data")) as w:
        lw.run_workflow(labelled, None, world=w, run_id="run_lb2")
        shown = CliRunner().invoke(cli, ["events", "run_lb2", "--data-dir", w.data_dir],
                                   terminal_width=200)
    assert shown.exit_code == 0, shown.output
    lines = [line for line in shown.output.splitlines() if "stream." in line]
    assert ["stream/tokens" in lines[0], "speak" in lines[1], "stream/tokens" in lines[2]] \
        == [True, True, True], shown.output
