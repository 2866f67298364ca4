"""OpenTelemetry (DESIGN §18): spans and metrics checked with the SDK's in-memory
exporter and metric reader — by name, parent and attribute; a run SIGKILLed mid-run and
resumed in another process; a sub-run's span under the span that started it in a killed
process; the link from a waiting run to the sender of its event; and the library with
opentelemetry absent, or present with no provider set."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import little_workflow as lw

TESTS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TESTS)
import otel_flows  # noqa: E402

EXPORTER = InMemorySpanExporter()
READER = InMemoryMetricReader()

# One worker runs this file, in one stretch, under xdist (`--dist loadgroup`): the global
# providers below are set once per process, and READER can join only one MeterProvider.
pytestmark = pytest.mark.xdist_group("otel")


def unset_global_providers() -> None:
    """What OpenTelemetry's own test utilities do between tests (the API sets each global
    provider once per process): later tests in this pytest process — the README's — set
    their own."""
    import opentelemetry.metrics._internal as metrics_internal
    from opentelemetry.util._once import Once

    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]
    metrics_internal._METER_PROVIDER_SET_ONCE = Once()
    metrics_internal._METER_PROVIDER = None


@pytest.fixture(scope="module", autouse=True)
def global_providers() -> Any:
    """The SDK's providers with the in-memory exporter and reader, set globally for this
    module's tests and unset after them. A provider another test set first (the README's
    tracer provider) gets the exporter added instead."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    if type(metrics.get_meter_provider()).__name__ == "_ProxyMeterProvider":
        metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))
    yield
    unset_global_providers()


@pytest.fixture(autouse=True)
def fresh_exporter() -> Any:
    EXPORTER.clear()
    yield


def memory_world() -> Any:
    return lw.virtual_world(f"memory://otel-{uuid.uuid4().hex[:8]}")


def spans_named(name: str) -> list[ReadableSpan]:
    return [s for s in EXPORTER.get_finished_spans() if s.name == name]


def one_span(name: str) -> ReadableSpan:
    found = spans_named(name)
    assert len(found) == 1, [s.name for s in EXPORTER.get_finished_spans()]
    return found[0]


def points(metric: str, **attributes: Any) -> list[Any]:
    data = READER.get_metrics_data()
    out = []
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == metric:
                    out += [p for p in m.data.data_points
                            if all((p.attributes or {}).get(k) == v for k, v in attributes.items())]
    return out


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


@lw.workflow(id="otel-retry")
async def retried(ctx: lw.RunContext, input: dict[str, Any]) -> int:
    calls: list[int] = []

    def flaky() -> int:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("the first attempt fails")
        return 2

    first = await ctx.step("first", otel_flows.plain, 1)
    return first + await ctx.step("flaky", flaky, retry=lw.Retry(max_attempts=2, backoff=0))


@lw.workflow(id="otel-fails")
async def fails(ctx: lw.RunContext, input: dict[str, Any]) -> int:
    def broken() -> int:
        raise RuntimeError("always")

    return await ctx.step("broken", broken)


def test_run_span_and_one_span_per_step_attempt_under_the_callers_span() -> None:
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("caller") as caller:
        result = lw.run_workflow(retried, {}, world=memory_world())
    assert result.output == 4
    run = one_span("invoke_workflow otel-retry")
    assert parent_id(run) == caller.get_span_context().span_id
    assert run.context.trace_id == caller.get_span_context().trace_id
    assert dict(run.attributes or {}) == {
        "lw.run_id": result.run_id, "lw.workflow_id": "otel-retry", "lw.incarnation": 1,
        "lw.status": "completed"}
    assert not [e for e in run.events if e.name == "lw.resumed"]  # a first execution

    first = one_span("first")
    assert parent_id(first) == run.context.span_id
    assert dict(first.attributes or {}) == {"lw.run_id": result.run_id, "lw.step_path": "first",
                                            "lw.attempt": 1, "lw.incarnation": 1}
    attempts = sorted(spans_named("flaky"), key=lambda s: int((s.attributes or {})["lw.attempt"]))  # type: ignore[arg-type]
    assert [(s.attributes or {})["lw.attempt"] for s in attempts] == [1, 2]
    assert all(parent_id(s) == run.context.span_id for s in attempts)
    failed, succeeded = attempts
    assert failed.status.status_code is StatusCode.ERROR
    exception = [e for e in failed.events if e.name == "exception"]
    assert exception and (exception[0].attributes or {})["exception.type"] == "ValueError"
    assert succeeded.status.status_code is not StatusCode.ERROR


