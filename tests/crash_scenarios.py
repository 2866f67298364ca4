"""Child process for SIGKILL tests of outer loops, pipelines and harness calls.
Every real call is written to the ledger as `<runId>:<stepPath>` (or `<runId>:<stepPath>#call-<i>`)."""

from __future__ import annotations

import os
import sys
import time

import little_workflow as lw

DELAY = float(os.environ.get("LW_DELAY", "0.03"))


def ledger(entry: str) -> None:
    with open(os.environ["LW_LEDGER"], "a") as f:
        f.write(entry + "\n")


def work(value: int) -> int:
    step = lw.current_step()
    ledger(f"{step.run_id}:{step.step_path}")
    time.sleep(DELAY)
    return value + 1


@lw.workflow(id="cycle")
async def cycle(ctx, input):
    n = input["n"]
    for i in range(4):
        n = await ctx.step(f"s{i}", work, n)
    return {"n": n}


def supervise(c, history):
    return lw.Done(c["output"]) if c["cycleNumber"] >= 3 else lw.Continue(c["output"])


@lw.workflow(id="stage-a")
async def stage_a(ctx, input):
    n = input["n"]
    for i in range(4):
        n = await ctx.step(f"a{i}", work, n)
    return {"n": n}


@lw.workflow(id="stage-b")
async def stage_b(ctx, input):
    n = input["n"]
    for i in range(4):
        n = await ctx.step(f"b{i}", work, n)
    return {"n": n}


async def orchestrator(ctx, input):
    a = await ctx.call_workflow("stage-a", input)
    return await ctx.call_workflow("stage-b", a)


def model(request):
    step = lw.current_step()
    ledger(f"{step.run_id}:{step.step_path}#call-{request['i']}")
    time.sleep(DELAY)
    return {"answer": request["i"] * 2}


def agent():
    step = lw.current_step()
    return [step.call_model("llm", model, {"i": i})["answer"] for i in range(8)]


@lw.workflow(id="agent")
async def agent_wf(ctx, input):
    return await ctx.step("agent", agent)


EXPECTED = {"outer": {"n": 12}, "pipeline": {"n": 8}, "agent": [i * 2 for i in range(8)]}


def run(scenario: str, data_dir: str, run_id: str):
    world = lw.local_world(data_dir)
    if scenario == "outer":
        return lw.run_workflow(cycle, {"n": 0}, world=world, max_outer_cycles=5,
                               supervise=supervise, outer_loop_id="crashy").output
    if scenario == "pipeline":
        return lw.run_pipeline([stage_a, stage_b], {"n": 0}, orchestrator=orchestrator,
                               world=world, run_id=run_id).output
    return lw.run_workflow(agent_wf, None, world=world, run_id=run_id).output


def committed(data_dir: str) -> set[str]:
    """Ledger entries whose success is committed in the log."""
    world = lw.local_world(data_dir)
    out = set()
    for run_id in world.list_runs():
        for e in world.list_events(run_id):
            if e.type == "step.succeeded":
                out.add(f"{run_id}:{e.payload['stepPath']}")
            elif e.type == "harness.model_call.succeeded":
                out.add(f"{run_id}:{e.payload['stepPath']}#call-{e.payload['index']}")
    return out


if __name__ == "__main__":
    output = run(sys.argv[1], sys.argv[2], sys.argv[3])
    print("RESULT", output == EXPECTED[sys.argv[1]], flush=True)
