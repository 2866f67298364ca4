"""An agent's stream events inside a durable run (ext/pydantic_ai_streams.py): streamed
requests deliver the model's deltas there as outside a run, and
`LittleWorkflowDurability(stream=KEY)` sends the events out through the run's durable
stream. The first three are the peer scenarios (pydantic-ai's durable-exec suite: run_stream,
an event_stream_handler, run_stream_events inside a workflow) that deliver whole parts
instead of deltas under DBOS, and did here before this module."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from checkout import SRC

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    FunctionToolCallEvent,
    FunctionToolResultEvent,
    ModelResponse,
    PartDeltaEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel  # noqa: E402
from pydantic_ai.run import AgentRunResultEvent  # noqa: E402

import little_workflow as lw  # noqa: E402
from little_workflow.ext.pydantic_ai import (  # noqa: E402
    LittleWorkflowDurability,
    aagent_events,
    agent_events,
)

CHUNKS = ["sunny", " in", " Paris", " and", " Oslo"]


class Calls:
    def __init__(self) -> None:
        self.model = 0
        self.tools: list[str] = []
        self.after_first_chunk: Any = None  # awaited while the answer is half streamed


def chunky_agent(calls: Calls, name: str, **capability: Any) -> Agent:
    """Asks for the weather of two cities, then answers in five text deltas."""

    def answered(messages: list) -> bool:
        return any(isinstance(p, ToolReturnPart) for m in messages for p in m.parts)

    def model_fn(messages: list, info: AgentInfo) -> ModelResponse:
        calls.model += 1
        if answered(messages):
            return ModelResponse(parts=[TextPart("".join(CHUNKS))])
        return ModelResponse(parts=[ToolCallPart("weather", {"city": "Paris"}, tool_call_id="c1"),
                                    ToolCallPart("weather", {"city": "Oslo"}, tool_call_id="c2")])

    async def stream_fn(messages: list, info: AgentInfo) -> Any:
        calls.model += 1
        if answered(messages):
            for i, chunk in enumerate(CHUNKS):
                yield chunk
                if i == 0 and calls.after_first_chunk is not None:
                    await calls.after_first_chunk()
            return
        for i, city in enumerate(["Paris", "Oslo"]):
            yield {i: DeltaToolCall(name="weather", json_args=json.dumps({"city": city}),
                                    tool_call_id=f"c{i + 1}")}

    agent = Agent(FunctionModel(model_fn, stream_function=stream_fn), name=name,
                  capabilities=[LittleWorkflowDurability(**capability)])

    @agent.tool_plain
    def weather(city: str) -> str:
        calls.tools.append(city)
        return f"sunny in {city}"

    return agent


def text_deltas(events: list[Any]) -> list[str]:
    return [e.delta.content_delta for e in events
            if isinstance(e, PartDeltaEvent) and isinstance(e.delta, TextPartDelta)]


def test_run_stream_text_deltas_inside_a_durable_run_are_those_outside(lw_world: Any) -> None:
    calls = Calls()
    agent = chunky_agent(calls, "deltas")

    async def deltas(q: str) -> list[str]:
        async with agent.run_stream(q) as run:
            return [d async for d in run.stream_text(delta=True, debounce_by=None)]

    outside = asyncio.run(deltas("weather?"))

    @lw.workflow(id="deltas")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        return {"deltas": await deltas(input["q"])}

    res = lw.run_workflow(wf, {"q": "weather?"}, world=lw_world, run_id="run_sd1")
    assert outside[0] != "".join(CHUNKS) and "".join(outside) == "".join(CHUNKS)
    assert res.output == {"deltas": outside}
    before = calls.model
    # Replayed from the log: the same deltas, and no model call.
    assert lw.replay_run(lw_world, "run_sd1", wf).output == res.output
    assert lw.run_workflow(wf, {"q": "weather?"}, world=lw_world, run_id="run_sd1").output == res.output
    assert calls.model == before


def test_an_event_stream_handler_inside_a_durable_run_sees_the_deltas(lw_world: Any) -> None:
    calls = Calls()
    seen: list[Any] = []

    async def handler(ctx: Any, events: Any) -> None:
        async for event in events:
            seen.append(event)

    agent = chunky_agent(calls, "handled", event_stream_handler=handler)

    asyncio.run(agent.run("weather?"))
    outside = [type(e).__name__ for e in seen]
    outside_text = text_deltas(seen)
    seen.clear()

    @lw.workflow(id="handled")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        return {"output": (await agent.run(input["q"])).output}

    res = lw.run_workflow(wf, {"q": "weather?"}, world=lw_world, run_id="run_sh1")
    assert res.output == {"output": "".join(CHUNKS)}
    assert len(outside_text) == len(CHUNKS) - 1 and "".join(outside_text) in "".join(CHUNKS)
    assert text_deltas(seen) == outside_text
    assert [type(e).__name__ for e in seen] == outside


def test_run_stream_events_inside_a_durable_run_are_those_outside(lw_world: Any) -> None:
    calls = Calls()
    agent = chunky_agent(calls, "eventer")

    async def events(q: str) -> list[Any]:
        async with agent.run_stream_events(q) as stream:
            return [e async for e in stream]

    outside = asyncio.run(events("weather?"))

    @lw.workflow(id="eventer")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        got = await events(input["q"])
        return {"kinds": [type(e).__name__ for e in got], "text": text_deltas(got)}

    res = lw.run_workflow(wf, {"q": "weather?"}, world=lw_world, run_id="run_se1")
    assert res.output == {"kinds": [type(e).__name__ for e in outside],
                          "text": text_deltas(outside)}
    assert len(res.output["text"]) == len(CHUNKS) - 1
    assert lw.replay_run(lw_world, "run_se1", wf).output == res.output


def test_the_agent_events_go_out_through_a_run_stream_as_they_happen(lw_world: Any) -> None:
    calls = Calls()
    agent = chunky_agent(calls, "router", stream="agent")
    read: list[Any] = []
    started: list[bool] = []
    first_text = threading.Event()

    def follow() -> None:
        for event in agent_events(lw_world, "run_sr1", "agent"):
            read.append(event)
            if type(event).__name__ == "PartStartEvent" and isinstance(event.part, TextPart):
                first_text.set()

    async def reader_saw_the_first_chunk() -> None:
        # The model goes on only once the reader got its first chunk: proof that events
        # leave the run while the model request (its step) is still streaming.
        assert await asyncio.to_thread(first_text.wait, 30)

    calls.after_first_chunk = reader_saw_the_first_chunk
    reading = threading.Thread(target=follow, daemon=True)

    @lw.workflow(id="router")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        if not started:  # the run exists now: a follower from another thread
            started.append(True)
            reading.start()
        return {"output": (await agent.run(input["q"])).output}

    res = lw.run_workflow(wf, {"q": "weather?"}, world=lw_world, run_id="run_sr1")
    reading.join(30)
    assert not reading.is_alive()  # ended with the run
    assert res.output == {"output": "".join(CHUNKS)}
    assert "".join(text_deltas(read)) in "".join(CHUNKS) and len(text_deltas(read)) == len(CHUNKS) - 1
    calls_made = [e.part.args_as_dict()["city"] for e in read if isinstance(e, FunctionToolCallEvent)]
    results = [e.part.content for e in read if isinstance(e, FunctionToolResultEvent)]
    assert sorted(calls_made) == ["Oslo", "Paris"]
    assert sorted(results) == ["sunny in Oslo", "sunny in Paris"]
    assert isinstance(read[-1], AgentRunResultEvent) and read[-1].result.output == "".join(CHUNKS)
    # Everything written from workflow code is written once: running the finished run's
    # body again (a replay) or asking for it again appends nothing.
    written = [e for e in lw_world.list_events("run_sr1") if e.type == "stream.written"]
    assert lw.replay_run(lw_world, "run_sr1", wf).output == res.output
    assert [e for e in lw_world.list_events("run_sr1") if e.type == "stream.written"] == written
    assert list(agent_events(lw_world, "run_sr1", "agent", follow=False)) == read


def test_without_a_stream_key_nothing_is_written(lw_world: Any) -> None:
    agent = chunky_agent(Calls(), "quiet")

    @lw.workflow(id="quiet")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        return {"output": (await agent.run(input["q"])).output}

    lw.run_workflow(wf, {"q": "weather?"}, world=lw_world, run_id="run_q1")
    assert not [e for e in lw_world.list_events("run_q1") if e.type.startswith("stream.")]


def test_aagent_events_reads_the_same_events_in_async_code(lw_world: Any) -> None:
    agent = chunky_agent(Calls(), "async_reader", stream="agent")

    @lw.workflow(id="async-reader")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        return {"output": (await agent.run(input["q"])).output}

    lw.run_workflow(wf, {"q": "weather?"}, world=lw_world, run_id="run_sa1")

    async def read() -> list[Any]:
        return [e async for e in aagent_events(lw_world, "run_sa1", "agent")]

    got = asyncio.run(read())
    assert got == list(agent_events(lw_world, "run_sa1", "agent"))
    assert isinstance(got[-1], AgentRunResultEvent) and len(text_deltas(got)) == len(CHUNKS) - 1


def test_a_resumed_agent_run_writes_its_workflow_side_events_once(lw_world: Any) -> None:
    """The run stops (suspend) waiting after the agent ran once; resumed, the agent's
    steps come from the log: no model call, and no event written again."""
    calls = Calls()
    agent = chunky_agent(calls, "resumer", stream="agent")

    @lw.workflow(id="resumer")
    async def wf(ctx: lw.RunContext, input: dict) -> dict:
        first = (await agent.run(input["q"])).output
        more = await ctx.wait_for_event("more", "more")
        return {"output": first, "more": more}

    waiting = lw.run_workflow(wf, {"q": "weather?"}, world=lw_world, run_id="run_rs1",
                              suspend=True)
    assert waiting.status == "waiting"
    before = list(agent_events(lw_world, "run_rs1", "agent", follow=False))
    model_calls = calls.model
    lw.send_event(lw_world, "run_rs1", "more", "yes")
    done = lw.run_workflow(wf, {"q": "weather?"}, world=lw_world, run_id="run_rs1")
    assert done.output == {"output": "".join(CHUNKS), "more": "yes"}
    assert calls.model == model_calls
    assert list(agent_events(lw_world, "run_rs1", "agent")) == before


def test_a_reader_follows_an_agent_while_its_process_is_killed_and_resumed(tmp_path: Any) -> None:
    """SIGKILL while the model streams the answer: the reader saw its first chunk. Resumed,
    the answer's request runs again (its events come again: at least once, from a fresh
    PartStartEvent); the first request, the tool calls and their results, written before
    the kill, come once; the run's result once, last."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from pydantic_ai.messages import PartStartEvent

    tests = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, tests)
    from pydantic_ai_stream_child import CHUNKS as ANSWER
    from pydantic_ai_stream_child import gated

    data, gate = str(tmp_path / "data"), str(tmp_path / "gate")
    with lw.local_world(data) as world:
        lw.start_workflow(gated, {"q": "weather?"}, world=world, run_id="run_ak1")
    read: list[Any] = []

    def follow() -> None:
        with lw.local_world(data) as world:
            read.extend(agent_events(world, "run_ak1", "agent"))

    def text_starts() -> int:
        return sum(1 for e in list(read)
                   if isinstance(e, PartStartEvent) and isinstance(e.part, TextPart))

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, tests])}
    args = [sys.executable, os.path.join(tests, "pydantic_ai_stream_child.py"), data, "run_ak1",
            gate]
    first = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        deadline = time.monotonic() + 120
        while text_starts() == 0 and time.monotonic() < deadline and first.poll() is None:
            time.sleep(0.02)
        assert text_starts() == 1, (read, first.poll())
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    assert first.returncode == -signal.SIGKILL
    assert reader.is_alive()  # the run is unfinished: its stream stays open
    open(gate, "w").close()
    second = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == {"output": "".join(ANSWER)}
    reader.join(60)
    assert not reader.is_alive()
    assert text_starts() == 2
    assert sum(isinstance(e, FunctionToolCallEvent) for e in read) == 2
    assert sum(isinstance(e, FunctionToolResultEvent) for e in read) == 2
    assert sum(isinstance(e, AgentRunResultEvent) for e in read) == 1
    assert isinstance(read[-1], AgentRunResultEvent)
    last_start = max(i for i, e in enumerate(read)
                     if isinstance(e, PartStartEvent) and isinstance(e.part, TextPart))
    answer = read[last_start].part.content + "".join(text_deltas(read[last_start:]))
    assert answer == "".join(ANSWER)
