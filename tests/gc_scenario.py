"""A World with finished, unfinished and young runs, shared by the gc tests."""

from __future__ import annotations

from typing import Any

import little_workflow as lw

CALLS: list[str] = []


class ProcessDied(BaseException):
    """Ends a run where it stands, as a killed process would (it stays `running`)."""


def note(value: int) -> dict:
    step = lw.current_step()
    CALLS.append(f"{step.run_id}:{step.step_path}")
    step.scratch.pipe_file("step-notes.txt", b"step scratch " * 10)
    return {"v": value, "pad": "x" * (70_000 if value >= 100 else 10)}


@lw.workflow(id="gc-demo")
async def gc_demo(ctx: lw.RunContext, input: dict) -> dict:
    a = await ctx.step("small", note, input["n"])
    b = await ctx.step("big", note, 100 + input["n"])  # > inline limit: an artifact
    ctx.scratch.pipe_file("run-notes.txt", b"run scratch " * 20)
    ctx.world.write_artifact(ctx.run_id, "small", "report", {"n": input["n"]})
    if input.get("die"):
        raise ProcessDied()
    if input.get("fail"):
        raise RuntimeError("failed on purpose")
    return {"sum": a["v"] + b["v"]}


def run(world: Any, run_id: str, **input: Any) -> Any:
    try:
        return lw.run_workflow(gc_demo, {"n": 1, **input}, world=world, run_id=run_id)
    except lw.WorkflowFailedError:
        return None
    except ProcessDied:
        return None


def make_created(world: Any, run_id: str) -> None:
    """A run that was created and never started."""
    world.append_event(run_id, "run.created", {
        "workflowId": "gc-demo", "workflowVersionId": "v", "definitionHash": "h",
        "input": {"n": 1}, "inputHash": "sha256:0"})


def populate_old(world: Any) -> None:
    run(world, "run_old_done")
    run(world, "run_old_done2", n=2)
    run(world, "run_old_failed", fail=True)
    run(world, "run_running", die=True)
    make_created(world, "run_created")


DOOMED = ["run_old_done", "run_old_done2", "run_old_failed"]
KEPT = ["run_created", "run_running"]


def snapshot(world: Any, run_id: str) -> dict:
    """Everything of a run a reader can see: its events, artifacts, files."""
    events = [e.to_json_dict() for e in world.list_events(run_id)]
    artifacts = {m.artifact_id: world.read_artifact(m.artifact_ref)
                 for m in world.list_artifacts(run_id)}
    return {"events": events, "artifacts": artifacts, "files": files_under(world, f"runs/{run_id}")}


def files_under(world: Any, rel: str) -> dict[str, bytes]:
    found = world.file_info(rel)
    if found is None:
        return {}
    if found["type"] == "file":
        return {rel: world.read_file(rel)}
    out: dict[str, bytes] = {}
    for name in world.list_dir(rel):
        out.update(files_under(world, f"{rel}/{name}"))
    return out


def gone(world: Any, run_id: str) -> list[str]:
    """What is left of a deleted run (empty when nothing)."""
    left = []
    if world.events.read_after(run_id, 0):
        left.append("events")
    if run_id in world.list_runs():
        left.append("listed")
    if world.list_artifacts(run_id):
        left.append("artifacts")
    if files_under(world, f"runs/{run_id}"):
        left.append("files")
    if world.file_info(f"gc/{run_id}.json") is not None:
        left.append("tombstone")
    return left


def orphan_blobs(world: Any) -> list[str]:
    manifests = {m.artifact_id for m in world.list_artifacts()}
    return [n for n in world.list_dir("artifacts/blobs") if n[:-4] not in manifests]
