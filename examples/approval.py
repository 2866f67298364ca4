"""Demo 2: a run drafts, sleeps on a durable timer, waits for an approval; its process
is SIGKILLed while it waits, the approval comes from another process (`little send`),
and a worker finishes the run without calling the draft step again. Same as
`little demo approval`.

The workflow (defined in src/little_workflow/demo.py, so the installed `little` finds it):

    @lw.workflow(id="demo-approval")
    async def approve(ctx, input):
        draft = await ctx.step("draft", write_draft, input["topic"])
        await ctx.sleep("cool-off", input.get("coolOff", 2))          # durable timer
        decision = await ctx.wait_for_event("decision", "approval", timeout=86400)
        return {"draft": draft, "approved": bool(decision and decision.get("ok"))}

By hand, with a worker of this module:

    little run examples.approval:approve --input '{"topic": "x"}' --run-id run_x  # Ctrl-C it while it waits
    little send run_x approval --payload '{"ok": true}'
    little worker examples.approval --until-idle
"""

import sys

from little_workflow.demo import approve, run_approval_demo

__all__ = ["approve"]

if __name__ == "__main__":
    outcome = run_approval_demo(sys.argv[1] if len(sys.argv) > 1 else ".little-workflow")
    sys.exit(0 if outcome["status"] == "completed" and outcome["draftCalls"] == 1 else 1)