def test_metrics_runs_by_status_step_duration_and_queue_wait() -> None:
    lw.run_workflow(retried, {}, world=memory_world())
    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(fails, {}, world=memory_world())
    [started] = points("lw.runs.started", **{"lw.workflow_id": "otel-fails"})
    assert started.value >= 1
    [failed] = points("lw.runs.finished", **{"lw.workflow_id": "otel-fails", "lw.status": "failed"})
    assert failed.value == started.value
    assert points("lw.runs.finished", **{"lw.workflow_id": "otel-retry", "lw.status": "completed"})
    assert not points("lw.runs.finished", **{"lw.workflow_id": "otel-fails",
                                             "lw.status": "completed"})
    durations = points("lw.step.duration", **{"lw.workflow_id": "otel-fails", "lw.status": "failed"})
    assert durations and durations[0].count >= 1 and durations[0].sum >= 0

    from little_workflow.runtime.telemetry import record_queue_wait

    record_queue_wait(2.5, queue="otel-q", workflow_id="otel-queued")
    [wait] = points("lw.queue.wait", **{"lw.queue": "otel-q", "lw.workflow_id": "otel-queued"})
    assert (wait.count, wait.sum) == (1, 2.5)


@lw.workflow(id="otel-queued-wait")
async def queued_waiter(ctx: lw.RunContext, input: dict[str, Any]) -> Any:
    return await ctx.wait_for_event("go", "go")


def test_a_worker_records_the_queue_wait_of_a_queued_runs_first_start_only() -> None:
    from little_workflow.testing import FakeClock

    clock = FakeClock(start=1_800_000_000.0, stall_seconds=None)
    world = lw.virtual_world(f"memory://otel-{uuid.uuid4().hex[:8]}", clock=clock)
    lw.declare_queue(world, "otel-wait-q", concurrency=1)
    handle = lw.enqueue(world, queued_waiter, {}, queue="otel-wait-q")
    clock.advance(42)  # enqueued at the World clock's 0 s, started at its 42 s
    worker = lw.Worker(world, workflows=[queued_waiter])
    try:
        worker.run_until_idle()
        assert handle.status() == "waiting"
        handle.send("go", {"ok": True})
        clock.advance(100)
        worker.run_until_idle()  # the resume takes a place again: not a start, no wait
    finally:
        worker.close()
    assert handle.result(timeout=10) == {"ok": True}
    [wait] = points("lw.queue.wait", **{"lw.queue": "otel-wait-q",
                                        "lw.workflow_id": "otel-queued-wait"})
    assert (wait.count, wait.sum) == (1, 42.0)


def kill_when_blocked(kind: str, data_dir: str, spans_file: str, run_id: str,
                      marker: str) -> None:
    env = {**os.environ, "LW_OTEL_BLOCK": "1"}
    proc = subprocess.Popen(
        [sys.executable, os.path.join(TESTS, "otel_flows.py"), kind, data_dir, spans_file,
         run_id, marker], env=env)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(marker):
            assert proc.poll() is None, f"the child ended early ({proc.returncode})"
            assert time.monotonic() < deadline, "the child never reached its blocking step"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def started_spans(spans_file: str) -> list[dict[str, Any]]:
    with open(spans_file) as f:
        return [json.loads(line) for line in f]


