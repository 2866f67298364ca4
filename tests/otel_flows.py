"""Workflows for the OpenTelemetry tests, and a child process that runs one of them with
the SDK's tracer provider set, writing every span as it STARTS (name, ids, parent) to a
JSON-lines file — a SIGKILLed process never ends its spans, so their ids are only known
this way.

    python otel_flows.py steps|pipeline DATA_DIR SPANS_FILE RUN_ID MARKER

The step `c` (steps) / the member's step `m1` (pipeline) writes MARKER and sleeps while
the environment names LW_OTEL_BLOCK: the moment the test kills the child."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import little_workflow as lw


def _block_here(marker: str) -> None:
    if os.environ.get("LW_OTEL_BLOCK"):
        with open(marker, "w") as f:
            f.write("blocked\n")
        time.sleep(600)


def plain(value: int) -> int:
    return value + 1


@lw.workflow(id="otel-steps")
async def steps(ctx: lw.RunContext, input: dict[str, Any]) -> int:
    a = await ctx.step("a", plain, 1)
    b = await ctx.step("b", plain, a)

    def c() -> int:
        _block_here(input["marker"])
        return b * 10

    return await ctx.step("c", c)


@lw.workflow(id="otel-member")
async def member(ctx: lw.RunContext, input: dict[str, Any]) -> int:
    def m1() -> int:
        _block_here(input["marker"])
        return 7

    return await ctx.step("m1", m1)


@lw.workflow(id="otel-orchestrator")
async def orchestrator(ctx: lw.RunContext, input: dict[str, Any]) -> int:
    return int(await ctx.call_workflow("otel-member", {"marker": input["marker"]})) + 1


def run_pipeline(world: Any, marker: str, run_id: str) -> Any:
    return lw.run_pipeline([member], {"marker": marker}, orchestrator=orchestrator,
                           world=world, run_id=run_id)


def main() -> None:
    kind, data_dir, spans_file, run_id, marker = sys.argv[1:6]
    from opentelemetry import trace
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    class StartedSpans(SpanProcessor):
        def on_start(self, span: Any, parent_context: Any = None) -> None:
            sc = span.get_span_context()
            with open(spans_file, "a") as f:
                f.write(json.dumps({
                    "name": span.name, "trace_id": sc.trace_id, "span_id": sc.span_id,
                    "parent_id": span.parent.span_id if span.parent else None,
                }) + "\n")

    provider = TracerProvider()
    provider.add_span_processor(StartedSpans())
    trace.set_tracer_provider(provider)
    world = lw.local_world(data_dir)
    if kind == "steps":
        lw.run_workflow(steps, {"marker": marker}, world=world, run_id=run_id)
    else:
        run_pipeline(world, marker, run_id)


if __name__ == "__main__":
    main()
