"""Pipelines: an orchestrator run calls sub-workflows with `await ctx.call_workflow(...)`.

Each call reserves its sub-run id in `harness.tool_call.started` (payload.args.subRunId)
*before* the sub-run starts, and records `harness.tool_call.succeeded` (payload.result.runId)
after. A resumed orchestrator re-enters an unfinished sub-run under the reserved id and
never re-runs a finished one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..errors import (
    ClockStalledError,
    LeaseLostError,
    ReplayDivergenceError,
    RunLockedError,
    StepFailedError,
    StorageError,
    UnknownWorkflowError,
    WorkflowVersionError,
)
from ..world.ids import canonical_json, sha256_hex
from .deadlines import deadline_of
from .state import SubRunCall
from .steps import error_record
from .telemetry import step_attempt
from .values import decode_output, encode_input, output_json, stored_value
from .workflow import Workflow

#: What a sub-run raises when it could not run now, not because it failed (the last two:
#: this code may not run it — another version, or its log diverges from the code).
NOT_A_FAILURE = (RunLockedError, LeaseLostError, StorageError, ClockStalledError,
                 WorkflowVersionError, ReplayDivergenceError)


@dataclass(frozen=True)
class Pipeline:
    workflows: Mapping[str, Workflow]
    key: str


def pipeline_members(workflows: Iterable[Workflow] | Mapping[str, Workflow]) -> dict[str, Workflow]:
    if isinstance(workflows, Mapping):
        out = dict(workflows)
    else:
        out = {wf.id: wf for wf in workflows}
    for name, wf in out.items():
        if not isinstance(wf, Workflow):
            raise TypeError(f"pipeline member {name!r} is not a workflow")
    return out


async def call_workflow(ctx: Any, name: str, input: Any) -> Any:
    """`ctx.call_workflow(name, input)`: a sub-run of a pipeline member, its id reserved
    in the orchestrator's log before it starts."""
    pipeline: Pipeline | None = ctx.pipeline
    available = dict(pipeline.workflows) if pipeline else {}
    if name not in available:
        raise UnknownWorkflowError(name, list(available))
    member = available[name]
    index = ctx.next_call_index()
    call_path = f"call-{index}-{name}"
    recorded: SubRunCall | None = ctx.log.sub_runs.get(call_path)
    if recorded is not None:
        ctx.asked(("call", call_path))
    if recorded is not None and recorded.get("status") == "succeeded":
        # Typed by the member's return annotation, as the first run's sub-run gave it.
        output = (stored_value(ctx.world, recorded.get("result")) or {}).get("output")
        return decode_output(member, output, ctx.run_id) if output is not None else None
    if ctx.replaying:
        raise ReplayDivergenceError(ctx.run_id, call_path, "the log holds no finished sub-run here")
    sub_run_id = (recorded or {}).get("subRunId") or (
        "run_" + sha256_hex(canonical_json({"parent": ctx.run_id, "call": call_path}))[:24])
    base = {"callPath": call_path, "name": "call_workflow"}
    stored_input = encode_input(member, input, sub_run_id)  # the record holds JSON
    await ctx.append("harness.tool_call.started",
                     {**base, "args": {"workflow": name, "input": stored_input, "subRunId": sub_run_id}},
                     idempotency_key=f"{call_path}:started")
    try:
        # A sub-run ends no later than its parent: its deadline is capped by the parent's.
        # What this executor saw of its log (no cancellation there): the sub-run reads
        # only the rest to learn whether its parent was cancelled.
        with step_attempt(ctx, call_path, 1):
            result = await ctx.run_child(member, input, world=ctx.world,
                                         run_id=sub_run_id, pipeline=pipeline,
                                         parent_run_id=ctx.run_id,
                                         parent_seen=ctx.seen_uncancelled(),
                                         deadline_cap=deadline_of(ctx.log))
    except NOT_A_FAILURE:
        # The sub-run did not fail: another process executes it, this process lost it,
        # the storage failed, or this code may not run it. Nothing is recorded; the
        # orchestrator stays resumable.
        raise
    except Exception as e:
        await ctx.append("harness.tool_call.failed", {**base, "error": error_record(e)})
        raise StepFailedError(ctx.run_id, call_path, error_record(e)) from e
    await ctx.append("harness.tool_call.succeeded",
                     {**base, "result": {"runId": sub_run_id, "workflow": name,
                                         "output": output_json(member, result.output)}},
                     idempotency_key=f"{call_path}:succeeded")
    return result.output
