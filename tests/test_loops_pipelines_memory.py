"""Outer loops, pipelines, memory stores, kept plans, harness calls."""

from __future__ import annotations

import threading

import pytest
from conftest import private_memory

import little_workflow as lw


@pytest.fixture(params=["memory", "local_world"])
def w(request, tmp_path):
    if request.param == "memory":
        return lw.virtual_world(private_memory(), "/wf")
    return lw.local_world(str(tmp_path / "lw"))


@lw.workflow(id="improve")
async def improve(ctx, input):
    """Make the number bigger."""
    return {"n": await ctx.step("inc", lambda: input["n"] + 10)}


def test_outer_loop_done_and_manifest_shape(w):
    seen = []

    def supervise(cycle, history):
        seen.append((cycle["cycleNumber"], len(history)))
        assert cycle.output == cycle["output"] and cycle.cycle_number == cycle["cycleNumber"]
        if cycle["output"]["n"] >= 30:
            return lw.Done({"final": cycle["output"]["n"]})
        return lw.Continue({"n": cycle["output"]["n"]})

    r = lw.run_workflow(improve, {"n": 0}, world=w, max_outer_cycles=5, supervise=supervise,
                        outer_loop_id="grow")
    assert r.output == {"final": 30} and r.result_kind == "done" and r.outer_loop_id == "grow"
    assert seen == [(1, 0), (2, 1), (3, 2)]
    m = w.read_document("outer-loops/grow.json")
    assert set(m) == {"outerLoopId", "goal", "maxCycles", "inputHash", "cycles",
                      "pendingCycleRunId", "result"}
    assert m["goal"]["workflowDefinitionHash"] == improve.definition_hash
    assert m["goal"]["description"] == "Make the number bigger."
    assert m["inputHash"].startswith("sha256:") and m["pendingCycleRunId"] is None
    assert m["result"] == {"kind": "done", "finalOutput": {"final": 30}}
    assert [c["output"] for c in m["cycles"]] == [{"n": 10}, {"n": 20}, {"n": 30}]
    assert set(m["cycles"][0]) == {"cycleNumber", "runId", "workflowVersionId", "status", "output"}
    completed = [e for e in w.list_events(m["cycles"][1]["runId"]) if e.type == "outer_loop.cycle_completed"]
    assert completed and completed[0].payload["cycleNumber"] == 2
    # calling again returns the finished result; another input is a mismatch
    again = lw.run_workflow(improve, {"n": 0}, world=w, max_outer_cycles=5, supervise=supervise,
                            outer_loop_id="grow")
    assert again.output == {"final": 30} and len(seen) == 3
    with pytest.raises(lw.InputMismatchError):
        lw.run_workflow(improve, {"n": 1}, world=w, max_outer_cycles=5, supervise=supervise,
                        outer_loop_id="grow")


def test_outer_loop_runs_out_of_cycles(w):
    r = lw.run_workflow(improve, {"n": 0}, world=w, max_outer_cycles=2,
                        supervise=lambda c, h: lw.Continue(c["output"]), outer_loop_id="short")
    assert r.result_kind == "max_cycles" and r.output == {"n": 20}
    assert w.read_document("outer-loops/short.json")["result"] == {"kind": "max_cycles",
                                                                  "finalOutput": {"n": 20}}


def test_outer_loop_callers_are_serialised(w):
    results = []

    def call():
        results.append(lw.run_workflow(improve, {"n": 0}, world=w, max_outer_cycles=3,
                                       supervise=lambda c, h: lw.Continue(c["output"]),
                                       outer_loop_id="shared").output)

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [{"n": 30}] * 3
    assert len(w.read_document("outer-loops/shared.json")["cycles"]) == 3


@lw.workflow(id="research")
async def research(ctx, input):
    return {"facts": await ctx.step("find", lambda: [f"fact about {input['topic']}"])}


@lw.workflow(id="write")
async def write(ctx, input):
    return {"text": await ctx.step("draft", lambda: " / ".join(input["facts"]))}


def test_pipeline_reserves_sub_runs_and_resumes(w):
    calls = {"n": 0}

    async def orchestrator(ctx, input):
        facts = await ctx.call_workflow("research", {"topic": input["topic"]})
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyboardInterrupt  # a crash between two sub-runs
        return await ctx.call_workflow("write", facts)

    with pytest.raises(KeyboardInterrupt):
        lw.run_pipeline([research, write], {"topic": "owls"}, orchestrator=orchestrator,
                        world=w, run_id="run_pipe")
    events = w.list_events("run_pipe")
    started = [e for e in events if e.type == "harness.tool_call.started"]
    sub_run = started[0].payload["args"]["subRunId"]
    assert lw.materialize_run_state(w, sub_run).status == "completed"
    r = lw.run_pipeline([research, write], {"topic": "owls"}, orchestrator=orchestrator,
                        world=w, run_id="run_pipe")
    assert r.output == {"text": "fact about owls"}
    events = w.list_events("run_pipe")
    started = [e for e in events if e.type == "harness.tool_call.started"]
    succeeded = [e for e in events if e.type == "harness.tool_call.succeeded"]
    assert [s.payload["args"]["workflow"] for s in started] == ["research", "write"]
    assert [s.payload["result"]["runId"] for s in succeeded] == [s.payload["args"]["subRunId"] for s in started]
    research_run = started[0].payload["args"]["subRunId"]
    assert [e.type for e in w.list_events(research_run)].count("run.started") == 1  # not re-run


