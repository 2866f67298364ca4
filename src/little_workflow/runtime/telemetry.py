"""OpenTelemetry (watching runs from anywhere; extra `otel`): spans and metrics on the global providers.

Nothing here imports opentelemetry unless the program already did: a tracer or meter
provider can only have been set by code that imported `opentelemetry.trace` /
`opentelemetry.metrics`, so while those modules are absent from `sys.modules` there is
nothing to report to and the library runs (and imports) without the package. With the
package imported, the global providers are looked at once per run execution; a run with
no provider set carries `ctx.telemetry = None` and each step pays one attribute check.

What is reported:
- each execution of a run: span `invoke_workflow {workflow_id}` (`lw.run_id`,
  `lw.workflow_id`, `lw.incarnation`); a resumed execution adds the event `lw.resumed`
  with `lw.steps_served` (the finished steps the log held when it began — those the body
  is served without running them, so they get no span);
- each step attempt: a child span named the step path (`lw.run_id`, `lw.step_path`,
  `lw.attempt`, `lw.incarnation`), error status and the exception on a failed attempt;
- trace context is recorded in a new run's `run.created` (`traceContext`), so a sub-run's
  span is a child of the span that started it in whatever process executes it later, and
  in `send_event`'s `signal.received`, so the run that takes the event links to the sender;
- metrics `lw.runs.started`, `lw.runs.finished` (`lw.status`), `lw.step.duration` and
  `lw.queue.wait` (seconds; `record_queue_wait`, for the queue that hands runs out).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Coroutine, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any, TypeVar

T = TypeVar("T")

INSTRUMENTATION_NAME = "little_workflow"
TRACE_CONTEXT = "traceContext"  # the record field carrying a W3C trace context

_OFF: Any = nullcontext()  # stateless, so one instance serves every call


def _tracer() -> Any:
    """The tracer of the global provider, or None when no provider is set."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:  # never imported: nobody can have set a provider
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    return provider.get_tracer(INSTRUMENTATION_NAME)


class Instruments:
    """The metric instruments of one meter provider."""

    def __init__(self, meter: Any):
        self.runs_started = meter.create_counter(
            "lw.runs.started", unit="{run}", description="Runs created and started")
        self.runs_finished = meter.create_counter(
            "lw.runs.finished", unit="{run}",
            description="Runs ended by an execution, by lw.status (completed, failed, cancelled)")
        self.step_duration = meter.create_histogram(
            "lw.step.duration", unit="s", description="Duration of one step attempt")
        self.queue_wait = meter.create_histogram(
            "lw.queue.wait", unit="s",
            description="Time a run waited in a queue between enqueue and its start")


_instruments: tuple[Any, Instruments] | None = None  # (provider, its instruments)


def _instruments_now() -> Instruments | None:
    """The instruments of the global meter provider, or None when no provider is set.
    Built once per provider (instruments are meant to be created once)."""
    global _instruments
    metrics = sys.modules.get("opentelemetry.metrics")
    if metrics is None:
        return None
    provider = metrics.get_meter_provider()
    # The API's stand-in until a provider is set is a private class: told apart by its
    # name rather than imported from the API's _internal module.
    if isinstance(provider, metrics.NoOpMeterProvider) \
            or type(provider).__name__ == "_ProxyMeterProvider":
        return None
    cached = _instruments
    if cached is not None and cached[0] is provider:
        return cached[1]
    built = Instruments(provider.get_meter(INSTRUMENTATION_NAME))
    _instruments = (provider, built)
    return built


def record_queue_wait(seconds: float, *, queue: str, workflow_id: str | None = None) -> None:
    """Record that a run waited `seconds` in `queue` between being enqueued and starting
    (histogram `lw.queue.wait`, attributes `lw.queue` and `lw.workflow_id`). For the
    code that hands queued runs to executors; a no-op with no meter provider set."""
    instruments = _instruments_now()
    if instruments is None:
        return
    attributes = {"lw.queue": queue}
    if workflow_id is not None:
        attributes["lw.workflow_id"] = workflow_id
    instruments.queue_wait.record(max(0.0, float(seconds)), attributes)