def test_resume_after_sigkill_emits_lw_resumed_and_no_span_for_served_steps(tmp_path: Any) -> None:
    data_dir, spans_file = str(tmp_path / "world"), str(tmp_path / "spans.jsonl")
    marker, run_id = str(tmp_path / "blocked"), "run_otel_resume"
    kill_when_blocked("steps", data_dir, spans_file, run_id, marker)
    assert [s["name"] for s in started_spans(spans_file)] == [
        "invoke_workflow otel-steps", "a", "b", "c"]

    result = lw.run_workflow(otel_flows.steps, {"marker": marker},
                             world=lw.local_world(data_dir), run_id=run_id)
    assert result.output == 30
    run = one_span("invoke_workflow otel-steps")
    resumed = [e for e in run.events if e.name == "lw.resumed"]
    assert len(resumed) == 1 and dict(resumed[0].attributes or {}) == {"lw.steps_served": 2}
    assert (run.attributes or {})["lw.incarnation"] == 2
    assert sorted(s.name for s in EXPORTER.get_finished_spans()) == [
        "c", "invoke_workflow otel-steps"]
    c = one_span("c")
    assert parent_id(c) == run.context.span_id
    assert (c.attributes or {})["lw.incarnation"] == 2
    assert (c.attributes or {})["lw.attempt"] == 2  # the killed process's attempt was 1


def test_sub_run_span_is_a_child_of_the_call_span_of_a_killed_process(tmp_path: Any) -> None:
    data_dir, spans_file = str(tmp_path / "world"), str(tmp_path / "spans.jsonl")
    marker, run_id = str(tmp_path / "blocked"), "run_otel_pipeline"
    kill_when_blocked("pipeline", data_dir, spans_file, run_id, marker)
    before = {s["name"]: s for s in started_spans(spans_file)}
    call = before["call-0-otel-member"]
    assert call["parent_id"] == before["invoke_workflow otel-orchestrator"]["span_id"]
    assert before["invoke_workflow otel-member"]["parent_id"] == call["span_id"]

    result = otel_flows.run_pipeline(lw.local_world(data_dir), marker, run_id)
    assert result.output == 8
    sub = one_span("invoke_workflow otel-member")
    # Resumed here, the sub-run's span still hangs under the span that started it.
    assert (sub.context.trace_id, parent_id(sub)) == (call["trace_id"], call["span_id"])
    assert parent_id(one_span("m1")) == sub.context.span_id
    orchestrator = one_span("invoke_workflow otel-orchestrator")
    assert orchestrator.context.trace_id != call["trace_id"]  # started with no span current


@lw.workflow(id="otel-waiter")
async def waiter(ctx: lw.RunContext, input: dict[str, Any]) -> Any:
    return await ctx.wait_for_event("approval", "approve")


def test_waiting_run_links_to_the_span_that_sent_its_event() -> None:
    world = memory_world()
    first = lw.run_workflow(waiter, {}, world=world, suspend=True)
    assert first.status == "waiting"
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("sender") as sender:
        lw.send_event(world, first.run_id, "approve", {"ok": True}, idempotency_key="k1")
    # The same send again from another trace is the same request, not a conflict.
    with tracer.start_as_current_span("sender-again"):
        lw.send_event(world, first.run_id, "approve", {"ok": True}, idempotency_key="k1")
    EXPORTER.clear()
    done = lw.run_workflow(waiter, {}, world=world, run_id=first.run_id, suspend=True)
    assert done.output == {"ok": True}
    run = one_span("invoke_workflow otel-waiter")
    assert [(link.context.trace_id, link.context.span_id) for link in run.links] == [
        (sender.get_span_context().trace_id, sender.get_span_context().span_id)]


