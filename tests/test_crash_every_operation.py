"""Crash every storage operation in turn (as SQLite tests its own crash safety): each
crash is followed by a resume on a fresh World over the surviving files, which must end
with the right output, call no step whose success was committed, and accept nothing
unreadable as valid."""

from __future__ import annotations

import functools

from conftest import private_memory

import little_workflow as lw
from little_workflow.testing import FaultPlan, FaultyFileSystem, SimulatedCrash, faulty_local_world

LEDGER: list[str] = []


def work(value: int) -> dict:
    step = lw.current_step()
    LEDGER.append(f"{step.run_id}:{step.step_path}")
    return {"v": value, "pad": "x" * (70_000 if value == 99 else 10)}


@lw.workflow(id="reference")
async def reference(ctx, input):
    total = 0
    for i in range(3):
        total += (await ctx.step(f"serial-{i}", work, i + input["base"]))["v"]
    group = await ctx.parallel("fan", [functools.partial(work, i) for i in range(3)],
                               max_concurrency=2)
    big = await ctx.step("big", work, 99)  # > inline limit: stored as an artifact
    art = ctx.world.write_artifact(ctx.run_id, "notes", "note", {"total": total})
    ctx.memory.workflow.write_json("last.json", {"total": total})
    return {"total": total + sum(g["v"] for g in group), "big": len(big["pad"]),
            "note": art.artifact_ref.startswith("artifact://")}


def supervise(cycle, history):
    return lw.Done(cycle["output"]) if cycle["cycleNumber"] == 2 else lw.Continue({"base": 10})


EXPECTED = {"total": 10 + 11 + 12 + 3, "big": 70_000, "note": True}


def run_reference(world) -> dict:
    return lw.run_workflow(reference, {"base": 0}, world=world, max_outer_cycles=3,
                           supervise=supervise, outer_loop_id="torture").output


def committed(world) -> set[str]:
    out = set()
    for run_id in world.list_runs():
        for e in world.list_events(run_id):
            if e.type == "step.succeeded":
                out.add(f"{run_id}:{e.payload['stepPath']}")
    return out


def crash_then_resume(make_faulty, make_fresh, index: int, partial: bool) -> tuple[bool, list[str]]:
    plan = FaultPlan(crash_at=index, partial=partial)
    LEDGER.clear()
    crashed = False
    try:
        run_reference(make_faulty(plan))
    except SimulatedCrash:
        crashed = True
    fresh = make_fresh()
    done = committed(fresh)
    before = len(LEDGER)
    output = run_reference(fresh)
    problems = []
    if output != EXPECTED:
        problems.append(f"crash #{index}: output {output}")
    rerun = set(LEDGER[before:]) & done
    if rerun:
        problems.append(f"crash #{index}: committed steps ran again: {sorted(rerun)}")
    report = lw.verify_world(fresh)
    if not report.ok:
        problems.append(f"crash #{index}: verify found {report.problems}")
    return crashed, problems


def crash_everywhere(label, make_faulty, make_fresh) -> None:
    """Count the reference run's storage operations, then crash at each one in turn."""
    plan = FaultPlan(crash_at=None)
    assert run_reference(make_faulty(plan)) == EXPECTED
    total = plan.count
    problems, resumed = [], 0
    for index in range(1, total + 1):
        crashed, found = crash_then_resume(make_faulty, make_fresh, index, partial=index % 2 == 0)
        assert crashed
        problems += found
        resumed += not found
    print(f"\n{label}: {total} crash points, {resumed} resumed correctly")
    assert problems == [] and resumed == total


def test_crash_at_every_operation_virtual_world():
    stores: dict[str, object] = {}

    def make_faulty(plan):
        # A new store for each plan (each is used once). Not keyed by id(plan): ids are
        # reused once plans are gone, which handed a finished store to a new crash run.
        inner = stores["last"] = private_memory()
        return lw.virtual_world(FaultyFileSystem(inner, plan), "/wf")

    def make_fresh():
        return lw.virtual_world(stores["last"], "/wf")

    crash_everywhere("virtual_world", make_faulty, make_fresh)


def test_crash_at_every_operation_local_world(tmp_path):
    dirs: list[str] = []

    def make_faulty(plan):
        d = str(tmp_path / f"d{len(dirs)}")
        dirs.append(d)
        return faulty_local_world(d, plan)

    def make_fresh():
        return lw.local_world(dirs[-1])

    crash_everywhere("local_world", make_faulty, make_fresh)
