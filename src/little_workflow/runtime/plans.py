"""Kept plans (planner reuse): a plan kept by one run is offered to later runs of the same
workflow version; a new version starts empty. The choice made is recorded (`plan.reused`),
so a resumed or replayed run sees the same plan."""

from __future__ import annotations

import json
from typing import Any

from ..world.ids import content_hash, validate_name
from ..world.protocol import WorldLike
from .values import stored_value

PLANS_DIR = "planner-reuse"


def plan_path(run_id: str, workflow_version_id: str, name: str) -> str:
    """Where run `run_id` keeps plan `name` of its workflow version (relative to the World)."""
    return f"runs/{run_id}/{PLANS_DIR}/{workflow_version_id}/{name}.json"


def copy_kept_plan(world: WorldLike, source_run: str, to_run: str, kept: dict[str, Any]) -> None:
    """A fork's copy of a `plan.kept` record comes with the plan file it names, so the
    fork offers the plan to later runs as its source does."""
    name, version = kept.get("name"), kept.get("workflowVersionId")
    if not isinstance(name, str) or not isinstance(version, str):
        return
    data = world.read_file(plan_path(source_run, version, name))
    if data is not None:
        world.write_file(plan_path(to_run, version, name), data)


class Plans:
    def __init__(self, ctx: Any):
        self._ctx = ctx

    def _relative(self, run_id: str, name: str) -> str:
        return plan_path(run_id, self._ctx.workflow.version_id, name)

    def keep(self, name: str, value: Any) -> None:
        """Keep `value` (JSON) as plan `name` of this run's workflow version."""
        validate_name("plan name", name)
        ctx = self._ctx
        digest = content_hash(value)
        kept = ("plan.kept", name, digest)
        if kept in ctx.log.marks:  # kept by an earlier execution (or a fork's source)
            ctx.asked(kept)
            return
        if ctx.replaying:
            return
        payload = {"name": name, "workflowVersionId": ctx.workflow.version_id,
                   "contentHash": digest}
        ctx.check_history("plan.kept", payload)  # before the plan file changes
        data = json.dumps(value, ensure_ascii=False, sort_keys=True).encode()
        ctx.world.write_file(self._relative(ctx.run_id, name), data)
        ctx.append_sync("plan.kept", payload, idempotency_key=f"plan.kept:{name}:{digest}")

    def reuse(self, name: str) -> Any:
        """The newest plan `name` kept by an earlier run of this workflow version, or None."""
        validate_name("plan name", name)
        ctx = self._ctx
        recorded = ctx.log.plans_reused.get(name)
        if recorded is not None:
            ctx.asked(("plan.reused", name))
            return stored_value(ctx.world, recorded.get("plan"))
        if ctx.replaying:
            return None
        source, plan = self._newest(name)
        ctx.append_sync("plan.reused", {
            "name": name, "workflowVersionId": ctx.workflow.version_id,
            "sourceRunId": source, "plan": plan,
        }, idempotency_key=f"plan.reused:{name}")
        ctx.log.plans_reused[name] = {"plan": plan, "sourceRunId": source}
        return plan

    def _newest(self, name: str) -> tuple[str | None, Any]:
        ctx = self._ctx
        world = ctx.world
        best: tuple[str, str, Any] | None = None  # (keptAt, runId, plan)
        for run_id in world.list_dir("runs"):
            if run_id == ctx.run_id:
                continue
            raw = world.read_file(self._relative(run_id, name))
            if raw is None:
                continue
            kept_at = next((e.created_at for e in reversed(world.list_events(run_id))
                            if e.type == "plan.kept" and e.payload.get("name") == name), "")
            if best is None or (kept_at, run_id) > (best[0], best[1]):
                best = (kept_at, run_id, json.loads(raw))
        return (best[1], best[2]) if best else (None, None)