def run_script(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=240, env={**os.environ})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_library_runs_with_opentelemetry_not_installed() -> None:
    out = run_script("""
        import sys

        class NoOpenTelemetry:
            def find_spec(self, name, path=None, target=None):
                if name == "opentelemetry" or name.startswith("opentelemetry."):
                    raise ModuleNotFoundError(f"No module named {name!r}")
                return None

        sys.meta_path.insert(0, NoOpenTelemetry())
        try:
            import opentelemetry  # noqa: F401
            raise SystemExit("opentelemetry was importable")
        except ModuleNotFoundError:
            pass
        import little_workflow as lw

        def plain(v):
            return v + 1

        @lw.workflow(id="no-otel")
        async def flow(ctx, input):
            value = await ctx.step("a", plain, 1)
            return value + await ctx.wait_for_event("w", "go")

        @lw.workflow(id="no-otel-member")
        async def member(ctx, input):
            return await ctx.step("m", plain, 2)

        async def orchestrator(ctx, input):
            return await ctx.call_workflow("no-otel-member", input)

        world = lw.virtual_world("memory://no-otel")
        r = lw.run_workflow(flow, {}, world=world, suspend=True)
        lw.send_event(world, r.run_id, "go", 40)
        assert lw.run_workflow(flow, {}, world=world, run_id=r.run_id).output == 42
        assert lw.run_pipeline([member], {}, orchestrator=orchestrator, world=world).output == 3
        assert not [m for m in sys.modules if m.startswith("opentelemetry")]
        print("ran")
    """)
    assert out.strip() == "ran"


def test_no_provider_set_means_no_telemetry_object_on_the_run() -> None:
    out = run_script("""
        import opentelemetry.metrics, opentelemetry.trace  # imported, no provider set
        import little_workflow as lw

        seen = []

        @lw.workflow(id="no-provider")
        async def flow(ctx, input):
            seen.append(ctx.telemetry)
            return await ctx.step("a", lambda: 1)

        assert lw.run_workflow(flow, {}, world=lw.virtual_world("memory://np")).output == 1
        assert seen == [None], seen
        print("ran")
    """)
    assert out.strip() == "ran"


def test_pydantic_ai_agent_emits_genai_chat_and_execute_tool_spans_under_its_steps() -> None:
    from pydantic_ai import Agent
    from pydantic_ai.models.test import TestModel

    from little_workflow.ext.pydantic_ai import LittleWorkflowDurability

    agent = Agent(TestModel(), name="otel-helper", capabilities=[LittleWorkflowDurability()])

    @agent.tool_plain
    def lookup(order_id: str) -> str:
        return f"order {order_id} ships on Friday"

    @lw.workflow(id="otel-agent")
    async def helpdesk(ctx: lw.RunContext, input: dict[str, Any]) -> str:
        return (await agent.run(input["question"])).output

    lw.run_workflow(helpdesk, {"question": "where is A-17?"}, world=memory_world())
    by_id = {s.context.span_id: s for s in EXPORTER.get_finished_spans()}
    chats = spans_named("chat test")
    assert len(chats) == 2  # a request that calls the tool, one that answers
    for chat in chats:
        assert dict(chat.attributes or {}) == {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "test",
            "gen_ai.provider.name": "test"}
        assert chat.kind is trace.SpanKind.CLIENT
        step = by_id[parent_id(chat)]  # type: ignore[index]
        assert str((step.attributes or {})["lw.step_path"]).endswith("/model")
    tool = one_span("execute_tool lookup")
    assert (tool.attributes or {})["gen_ai.operation.name"] == "execute_tool"
    assert (tool.attributes or {})["gen_ai.tool.name"] == "lookup"
    assert (tool.attributes or {})["gen_ai.tool.call.id"] == "pyd_ai_tool_call_id__lookup"
    step = by_id[parent_id(tool)]  # type: ignore[index]
    assert "/lookup/" in str((step.attributes or {})["lw.step_path"])
    run = one_span("invoke_workflow otel-agent")
    assert parent_id(step) == run.context.span_id
