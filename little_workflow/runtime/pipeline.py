"""Pipelines: an orchestrator run calls sub-workflows with `await ctx.call_workflow(...)`.

Each call reserves its sub-run id in `harness.tool_call.started` (payload.args.subRunId)
*before* the sub-run starts, and records `harness.tool_call.succeeded` (payload.result.runId)
after. A resumed orchestrator re-enters an unfinished sub-run under the reserved id and
never re-runs a finished one.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Mapping

from ..errors import ReplayDivergenceError, StepFailedError, UnknownWorkflowError
from ..world.ids import canonical_json, sha256_hex
from ..world.models import thaw
from .memory import pipeline_key
from .state import RunResult
from .steps import error_record
from .workflow import Workflow, workflow

if TYPE_CHECKING:
    from .context import RunContext


@dataclass(frozen=True)
class Pipeline:
    workflows: Mapping[str, Workflow]
    key: str


def _as_mapping(workflows: Iterable[Workflow] | Mapping[str, Workflow]) -> dict[str, Workflow]:
    if isinstance(workflows, Mapping):
        out = dict(workflows)
    else:
        out = {wf.id: wf for wf in workflows}
    for name, wf in out.items():
        if not isinstance(wf, Workflow):
            raise TypeError(f"pipeline member {name!r} is not a workflow")
    return out


async def call_workflow(ctx: "RunContext", name: str, input: Any) -> Any:
    pipeline: Pipeline | None = ctx.pipeline
    available = dict(pipeline.workflows) if pipeline else {}
    if name not in available:
        raise UnknownWorkflowError(name, list(available))
    index = ctx._calls
    ctx._calls += 1
    call_path = f"call-{index}-{name}"
    recorded = ctx.log.sub_runs.get(call_path)
    if recorded is not None and recorded.get("status") == "succeeded":
        return thaw((recorded.get("result") or {}).get("output"))
    if ctx.replaying:
        raise ReplayDivergenceError(ctx.run_id, call_path, "the log holds no finished sub-run here")
    sub_run_id = (recorded or {}).get("subRunId") or (
        "run_" + sha256_hex(canonical_json({"parent": ctx.run_id, "call": call_path}))[:24])
    base = {"callPath": call_path, "name": "call_workflow"}
    await ctx.append("harness.tool_call.started",
                     {**base, "args": {"workflow": name, "input": input, "subRunId": sub_run_id}},
                     idempotency_key=f"{call_path}:started")
    from .runner import arun_workflow

    try:
        result = await arun_workflow(available[name], input, world=ctx.world,
                                     run_id=sub_run_id, _pipeline=pipeline)
    except Exception as e:
        await ctx.append("harness.tool_call.failed", {**base, "error": error_record(e)})
        raise StepFailedError(ctx.run_id, call_path, error_record(e)) from e
    await ctx.append("harness.tool_call.succeeded",
                     {**base, "result": {"runId": sub_run_id, "workflow": name, "output": result.output}},
                     idempotency_key=f"{call_path}:succeeded")
    return result.output


async def arun_pipeline(
    workflows: Iterable[Workflow] | Mapping[str, Workflow],
    input: Any = None,
    *,
    orchestrator: Workflow | Callable[..., Awaitable[Any]],
    world: Any = None,
    run_id: str | None = None,
) -> RunResult:
    members = _as_mapping(workflows)
    if not isinstance(orchestrator, Workflow):
        if not inspect.iscoroutinefunction(orchestrator):
            raise TypeError("the orchestrator must be a workflow or an async function (ctx, input)")
        orchestrator = workflow(id=getattr(orchestrator, "__name__", "orchestrator"))(orchestrator)
    key = pipeline_key([wf.definition_hash for wf in members.values()])
    from .runner import arun_workflow

    return await arun_workflow(orchestrator, input, world=world, run_id=run_id,
                               _pipeline=Pipeline(workflows=members, key=key))


def run_pipeline(
    workflows: Iterable[Workflow] | Mapping[str, Workflow],
    input: Any = None,
    *,
    orchestrator: Workflow | Callable[..., Awaitable[Any]],
    world: Any = None,
    run_id: str | None = None,
) -> RunResult:
    """Run `orchestrator` as the top-level run; it calls members with
    `await ctx.call_workflow(name, input)`."""
    from .runner import run_sync

    return run_sync(lambda: arun_pipeline(workflows, input, orchestrator=orchestrator,
                                          world=world, run_id=run_id))