def test_pipeline_unknown_workflow_lists_available(w):
    async def orchestrator(ctx, input):
        return await ctx.call_workflow("nope", {})

    with pytest.raises(lw.WorkflowFailedError) as info:
        lw.run_pipeline([research, write], {}, orchestrator=orchestrator, world=w)
    assert isinstance(info.value.cause, lw.UnknownWorkflowError)
    assert "research" in str(info.value.cause) and "write" in str(info.value.cause)


def test_memory_scopes_journal_and_read_only_org(w):
    w.memory("org").write_text("policies/tone.md", "be kind")

    def learn():
        return lw.current_step().world is not None

    @lw.workflow(id="memo")
    async def memo(ctx, input):
        policy = ctx.memory.org.read_text("policies/tone.md")
        try:
            ctx.memory.org.write_text("policies/tone.md", "be evil")
        except lw.MemoryReadOnlyError:
            pass
        ctx.memory.workflow.write_json("notes.json", {"seen": input})
        ctx.memory.pipeline.write_text("shared.txt", "x")
        await ctx.step("learn", learn)
        return {"policy": policy, "missing": ctx.memory.workflow.read_text("nope", default=None)}

    r = lw.run_workflow(memo, 1, world=w, run_id="run_memo")
    assert r.output == {"policy": "be kind", "missing": None}
    assert w.memory("org").read_text("policies/tone.md") == "be kind"
    assert w.memory("workflow", "memo").read_json("notes.json") == {"seen": 1}
    assert w.memory("workflow", "memo").list() == ["notes.json"]
    assert w.memory("org").list() == ["policies/tone.md"]
    written = [e.payload for e in w.list_events("run_memo") if e.type == "memory.written"]
    assert [(p["scope"], p["path"]) for p in written] == [("workflow", "notes.json"), ("pipeline", "shared.txt")]
    import hashlib

    assert written[1]["contentHash"] == "sha256:" + hashlib.sha256(b"x").hexdigest()
    with pytest.raises(lw.WorldPathError):
        w.memory("org").write_text("../escape", "x")


def test_memory_concurrent_writers_do_not_corrupt(w):
    store = w.memory("workflow", "busy")

    def writer(i):
        for j in range(30):
            store.write_json("state.json", {"writer": i, "j": j, "pad": "x" * 2000})

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    doc = store.read_json("state.json")
    assert doc["pad"] == "x" * 2000 and doc["j"] == 29


def test_kept_plans_reused_by_same_version_only(w):
    @lw.workflow(id="planner", version="1")
    async def planner(ctx, input):
        plan = ctx.plans.reuse("route")
        if plan is None:
            plan = {"route": ["a", "b"], "by": ctx.run_id}
            ctx.plans.keep("route", plan)
        return plan

    first = lw.run_workflow(planner, 1, world=w, run_id="run_plan1").output
    assert first == {"route": ["a", "b"], "by": "run_plan1"}
    path = f"runs/run_plan1/planner-reuse/{planner.version_id}/route.json"
    assert w.read_document(path) == first
    second = lw.run_workflow(planner, 2, world=w, run_id="run_plan2").output
    assert second == first
    reused = [e for e in w.list_events("run_plan2") if e.type == "plan.reused"][0]
    assert reused.payload["sourceRunId"] == "run_plan1"
    assert lw.replay_run(w, "run_plan2", planner).output == first

    @lw.workflow(id="planner", version="2")
    async def planner_v2(ctx, input):
        return ctx.plans.reuse("route")

    assert lw.run_workflow(planner_v2, 3, world=w).output is None


def test_harness_calls_are_not_repeated_on_retry(w):
    model_calls = []

    def model(request):
        model_calls.append(request["prompt"])
        return {"text": request["prompt"].upper()}

    failures = {"left": 1}

    def agent():
        step = lw.current_step()
        a = step.call_model("llm", model, {"prompt": "plan"})
        b = step.call_tool("search", lambda args: {"hits": [args["q"]]}, {"q": "owls"})
        if failures["left"]:
            failures["left"] -= 1
            raise ConnectionError("flaky network after two calls")
        c = step.call_model("llm", model, {"prompt": "answer"})
        return [a, b, c]

    @lw.workflow(id="agent")
    async def wf(ctx, input):
        return await ctx.step("agent", agent, retry=lw.Retry(max_attempts=2, backoff=0))

    r = lw.run_workflow(wf, None, world=w, run_id="run_agent")
    assert r.output == [{"text": "PLAN"}, {"hits": ["owls"]}, {"text": "ANSWER"}]
    assert model_calls == ["plan", "answer"]
    types = [e.type for e in w.list_events("run_agent")]
    assert types.count("harness.model_call.succeeded") == 2
    assert types.count("harness.tool_call.succeeded") == 1