def current_trace_context() -> dict[str, str]:
    """The current span's context as W3C `traceparent`/`tracestate` fields ({} when there
    is no tracer provider or no valid current span): what a record carries to the process
    that reads it."""
    if _tracer() is None:
        return {}
    from opentelemetry import propagate, trace

    if not trace.get_current_span().get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def _context_of(carrier: Any) -> Any:
    """The OpenTelemetry context a recorded carrier stands for, or None."""
    if not isinstance(carrier, Mapping) or not carrier:
        return None
    from opentelemetry import propagate, trace

    context = propagate.extract({str(k): str(v) for k, v in carrier.items()})
    return context if trace.get_current_span(context).get_span_context().is_valid else None


def trace_fields() -> dict[str, Any]:
    """`{"traceContext": ...}` to merge into a record's payload, or {}."""
    carrier = current_trace_context()
    return {TRACE_CONTEXT: carrier} if carrier else {}


class RunTelemetry:
    """One execution's span and instruments, set as `ctx.telemetry` while it runs."""

    def __init__(self, tracer: Any, instruments: Instruments | None, span: Any,
                 parent_fields: dict[str, Any]):
        self.tracer = tracer
        self.instruments = instruments
        self.span = span  # None when only metrics are on
        #: The context of whoever started a new run, for its `run.created`.
        self.parent_fields = parent_fields


def run_created_fields(ctx: Any) -> dict[str, Any]:
    """Fields a new run's `run.created` carries: the trace context that started it."""
    telemetry = ctx.telemetry
    return telemetry.parent_fields if telemetry is not None else {}


async def observe_run(ctx: Any, execution: Coroutine[Any, Any, T]) -> T:
    """Await one execution of a run (`runner._execute_run`) inside its span, counting the
    runs it starts and ends."""
    tracer = _tracer()
    instruments = _instruments_now()
    if tracer is None and instruments is None:
        return await execution
    return await _observed(ctx, tracer, instruments, execution)


def _steps_served(log: Any) -> int:
    return sum(1 for rec in log.steps.values() if rec.status != "running")


async def _observed(ctx: Any, tracer: Any, instruments: Instruments | None,
                    execution: Coroutine[Any, Any, T]) -> T:
    from opentelemetry import trace

    log = ctx.log
    new_run = log.created is None
    workflow_id = ctx.workflow_id
    span = None
    parent_fields: dict[str, Any] = {}
    if tracer is not None:
        if new_run:
            parent = None  # the current context: whoever starts the run
            parent_fields = trace_fields()
        else:
            parent = _context_of((log.created or {}).get(TRACE_CONTEXT))
        span = tracer.start_span(
            f"invoke_workflow {workflow_id}", context=parent, kind=trace.SpanKind.INTERNAL,
            attributes={"lw.run_id": ctx.run_id, "lw.workflow_id": workflow_id,
                        "lw.incarnation": log.starts + 1})
        if not new_run:
            span.add_event("lw.resumed", {"lw.steps_served": _steps_served(log)})
    ctx.telemetry = RunTelemetry(tracer, instruments, span, parent_fields)
    if instruments is not None and new_run:
        instruments.runs_started.add(1, {"lw.workflow_id": workflow_id})
    try:
        if span is None:
            result = await execution
        else:
            with trace.use_span(span, end_on_exit=False, record_exception=False,
                                set_status_on_exception=False):
                result = await execution
    except BaseException as e:
        ended = _ended_by(e)
        if span is not None:
            span.record_exception(e)
            span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(e).__name__}: {e}"))
        _finish(ctx, span, instruments, ended)
        raise
    status = getattr(result, "status", None)
    _finish(ctx, span, instruments, status if isinstance(status, str) else None)
    return result


def _finish(ctx: Any, span: Any, instruments: Instruments | None, status: str | None) -> None:
    if instruments is not None and status in ("completed", "failed", "cancelled"):
        instruments.runs_finished.add(1, {"lw.workflow_id": ctx.workflow_id, "lw.status": status})
    if span is None:
        return
    if ctx.incarnation is not None:  # the execution's own number, once its run.started is in
        span.set_attribute("lw.incarnation", ctx.incarnation)
    if status is not None:
        span.set_attribute("lw.status", status)
    span.end()


