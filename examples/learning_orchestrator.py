"""Demo 3: an orchestrator that reads accumulated pipeline memory on each run and writes
a better plan over time. Deterministic and offline: the "model" is a plain function you
can swap for a real client.

    python examples/learning_orchestrator.py            # three runs, watch the plan shrink
"""

from __future__ import annotations

import sys
from typing import Any

import little_workflow as lw

TOOLS = {
    "search": lambda topic: [f"{topic} live in forests", f"{topic} hunt at night"],
    "translate": lambda topic: [],  # never finds anything for these topics
    "scrape": lambda topic: [f"{topic} are birds"],
    "ask-forum": lambda topic: [],
}


def planning_model(request: dict[str, Any]) -> dict[str, Any]:
    """Swap this for a real model call. It drops the tools memory calls useless and tries
    the ones that paid off first."""
    useless = set(request["lessons"].get("useless", []))
    useful = request["lessons"].get("useful", [])
    rest = [t for t in request["tools"] if t not in useless and t not in useful]
    return {"plan": [t for t in useful if t not in useless] + rest}


@lw.workflow(id="research-task")
async def research(ctx: lw.RunContext, input: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, list[str]] = {}
    for tool in input["plan"]:
        found[tool] = await ctx.step(f"tool-{tool}", TOOLS[tool], input["topic"])
    return {"facts": [f for facts in found.values() for f in facts],
            "useless": [t for t, facts in found.items() if not facts],
            "useful": [t for t, facts in found.items() if facts]}


@lw.workflow(id="write-report")
async def write_report(ctx: lw.RunContext, input: dict[str, Any]) -> dict[str, Any]:
    text = await ctx.step("compose", lambda facts: "; ".join(sorted(facts)), input["facts"])
    return {"report": text}


async def orchestrator(ctx: lw.RunContext, input: dict[str, Any]) -> dict[str, Any]:
    lessons = ctx.memory.pipeline.read_json("lessons.json", default={"useless": [], "useful": []})

    def plan() -> list[str]:
        request = {"tools": sorted(TOOLS), "lessons": lessons, "topic": input["topic"]}
        return lw.current_step().call_model("planner", planning_model, request)["plan"]

    steps = await ctx.step("plan", plan)
    found = await ctx.call_workflow("research-task", {"topic": input["topic"], "plan": steps})
    report = await ctx.call_workflow("write-report", found)
    ctx.memory.pipeline.write_json("lessons.json", {
        "useless": sorted(set(lessons["useless"]) | set(found["useless"])),
        "useful": sorted(set(lessons["useful"]) | set(found["useful"])),
    })
    return {"plan": steps, "toolCalls": len(steps), "report": report["report"]}


def main(world: Any = None, runs: int = 3) -> list[dict[str, Any]]:
    world = world or lw.local_world()
    outputs = []
    for i in range(runs):
        result = lw.run_pipeline([research, write_report], {"topic": "owls"},
                                 orchestrator=orchestrator, world=world)
        outputs.append(result.output)
        print(f"run {i + 1}: plan {result.output['plan']} -> {result.output['toolCalls']} tool calls")
    return outputs


if __name__ == "__main__":
    main(lw.local_world(sys.argv[1]) if len(sys.argv) > 1 else None)
