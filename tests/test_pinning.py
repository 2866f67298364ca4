"""Changed code never re-runs history (DESIGN §15): a run is pinned to the version of the
code that created it, resuming checks the code against the log before it calls or appends
anything, and `ctx.patched` lets one body serve old and new runs. On memory, local_world
and local-file worlds."""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, Callable

import pytest
from conftest import WorldMaker

import little_workflow as lw
from little_workflow.testing import FakeClock
from little_workflow.world.ids import content_hash

T0 = 1_800_000_000.0


@pytest.fixture(params=["memory", "local_world", "local-file"])
def make(request: Any, tmp_path: Any) -> WorldMaker:
    return WorldMaker(request.param, tmp_path, request)


class Ledger:
    """Which step functions were called, in order."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def fn(self, name: str, value: Any = None) -> Callable[[], Any]:
        def call() -> Any:
            self.names.append(name)
            return value if value is not None else name.upper()

        return call


def types(world: Any, run_id: str) -> list[str]:
    return [e.type for e in world.list_events(run_id)]


def created(world: Any, run_id: str) -> dict[str, Any]:
    return dict(world.list_events(run_id)[0].payload)


def status(world: Any, run_id: str) -> str:
    return lw.materialize_run_state(world, run_id).status


def summary(world: Any, run_id: str) -> Any:
    return next(r for r in lw.list_runs(world, limit=1000).runs if r.run_id == run_id)


def waiting_run(world: Any, wf: Any, run_id: str) -> None:
    r = lw.run_workflow(wf, {}, world=world, run_id=run_id, suspend=True)
    assert r.status == "waiting", r


# --- pinning ---------------------------------------------------------------------------------

def test_the_decorators_version_defaults_to_none_and_run_created_records_the_version(make):
    world = make()

    @lw.workflow(id="named", version="2026-01")
    async def named(ctx, input):
        return 1

    @lw.workflow(id="hashed")
    async def hashed(ctx, input):
        return 1

    assert hashed.version is None and named.version == "2026-01"
    assert hashed.code_version == hashed.definition_hash and named.code_version == "2026-01"
    lw.run_workflow(named, {}, world=world, run_id="run_named")
    lw.run_workflow(hashed, {}, world=world, run_id="run_hashed")
    assert created(world, "run_named")["version"] == "2026-01"
    assert created(world, "run_hashed")["version"] == hashed.definition_hash
    doc = world.read_document(f"workflow-versions/{hashed.version_id}.json")
    assert doc["version"] is None and doc["definitionHash"] == hashed.definition_hash


def _approval_v1(ledger: Ledger) -> Any:
    @lw.workflow(id="approve")
    async def approve(ctx, input):
        draft = await ctx.step("draft", ledger.fn("draft"))
        decision = await ctx.wait_for_event("decision", "approval")
        return [draft, decision]

    return approve


def _approval_v2(ledger: Ledger) -> Any:
    @lw.workflow(id="approve")
    async def approve(ctx, input):
        draft = await ctx.step("draft", ledger.fn("draft"))
        decision = await ctx.wait_for_event("decision", "approval")
        return {"draft": draft, "decision": decision}  # another body: another version

    return approve


def test_resuming_with_code_of_another_version_is_refused_and_recorded_once(make):
    world = make()
    ledger = Ledger()
    v1, v2 = _approval_v1(ledger), _approval_v2(ledger)
    assert v1.code_version != v2.code_version
    waiting_run(world, v1, "run_a")
    before = [e.to_json_dict() for e in world.list_events("run_a")]
    with pytest.raises(lw.WorkflowVersionError) as caught:
        lw.run_workflow(v2, {}, world=world, run_id="run_a", suspend=True)
    err = caught.value
    assert (err.run_id, err.workflow_id) == ("run_a", "approve")
    assert (err.run_version, err.code_version) == (v1.code_version, v2.code_version)
    message = str(err)
    for needle in ("run_a", v1.code_version, v2.code_version, "version=", "fork_run"):
        assert needle in message, message
    assert "\n" not in message
    after = world.list_events("run_a")
    assert [e.to_json_dict() for e in after[:len(before)]] == before
    assert [e.type for e in after[len(before):]] == ["run.resume_refused"]
    assert after[-1].payload == {"version": v1.code_version, "codeVersion": v2.code_version}
    assert status(world, "run_a") == "waiting" and ledger.names == ["draft"]
    assert summary(world, "run_a").needs_version == v1.code_version
    assert summary(world, "run_a").status == "waiting"
    # Refused again before the run next executes: nothing more is recorded.
    with pytest.raises(lw.WorkflowVersionError):
        lw.run_workflow(v2, {}, world=world, run_id="run_a", suspend=True)
    assert len(world.list_events("run_a")) == len(after)
    # Its own code resumes it, and the catalogue forgets the refusal.
    lw.send_event(world, "run_a", "approval", {"ok": True})
    assert lw.run_workflow(v1, {}, world=world, run_id="run_a").output == ["DRAFT", {"ok": True}]
    assert ledger.names == ["draft"]
    assert summary(world, "run_a").needs_version is None
    assert summary(world, "run_a").status == "completed"
    # A completed run returns its stored result to any code, and runs nothing.
    assert lw.run_workflow(v2, {}, world=world, run_id="run_a").output == ["DRAFT", {"ok": True}]
    assert types(world, "run_a")[-1] == "run.completed"


def test_a_refusal_after_the_run_executed_again_is_recorded_again(make):
    world = make()
    ledger = Ledger()

    @lw.workflow(id="twice")
    async def v1(ctx, input):
        await ctx.step("a", ledger.fn("a"))
        await ctx.wait_for_event("first", "go")
        await ctx.wait_for_event("second", "go")
        return "done"

    @lw.workflow(id="twice")
    async def v2(ctx, input):
        await ctx.step("a", ledger.fn("a"))
        return "other"

    waiting_run(world, v1, "run_t")
    with pytest.raises(lw.WorkflowVersionError):
        lw.run_workflow(v2, {}, world=world, run_id="run_t")
    lw.send_event(world, "run_t", "go", 1)
    waiting_run(world, v1, "run_t")  # executes: run.started clears the refusal
    assert summary(world, "run_t").needs_version is None
    with pytest.raises(lw.WorkflowVersionError):
        lw.run_workflow(v2, {}, world=world, run_id="run_t")
    assert types(world, "run_t").count("run.resume_refused") == 2
    assert summary(world, "run_t").needs_version == v1.code_version


def test_code_given_the_runs_version_resumes_it(make):
    world = make()
    ledger = Ledger()
    v1 = _approval_v1(ledger)
    waiting_run(world, v1, "run_h")

    # The run holds the definition hash of the code that created it: code that says
    # `version=` that hash declares it may continue those runs.
    @lw.workflow(id="approve", version=v1.definition_hash)
    async def declared(ctx, input):
        draft = await ctx.step("draft", ledger.fn("draft"))
        decision = await ctx.wait_for_event("decision", "approval")
        return {"draft": draft, "decision": decision, "declared": True}

    lw.send_event(world, "run_h", "approval", True)
    out = lw.run_workflow(declared, {}, world=world, run_id="run_h").output
    assert out == {"draft": "DRAFT", "decision": True, "declared": True}
    assert ledger.names == ["draft"]

    @lw.workflow(id="named", version="7")
    async def seven(ctx, input):
        await ctx.step("a", ledger.fn("a"))
        return await ctx.wait_for_event("w", "go")

    @lw.workflow(id="named", version="7")
    async def seven_edited(ctx, input):
        await ctx.step("a", ledger.fn("a"))
        return {"got": await ctx.wait_for_event("w", "go")}

    waiting_run(world, seven, "run_7")
    lw.send_event(world, "run_7", "go", 1)
    assert lw.run_workflow(seven_edited, {}, world=world, run_id="run_7").output == {"got": 1}
    assert ledger.names == ["draft", "a"]


def test_a_run_written_before_pinning_is_pinned_to_its_definition_hash(make):
    world = make()
    ledger = Ledger()
    v1, v2 = _approval_v1(ledger), _approval_v2(ledger)
    # What run.created held before runs recorded a version.
    world.append_event("run_old", "run.created", {
        "workflowId": "approve", "workflowVersionId": v1.version_id,
        "definitionHash": v1.definition_hash, "input": {}, "inputHash": content_hash({})})
    with pytest.raises(lw.WorkflowVersionError) as caught:
        lw.run_workflow(v2, {}, world=world, run_id="run_old", suspend=True)
    assert caught.value.run_version == v1.definition_hash
    assert ledger.names == []
    waiting_run(world, v1, "run_old")
    assert ledger.names == ["draft"]


def test_a_fork_runs_the_code_it_is_given_and_is_pinned_to_it(make):
    world = make()
    ledger = Ledger()
    v1, v2 = _approval_v1(ledger), _approval_v2(ledger)
    waiting_run(world, v1, "run_src")
    with pytest.raises(lw.WorkflowVersionError):
        lw.run_workflow(v2, {}, world=world, run_id="run_src", suspend=True)
    fork = lw.fork_run(world, "run_src", from_step="decision", new_run_id="run_fork")
    assert "version" not in created(world, fork)
    lw.send_event(world, fork, "approval", "yes")
    assert lw.run_workflow(v2, {}, world=world, run_id=fork).output == {"draft": "DRAFT",
                                                                       "decision": "yes"}
    assert ledger.names == ["draft"]
    # Pinned to the code that first ran it.
    fork2 = lw.fork_run(world, "run_src", from_step="decision", new_run_id="run_fork2")
    waiting_run(world, v2, fork2)
    with pytest.raises(lw.WorkflowVersionError) as caught:
        lw.run_workflow(v1, {}, world=world, run_id=fork2, suspend=True)
    assert caught.value.run_version == v2.code_version
    # The refusal record is the source's own: a fork of a refused run copies none of it.
    assert "run.resume_refused" not in types(world, fork)


def test_a_refused_run_still_verifies_replays_forks_and_renders(make, tmp_path):
    world = make()
    ledger = Ledger()
    v1, v2 = _approval_v1(ledger), _approval_v2(ledger)
    waiting_run(world, v1, "run_r")
    with pytest.raises(lw.WorkflowVersionError):
        lw.run_workflow(v2, {}, world=world, run_id="run_r", suspend=True)
    assert lw.verify_world(world).ok
    assert lw.replay_run(world, "run_r", v1).status == "waiting"
    assert lw.replay_run(world, "run_r", v2).status == "waiting"  # replay checks no version
    from little_workflow.ops.inspect import render_run_html

    page = render_run_html(world, "run_r")
    assert '"run.resume_refused"' in page
    world.catalogue.rebuild()
    assert summary(world, "run_r").needs_version == v1.code_version
    fork = lw.fork_run(world, "run_r", from_step="decision")
    assert "run.resume_refused" not in types(world, fork)


class RefusalRecords(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_worker_leaves_a_run_of_another_version_alone_and_reports_it_once(make):
    world = make()
    ledger = Ledger()
    v1, v2 = _approval_v1(ledger), _approval_v2(ledger)
    waiting_run(world, v1, "run_w")
    lw.send_event(world, "run_w", "approval", 1)  # due now
    locks: list[str] = []
    traced = lw.tracing_world(world, lambda name, args, kwargs: locks.append(args[0])
                              if name == "run_lock" else None)
    handler = RefusalRecords()
    logger = logging.getLogger("little_workflow.worker")
    logger.addHandler(handler)
    try:
        worker = lw.Worker(traced, [v2])
        worker.run_until_idle()
        worker.run_until_idle()  # not tried again: this code cannot run it
        worker.close()
    finally:
        logger.removeHandler(handler)
    assert locks == ["run_w"]
    refusals = [r for r in handler.records if getattr(r, "lw_run_id", None) == "run_w"]
    assert len(refusals) == 1 and isinstance(refusals[0].lw_refusal, lw.WorkflowVersionError)
    assert types(world, "run_w").count("run.resume_refused") == 1
    assert ledger.names == ["draft"] and status(world, "run_w") == "waiting"
    worker = lw.Worker(world, [v1])
    worker.run_until_idle()
    worker.close()
    assert status(world, "run_w") == "completed" and ledger.names == ["draft"]


# --- divergence on resume --------------------------------------------------------------------

def _agent(ledger: Ledger, tool_path: str) -> Any:
    @lw.workflow(id="agent", version="1")
    async def agent(ctx, input):
        found = await ctx.step(tool_path, ledger.fn("tool"))
        decision = await ctx.wait_for_event("decision", "approval")
        done = await ctx.step("finish", ledger.fn("finish"))
        return [found, decision, done]

    return agent


def test_a_renamed_step_is_a_divergence_that_calls_and_appends_nothing(make):
    world = make()
    ledger = Ledger()
    waiting_run(world, _agent(ledger, "tool"), "run_x")
    lw.send_event(world, "run_x", "approval", "ok")
    before = types(world, "run_x")
    renamed = _agent(ledger, "search_tool")
    with pytest.raises(lw.ReplayDivergenceError) as caught:
        lw.run_workflow(renamed, {}, world=world, run_id="run_x")
    err = caught.value
    assert (err.run_id, err.step_path, err.log_step_path) == ("run_x", "search_tool", "tool")
    assert "'tool'" in str(err) and "'search_tool'" in str(err) and "fork_run" in str(err)
    assert ledger.names == ["tool"]
    assert types(world, "run_x") == before + ["run.started"]
    assert status(world, "run_x") != "failed"
    # Fixed code continues it.
    out = lw.run_workflow(_agent(ledger, "tool"), {}, world=world, run_id="run_x").output
    assert out == ["TOOL", "ok", "FINISH"] and ledger.names == ["tool", "finish"]


def _abc(ledger: Ledger, order: tuple[str, ...]) -> Any:
    @lw.workflow(id="abc", version="1")
    async def abc(ctx, input):
        out = [await ctx.step(name, ledger.fn(name)) for name in order]
        await ctx.wait_for_event("gate", "go")
        return out

    return abc


@pytest.mark.parametrize("order,log_step,code_step", [
    (("a", "c", "d"), "b", "c"),   # b skipped: found when c is asked for before it
    (("b", "a", "c"), "a", "b"),   # reordered
    (("a", "b"), "c", None),       # c skipped at the end of the body
])
def test_skipping_or_reordering_completed_steps_is_a_divergence(make, order, log_step, code_step):
    world = make()
    ledger = Ledger()
    waiting_run(world, _abc(ledger, ("a", "b", "c")), "run_o")
    lw.send_event(world, "run_o", "go")
    before = types(world, "run_o")
    with pytest.raises(lw.ReplayDivergenceError) as caught:
        lw.run_workflow(_abc(ledger, order), {}, world=world, run_id="run_o")
    assert caught.value.log_step_path == log_step
    if code_step is not None:
        assert caught.value.step_path == code_step
    assert ledger.names == ["a", "b", "c"]
    assert types(world, "run_o") == before + ["run.started"]
    assert lw.run_workflow(_abc(ledger, ("a", "b", "c")), {}, world=world,
                           run_id="run_o").output == ["A", "B", "C"]


def _every_kind(ledger: Ledger, skip: frozenset[str]) -> Any:
    @lw.workflow(id="kinds", version="1")
    async def kinds(ctx, input):
        await ctx.step("first", ledger.fn("first"))
        if "sleep" not in skip:
            await ctx.sleep("nap", 0)
        if "wait" not in skip:
            await ctx.wait_for_event("early", "ping", timeout=0)
        if "now" not in skip:
            ctx.now()
        if "uuid" not in skip:
            ctx.uuid()
        if "memory" not in skip:
            ctx.memory.workflow.read_text("notes.txt", default="")
        if "keep" not in skip:
            ctx.plans.keep("route", {"via": "first"})
        if "reuse" not in skip:
            ctx.plans.reuse("other")
        if "patch" not in skip:
            ctx.patched("p1")
        if "step" not in skip:
            await ctx.step("second", ledger.fn("second"))
        gate = await ctx.wait_for_event("gate", "go")
        await ctx.step("last", ledger.fn("last"))
        return gate

    return kinds


@pytest.mark.parametrize("kind", ["sleep", "wait", "now", "uuid", "memory", "keep", "reuse",
                                  "patch", "step"])
def test_every_record_on_the_workflows_path_must_be_asked_for_again(make, kind):
    world = make(clock=FakeClock(start=T0))
    ledger = Ledger()
    waiting_run(world, _every_kind(ledger, frozenset()), "run_k")
    lw.send_event(world, "run_k", "go", "went")
    before = types(world, "run_k")
    with pytest.raises(lw.ReplayDivergenceError) as caught:
        lw.run_workflow(_every_kind(ledger, frozenset({kind})), {}, world=world, run_id="run_k")
    # Found where the code goes on past the record it no longer asks for: at the gate,
    # whose wait would now complete — before anything is appended.
    assert caught.value.step_path == "gate"
    assert types(world, "run_k") == before + ["run.started"]
    assert ledger.names == ["first", "second"]
    assert lw.run_workflow(_every_kind(ledger, frozenset()), {}, world=world,
                           run_id="run_k").output == "went"
    assert ledger.names == ["first", "second", "last"]


def test_signals_and_cancel_requests_from_outside_need_not_be_asked_for(make):
    world = make()
    ledger = Ledger()

    @lw.workflow(id="outside", version="1")
    async def v1(ctx, input):
        await ctx.step("a", ledger.fn("a"))
        return await ctx.wait_for_event("w", "go")

    waiting_run(world, v1, "run_s")
    lw.send_event(world, "run_s", "unrelated", 1)  # no wait of the code takes it
    lw.send_event(world, "run_s", "go", 2)
    assert lw.run_workflow(v1, {}, world=world, run_id="run_s").output == 2


def test_a_step_that_never_finished_need_not_be_asked_for(make):
    world = make()
    ledger = Ledger()

    @lw.workflow(id="inflight", version="1")
    async def v1(ctx, input):
        await ctx.step("a", ledger.fn("a"))
        await ctx.step("b", ledger.fn("b"))
        return "v1"

    @lw.workflow(id="inflight", version="1")
    async def v2(ctx, input):
        await ctx.step("a", ledger.fn("a"))
        await ctx.step("c", ledger.fn("c"))
        return "v2"

    world.append_event("run_f", "run.created", {
        "workflowId": "inflight", "version": "1", "definitionHash": v1.definition_hash,
        "workflowVersionId": v1.version_id, "input": {}, "inputHash": content_hash({})})
    world.append_event("run_f", "run.started", {"start": 1})
    world.append_event("run_f", "step.started", {"stepPath": "a", "attempt": 1})
    world.append_event("run_f", "step.succeeded", {"stepPath": "a", "attempt": 1, "output": "A"})
    world.append_event("run_f", "step.started", {"stepPath": "b", "attempt": 1})  # then a crash
    assert lw.run_workflow(v2, {}, world=world, run_id="run_f").output == "v2"
    assert ledger.names == ["c"]


def test_resume_after_a_parallel_group_and_gathered_steps_passes(make):
    world = make()
    ledger = Ledger()

    async def child(i: int) -> int:
        ledger.names.append(f"c{i}")
        return i

    @lw.workflow(id="groups", version="1")
    async def wf(ctx, input):
        a = await ctx.step("a", ledger.fn("a"))
        group = await ctx.parallel("g", [functools.partial(child, i) for i in range(4)])
        x, y = await asyncio.gather(ctx.step("x", ledger.fn("x")), ctx.step("y", ledger.fn("y")))
        await ctx.wait_for_event("gate", "go")
        return [a, group, x, y, await ctx.step("z", ledger.fn("z"))]

    waiting_run(world, wf, "run_g")
    lw.send_event(world, "run_g", "go")
    assert lw.run_workflow(wf, {}, world=world, run_id="run_g").output == \
        ["A", [0, 1, 2, 3], "X", "Y", "Z"]
    assert sorted(ledger.names) == sorted(["a", "c0", "c1", "c2", "c3", "x", "y", "z"])


def _interleaved_chains(world: Any, wf: Any, run_id: str) -> None:
    """A log two gathered tasks wrote: their steps interleaved, then the process died."""
    world.append_event(run_id, "run.created", {
        "workflowId": wf.id, "version": "1", "definitionHash": wf.definition_hash,
        "workflowVersionId": wf.version_id, "input": {}, "inputHash": content_hash({})})
    world.append_event(run_id, "run.started", {"start": 1})
    for path in ("l0", "r0", "r1", "l1"):
        world.append_event(run_id, "step.started", {"stepPath": path, "attempt": 1})
        world.append_event(run_id, "step.succeeded",
                           {"stepPath": path, "attempt": 1, "output": path.upper()})


def _chains(ledger: Ledger, names: tuple[str, str], n: int) -> Any:
    async def chain(ctx: Any, name: str) -> list[str]:
        return [await ctx.step(f"{name}{i}", ledger.fn(f"{name}{i}")) for i in range(n)]

    @lw.workflow(id="gathered", version="1")
    async def wf(ctx, input):
        left, right = await asyncio.gather(chain(ctx, names[0]), chain(ctx, names[1]))
        return left + right

    return wf


def test_two_gathered_sequences_resume_whichever_asks_first(make):
    """Two tasks under a bare gather: each asks for its own recorded steps, then new ones.
    Whichever reaches a new step first waits until the other has asked for its records."""
    world = make()
    ledger = Ledger()
    wf = _chains(ledger, ("l", "r"), 3)
    _interleaved_chains(world, wf, "run_2")
    assert lw.run_workflow(wf, {}, world=world, run_id="run_2").output == \
        ["L0", "L1", "L2", "R0", "R1", "R2"]
    assert sorted(ledger.names) == ["l2", "r2"]


def test_a_gathered_sequence_that_no_longer_asks_for_its_steps_diverges(make):
    world = make()
    ledger = Ledger()
    _interleaved_chains(world, _chains(ledger, ("l", "r"), 3), "run_q")
    before = types(world, "run_q")
    with pytest.raises(lw.ReplayDivergenceError) as caught:
        lw.run_workflow(_chains(ledger, ("l", "q"), 3), {}, world=world, run_id="run_q")
    assert caught.value.log_step_path == "r0"
    assert caught.value.step_path in ("l2", "q0")
    assert ledger.names == []
    assert types(world, "run_q") == before + ["run.started"]


def test_a_worker_reports_a_divergence_once_and_leaves_the_run_resumable(make):
    world = make()
    ledger = Ledger()
    waiting_run(world, _agent(ledger, "tool"), "run_d")
    lw.send_event(world, "run_d", "approval", "ok")
    handler = RefusalRecords()
    logger = logging.getLogger("little_workflow.worker")
    logger.addHandler(handler)
    try:
        worker = lw.Worker(world, [_agent(ledger, "search_tool")])
        worker.run_until_idle()
        worker.run_until_idle()
        worker.close()
    finally:
        logger.removeHandler(handler)
    refusals = [r for r in handler.records if getattr(r, "lw_run_id", None) == "run_d"]
    assert len(refusals) == 1
    assert isinstance(refusals[0].lw_refusal, lw.ReplayDivergenceError)
    assert types(world, "run_d").count("run.started") == 2  # the first run, the one try
    assert ledger.names == ["tool"] and status(world, "run_d") != "failed"
    worker = lw.Worker(world, [_agent(ledger, "tool")])
    worker.run_until_idle()
    worker.close()
    assert status(world, "run_d") == "completed" and ledger.names == ["tool", "finish"]


# --- ctx.patched -----------------------------------------------------------------------------

def _patched_agent(ledger: Ledger) -> Any:
    @lw.workflow(id="agent", version="1")
    async def agent(ctx, input):
        if ctx.patched("search-v2"):
            found = await ctx.step("search_tool", ledger.fn("search_tool"))
        else:
            found = await ctx.step("tool", ledger.fn("tool"))
        decision = await ctx.wait_for_event("decision", "approval")
        done = await ctx.step("finish", ledger.fn("finish"))
        return [found, decision, done]

    return agent


def test_patched_is_false_for_a_run_that_went_past_it_and_records_nothing(make):
    world = make()
    ledger = Ledger()
    waiting_run(world, _agent(ledger, "tool"), "run_old")
    lw.send_event(world, "run_old", "approval", "ok")
    patched = _patched_agent(ledger)
    out = lw.run_workflow(patched, {}, world=world, run_id="run_old").output
    assert out == ["TOOL", "ok", "FINISH"] and ledger.names == ["tool", "finish"]
    assert "patch.marked" not in types(world, "run_old")
    n = len(world.list_events("run_old"))
    assert lw.replay_run(world, "run_old", patched).output == out
    assert len(world.list_events("run_old")) == n


def test_patched_is_true_for_a_new_run_recorded_and_served_on_resume_and_replay(make):
    world = make()
    ledger = Ledger()
    patched = _patched_agent(ledger)
    waiting_run(world, patched, "run_new")
    marks = [e for e in world.list_events("run_new") if e.type == "patch.marked"]
    assert [m.payload["patchId"] for m in marks] == ["search-v2"]
    assert types(world, "run_new").index("patch.marked") < types(world, "run_new").index(
        "step.started")
    lw.send_event(world, "run_new", "approval", "ok")
    # Code that drops the patch check while the log holds its marker diverges.
    with pytest.raises(lw.ReplayDivergenceError) as caught:
        lw.run_workflow(_agent(ledger, "search_tool"), {}, world=world, run_id="run_new")
    assert caught.value.log_step_path == "patch/search-v2"
    out = lw.run_workflow(patched, {}, world=world, run_id="run_new").output
    assert out == ["SEARCH_TOOL", "ok", "FINISH"]
    assert types(world, "run_new").count("patch.marked") == 1
    assert ledger.names == ["search_tool", "finish"]
    n = len(world.list_events("run_new"))
    assert lw.replay_run(world, "run_new", patched).output == out
    assert len(world.list_events("run_new")) == n


def test_patched_reached_at_the_end_of_an_old_runs_log_is_true(make):
    world = make()
    ledger = Ledger()

    @lw.workflow(id="late", version="1")
    async def v1(ctx, input):
        await ctx.step("a", ledger.fn("a"))
        return await ctx.wait_for_event("w", "go")

    @lw.workflow(id="late", version="1")
    async def v2(ctx, input):
        await ctx.step("a", ledger.fn("a"))
        got = await ctx.wait_for_event("w", "go")
        if ctx.patched("audit"):
            await ctx.step("audit", ledger.fn("audit"))
        return got

    waiting_run(world, v1, "run_l")
    lw.send_event(world, "run_l", "go", 5)
    assert lw.run_workflow(v2, {}, world=world, run_id="run_l").output == 5
    assert ledger.names == ["a", "audit"]
    assert "patch.marked" in types(world, "run_l")
    assert lw.replay_run(world, "run_l", v2).output == 5


def test_patched_ids_are_checked(make):
    world = make()

    @lw.workflow(id="badpatch")
    async def wf(ctx, input):
        return ctx.patched("../x")

    with pytest.raises(lw.WorkflowFailedError) as caught:
        lw.run_workflow(wf, {}, world=world, run_id="run_bp")
    assert "patch id" in str(caught.value)


def test_resume_of_a_half_done_parallel_group_passes(make):
    world = make()
    ledger = Ledger()

    def child(i: int) -> Callable[[], Any]:
        return ledger.fn(f"c{i}", i)

    @lw.workflow(id="half", version="1")
    async def wf(ctx, input):
        a = await ctx.step("a", ledger.fn("a"))
        return [a, await ctx.parallel("g", [child(i) for i in range(4)])]

    # A crash in the middle of the group: children finished out of order, two unfinished.
    world.append_event("run_half", "run.created", {
        "workflowId": "half", "version": "1", "definitionHash": wf.definition_hash,
        "workflowVersionId": wf.version_id, "input": {}, "inputHash": content_hash({})})
    for type_, payload in [
            ("run.started", {"start": 1}),
            ("step.started", {"stepPath": "a", "attempt": 1}),
            ("step.succeeded", {"stepPath": "a", "attempt": 1, "output": "A"}),
            ("step.started", {"stepPath": "g/2", "attempt": 1}),
            ("step.started", {"stepPath": "g/0", "attempt": 1}),
            ("step.started", {"stepPath": "g/1", "attempt": 1}),
            ("step.succeeded", {"stepPath": "g/2", "attempt": 1, "output": 2}),
            ("step.succeeded", {"stepPath": "g/0", "attempt": 1, "output": 0})]:
        world.append_event("run_half", type_, payload)
    assert lw.run_workflow(wf, {}, world=world, run_id="run_half").output == ["A", [0, 1, 2, 3]]
    assert sorted(ledger.names) == ["c1", "c3"]


def test_a_sub_run_call_is_a_record_of_the_workflows_path(make):
    world = make()
    ledger = Ledger()

    @lw.workflow(id="member")
    async def member(ctx, input):
        return await ctx.step("m", ledger.fn("m"))

    def orchestrator(calls: tuple[str, ...]) -> Any:
        @lw.workflow(id="orch", version="1")
        async def orch(ctx, input):
            out = [await ctx.call_workflow(name, {}) for name in calls]
            await ctx.wait_for_event("gate", "go")
            return out

        return orch

    from little_workflow.runtime.api import arun_single
    from little_workflow.runtime.memory import pipeline_key
    from little_workflow.runtime.pipeline import Pipeline

    pipeline = Pipeline(workflows={"member": member}, key=pipeline_key([member.definition_hash]))

    def run(calls: tuple[str, ...]) -> Any:
        return asyncio.run(arun_single(orchestrator(calls), {}, world=world, run_id="run_p",
                                       pipeline=pipeline, suspend=True))

    assert run(("member",)).status == "waiting"
    lw.send_event(world, "run_p", "go")
    before = types(world, "run_p")
    with pytest.raises(lw.ReplayDivergenceError) as caught:
        run(())
    assert caught.value.log_step_path == "call-0-member"
    assert types(world, "run_p") == before + ["run.started"]
    assert run(("member",)).output == ["M"] and ledger.names == ["m"]


def test_what_code_unwinding_from_a_suspended_wait_recorded_need_not_be_asked_for(make):
    """suspend=True stops a run by raising through its body: a `finally` there may record
    a step after the wait began (an agent framework cancelling a polled job). A later
    execution that gets past the wait does not ask for it, and must not diverge."""
    world = make()
    ledger = Ledger()

    @lw.workflow(id="unwinds", version="1")
    async def wf(ctx, input):
        await ctx.step("a", ledger.fn("a"))
        try:
            got = await ctx.wait_for_event("w", "go")
        except BaseException:
            await ctx.step("cleanup", ledger.fn("cleanup"))
            raise
        return got

    waiting_run(world, wf, "run_u")
    waiting_run(world, wf, "run_u")  # suspended again: the cleanup step is served
    lw.send_event(world, "run_u", "go", 3)
    assert lw.run_workflow(wf, {}, world=world, run_id="run_u").output == 3
    assert ledger.names == ["a", "cleanup"]