def _ended_by(e: BaseException) -> str | None:
    """The status a run ends with when its execution raises `e`; None when the run stays
    unfinished (a crash, a lost lease, a sub-run executed elsewhere)."""
    from ..errors import RunCancelledError, WorkflowFailedError

    if isinstance(e, RunCancelledError):
        return "cancelled"
    if isinstance(e, WorkflowFailedError):  # OutputSchemaError is one
        return "failed"
    return None


def step_attempt(ctx: Any, path: str, attempt: int) -> Any:
    """A context manager around one attempt of step `path`: its span (a child of the
    current one) and its duration. The shared no-op one when the run reports nothing."""
    telemetry = ctx.telemetry
    if telemetry is None:
        return _OFF
    return _attempt(ctx, telemetry, path, attempt)


@contextmanager
def _attempt(ctx: Any, telemetry: RunTelemetry, path: str, attempt: int) -> Iterator[None]:
    began = time.perf_counter()
    outcome = "succeeded"
    try:
        if telemetry.tracer is None:
            yield
        else:
            with telemetry.tracer.start_as_current_span(
                path, attributes={"lw.run_id": ctx.run_id, "lw.step_path": path,
                                  "lw.attempt": attempt, "lw.incarnation": ctx.incarnation or 0},
                record_exception=True, set_status_on_exception=True,
            ):
                yield
    except BaseException:
        outcome = "failed"
        raise
    finally:
        if telemetry.instruments is not None:
            telemetry.instruments.step_duration.record(
                time.perf_counter() - began,
                {"lw.workflow_id": ctx.workflow_id, "lw.status": outcome})


def chat_span(ctx: Any, model: str, *, provider: str | None = None,
              conversation_id: str | None = None) -> Any:
    """A context manager around one model request of an agent integration: span
    `chat {model}` (kind CLIENT) with the OpenTelemetry GenAI attributes, a child of the
    step it runs in. The shared no-op one when the run reports no spans."""
    attributes = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
    if provider:
        attributes["gen_ai.provider.name"] = provider
    if conversation_id:
        attributes["gen_ai.conversation.id"] = conversation_id
    return _genai_span(ctx, f"chat {model}", "CLIENT", attributes)


def tool_span(ctx: Any, tool: str, *, call_id: str | None = None,
              tool_type: str = "function") -> Any:
    """A context manager around one tool call of an agent integration: span
    `execute_tool {tool}` (kind INTERNAL) with the OpenTelemetry GenAI attributes."""
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                  "gen_ai.tool.type": tool_type}
    if call_id:
        attributes["gen_ai.tool.call.id"] = call_id
    return _genai_span(ctx, f"execute_tool {tool}", "INTERNAL", attributes)


def _genai_span(ctx: Any, name: str, kind: str, attributes: dict[str, str]) -> Any:
    telemetry = getattr(ctx, "telemetry", None)
    if telemetry is None or telemetry.tracer is None:
        return _OFF
    return _genai(telemetry.tracer, name, kind, attributes)


@contextmanager
def _genai(tracer: Any, name: str, kind: str, attributes: dict[str, str]) -> Iterator[None]:
    from opentelemetry import trace

    with tracer.start_as_current_span(name, kind=getattr(trace.SpanKind, kind),
                                      attributes=attributes) as span:
        try:
            yield
        except Exception as e:
            span.set_attribute("error.type", type(e).__qualname__)
            raise


def link_event(ctx: Any, sequence: int | None) -> None:
    """The run took the event at `sequence`: link its span to the span that sent it."""
    telemetry = ctx.telemetry
    if telemetry is None or telemetry.span is None or sequence is None:
        return
    context = _context_of(ctx.log.signal_traces.get(sequence))
    if context is None:
        return
    from opentelemetry import trace

    telemetry.span.add_link(trace.get_current_span(context).get_span_context(),
                            {"lw.event_sequence": sequence})


__all__ = [
    "chat_span",
    "current_trace_context",
    "link_event",
    "observe_run",
    "record_queue_wait",
    "run_created_fields",
    "step_attempt",
    "tool_span",
    "trace_fields",
]
