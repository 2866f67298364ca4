"""Values keep their types (DESIGN §16).

What a step returns to workflow code is the object its function's annotation promises,
the same on the first run, on resume (served from storage, read by a fresh World) and on
replay; storage holds plain JSON (no pickle, no type tags). The same for the workflow's
input and output, `ctx.parallel`, `ctx.wait_for_event(..., type=T)` and `lw.send_event`
payloads, and values spilled to artifacts. A value that does not fit its annotation is
a `StepError` naming the step and the type, recorded as `step.failed`, not retried.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import os
import subprocess
import sys
import typing
import uuid
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any, Optional, Union

import pytest
import typing_extensions
from checkout import SRC
from click.testing import CliRunner
from conftest import WorldMaker
from pydantic import BaseModel, ConfigDict, Field

import little_workflow as lw
from little_workflow.cli import cli

LIMIT = 64 * 1024


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Order(BaseModel):
    # A model's own config decides how its bytes are stored (pydantic reuses its serializer).
    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")
    item: str
    qty: int
    placed: datetime
    tags: set[str] = set()
    blob: bytes = b""


@dataclasses.dataclass
class Point:
    x: int
    y: float
    label: str


class Movie(typing_extensions.TypedDict):
    title: str
    year: int


class Basket(BaseModel):
    orders: list[Order]
    by_color: dict[str, tuple[Point, Color]]
    note: Optional[str] = None


AT = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=timezone.utc)
ORDER = Order(item="tea", qty=2, placed=AT, tags={"green", "black", "oolong"}, blob=b"\x00\xffok")

#: (name, annotation, value): every kind of value DESIGN §16 lists.
CASES: list[tuple[str, Any, Any]] = [
    ("model", Order, ORDER),
    ("dataclass", Point, Point(1, 2.5, "p")),
    ("typeddict", Movie, Movie(title="Alien", year=1979)),
    ("tuple", tuple[int, str, datetime], (1, "a", AT)),
    ("datetime", datetime, AT),
    ("date", date, date(2026, 2, 28)),
    ("time", time, time(12, 30, 15, 250)),
    ("timedelta", timedelta, timedelta(days=1, seconds=5, microseconds=7)),
    ("uuid", uuid.UUID, uuid.UUID("12345678-1234-5678-1234-567812345678")),
    ("decimal", Decimal, Decimal("1.10")),
    ("enum", Color, Color.BLUE),
    ("bytes", bytes, b"\x00\x01\xfe\xffbinary"),
    ("set", set[str], {"pear", "apple", "fig", "kiwi"}),
    ("frozenset", frozenset[int], frozenset({30, 1, 200})),
    ("optional-value", Optional[Order], ORDER),
    ("optional-none", Optional[Order], None),
    ("union", Union[Point, Color], Color.RED),
    ("nested", Basket, Basket(orders=[ORDER], by_color={"c": (Point(0, 0.5, "o"), Color.RED)})),
    ("list-of-tuples", list[tuple[Decimal, uuid.UUID]],
     [(Decimal("2.5"), uuid.UUID(int=7)), (Decimal("-1"), uuid.UUID(int=8))]),
]


def same_types(a: Any, b: Any) -> bool:
    """`a == b` and every part of `a` has the type of the same part of `b`."""
    if type(a) is not type(b) or a != b:
        return False
    if isinstance(a, BaseModel):
        return all(same_types(getattr(a, f), getattr(b, f)) for f in type(a).model_fields)
    if dataclasses.is_dataclass(a):
        return all(same_types(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, dict):
        return all(same_types(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return all(same_types(x, y) for x, y in zip(a, b, strict=True))
    return True


def annotated(fn: Any, annotation: Any) -> Any:
    fn.__annotations__["return"] = annotation
    return fn


@pytest.fixture(params=["memory", "local_world"])
def maker(request, tmp_path) -> WorldMaker:
    return WorldMaker(request.param, tmp_path, request)


@pytest.mark.parametrize("name,annotation,value", CASES, ids=[c[0] for c in CASES])
def test_a_step_returns_its_annotated_type_on_first_run_resume_and_replay(
        maker, name, annotation, value):
    world = maker()
    seen: list[Any] = []
    calls = []

    def make() -> Any:
        calls.append(1)
        return value

    annotated(make, annotation)

    @lw.workflow(id="typed-step")
    async def wf(ctx, input):
        seen.append(await ctx.step("make", make))
        await ctx.wait_for_event("go", "go")
        return None

    assert lw.run_workflow(wf, {}, world=world, run_id="run_t", suspend=True).status == "waiting"
    world = maker.reopen()  # the resume reads the value from storage, as a new process would
    lw.send_event(world, "run_t", "go", None)
    assert lw.run_workflow(wf, {}, world=world, run_id="run_t").status == "completed"
    assert lw.replay_run(world, "run_t", wf).status == "completed"
    assert len(calls) == 1 and len(seen) == 3
    for phase, got in zip(("first run", "resume", "replay"), seen, strict=True):
        assert same_types(got, value), (phase, got, value)


def test_stored_values_are_plain_json(memory_world):
    world = memory_world

    def make() -> Order:
        return ORDER

    @lw.workflow(id="plain-store")
    async def wf(ctx, input):
        return await ctx.step("order", make)

    lw.run_workflow(wf, {}, world=world, run_id="run_plain")
    event = next(e for e in world.list_events("run_plain") if e.type == "step.succeeded")
    stored = json.loads(json.dumps(event.payload["output"]))
    assert stored == {"item": "tea", "qty": 2, "placed": "2026-01-02T03:04:05.123456Z",
                      "tags": ["black", "green", "oolong"],  # sorted
                      "blob": "AP9vaw=="}  # base64 (URL-safe alphabet)
    done = next(e for e in world.list_events("run_plain") if e.type == "run.completed")
    assert done.payload["output"] == stored


def _sets_stored_by(seed: str, tmp_path) -> str:
    script = (
        "import json, little_workflow as lw\n"
        "def tags() -> set[str]:\n"
        "    return {'pear', 'apple', 'fig', 'kiwi', 'plum', 'lime', 'date', 'yuzu'}\n"
        "def nested() -> dict[str, frozenset[str]]:\n"
        "    return {'k': frozenset({'b', 'a', 'c', 'd', 'e'})}\n"
        "@lw.workflow(id='sets')\n"
        "async def wf(ctx, input):\n"
        "    await ctx.step('tags', tags)\n"
        "    await ctx.step('nested', nested)\n"
        f"world = lw.local_world({str(tmp_path / seed)!r})\n"
        "lw.run_workflow(wf, {}, world=world, run_id='run_sets')\n"
        "print(json.dumps([[e.payload.get('output'), e.request_digest] for e in "
        "world.list_events('run_sets') if e.type == 'step.succeeded']))\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONHASHSEED": seed}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_sets_are_stored_sorted_so_digests_agree_across_processes(tmp_path):
    outputs = {_sets_stored_by(seed, tmp_path) for seed in ("1", "2", "3", "4")}
    assert len(outputs) == 1, outputs
    (tags, _), (nested, _) = json.loads(outputs.pop())
    assert tags == sorted(tags) and nested == {"k": ["a", "b", "c", "d", "e"]}


def test_little_events_shows_stored_values_readably(tmp_path):
    data_dir = str(tmp_path / "data")
    world = lw.local_world(data_dir)

    def make() -> Order:
        return ORDER

    @lw.workflow(id="shown")
    async def wf(ctx, input):
        return await ctx.step("order", make)

    lw.run_workflow(wf, {}, world=world, run_id="run_shown")
    world.close()
    r = CliRunner().invoke(cli, ["events", "run_shown", "--data-dir", data_dir, "--json"])
    assert r.exit_code == 0, r.output
    events = json.loads(r.output)
    succeeded = next(e for e in events if e["type"] == "step.succeeded")
    assert succeeded["payload"]["output"]["placed"] == "2026-01-02T03:04:05.123456Z"
    assert succeeded["payload"]["output"]["tags"] == ["black", "green", "oolong"]


def test_partial_uses_its_functions_annotation_and_async_its_awaited_type(memory_world):
    def at(day: int, hour: int) -> datetime:
        return datetime(2026, 3, day, hour, tzinfo=timezone.utc)

    async def later(d: datetime) -> tuple[datetime, Color]:
        return d + timedelta(hours=1), Color.RED

    seen = []

    @lw.workflow(id="partial-async")
    async def wf(ctx, input):
        d = await ctx.step("at", functools.partial(at, 3), 4)
        pair = await ctx.step("later", later, d)
        both = await ctx.parallel("p", [functools.partial(at, 1, 2), functools.partial(later, d)])
        seen.append((d, pair, both))
        return None

    lw.run_workflow(wf, {}, world=memory_world, run_id="run_pa")
    lw.replay_run(memory_world, "run_pa", wf)
    for d, pair, both in seen:
        assert type(d) is datetime and type(pair) is tuple and pair[1] is Color.RED
        assert type(both[0]) is datetime and type(both[1]) is tuple and both[1][1] is Color.RED


class Receipt(BaseModel):
    total: Decimal
    order: Order


def test_unannotated_any_and_refused_annotations_get_plain_json(memory_world):
    class OldStyle(typing.TypedDict):  # pydantic refuses typing.TypedDict before 3.12
        a: int

    def unannotated():
        return Receipt(total=Decimal("3"), order=ORDER)

    def anything() -> Any:
        return {"a": [1, 2]}

    def old_style() -> OldStyle:
        return {"a": 1}

    def unresolvable() -> "NoSuchType":  # type: ignore[name-defined]  # noqa: F821
        return {"b": 2}

    seen = []

    @lw.workflow(id="plain")
    async def wf(ctx, input):
        seen.append([await ctx.step("u", unannotated), await ctx.step("a", anything),
                     await ctx.step("o", old_style), await ctx.step("n", unresolvable),
                     await ctx.step("lambda", lambda: [3])])
        return None

    lw.run_workflow(wf, {}, world=memory_world, run_id="run_plain_json")
    lw.replay_run(memory_world, "run_plain_json", wf)
    want = [{"total": "3", "order": {"item": "tea", "qty": 2, "placed": "2026-01-02T03:04:05.123456Z",
                                     "tags": ["black", "green", "oolong"], "blob": "AP9vaw=="}},
            {"a": [1, 2]}, {"a": 1}, {"b": 2}, [3]]
    if sys.version_info >= (3, 12):
        want[2] = {"a": 1}  # accepted by pydantic there: still a dict
    assert seen == [want, want]


@pytest.mark.parametrize("annotation,value,type_name", [
    (int, "not a number", "int"),
    (Order, 5, "Order"),
    (datetime, object(), "datetime"),
    (tuple[int, int], (1, 2, 3), "tuple[int, int]"),
])
def test_a_value_that_does_not_fit_is_a_step_error_recorded_as_failed_not_retried(
        memory_world, annotation, value, type_name):
    calls = []

    def make() -> Any:
        calls.append(1)
        return value

    annotated(make, annotation)

    @lw.workflow(id="misfit")
    async def wf(ctx, input):
        return await ctx.step("make", make, retry=lw.Retry(max_attempts=3, backoff=0))

    with pytest.raises(lw.WorkflowFailedError) as info:
        lw.run_workflow(wf, {}, world=memory_world, run_id="run_misfit")
    assert len(calls) == 1, "not retried"
    events = memory_world.list_events("run_misfit")
    assert not [e for e in events if e.type == "step.succeeded"]
    failed = [e for e in events if e.type == "step.failed"]
    assert len(failed) == 1 and failed[0].payload["willRetry"] is False
    error = failed[0].payload["error"]
    assert error["type"] == "StepError", error
    assert "'make'" in error["message"] and type_name in error["message"], error
    assert isinstance(info.value.cause, lw.StepFailedError)
    assert isinstance(info.value.cause.__cause__, lw.StepError)
    assert events[-1].type == "run.failed"


def test_workflow_input_and_output_keep_their_types(maker):
    world = maker()
    seen = []

    @lw.workflow(id="typed-io", input_schema={"type": "object", "required": ["item"]})
    async def wf(ctx: lw.RunContext, input: Order) -> Receipt:
        seen.append(input)
        return Receipt(total=Decimal(input.qty) * Decimal("1.5"), order=input)

    first = lw.run_workflow(wf, ORDER, world=world, run_id="run_io")
    want = Receipt(total=Decimal("3.0"), order=ORDER)
    assert same_types(first.output, want)
    world = maker.reopen()
    again = lw.run_workflow(wf, ORDER, world=world, run_id="run_io")  # the stored result
    assert same_types(again.output, want)
    assert same_types(lw.replay_run(world, "run_io", wf).output, want)
    # The same input given as its JSON is the same input.
    as_json = ORDER.model_dump(mode="json")
    assert same_types(lw.run_workflow(wf, as_json, world=world, run_id="run_io").output, want)
    assert all(same_types(s, ORDER) for s in seen) and len(seen) == 2  # first run, replay
    created = world.list_events("run_io")[0]
    assert created.payload["input"]["tags"] == ["black", "green", "oolong"]
    completed = next(e for e in world.list_events("run_io") if e.type == "run.completed")
    assert completed.payload["output"]["total"] == "3.0"
    state = lw.materialize_run_state(world, "run_io")
    assert state.output["order"]["item"] == "tea"  # the state view stays JSON
    with pytest.raises(lw.SchemaValidationError) as bad:
        lw.run_workflow(wf, {"item": "tea", "qty": "many"}, world=world, run_id="run_io_bad")
    assert "Order" in str(bad.value) and "qty" in str(bad.value)
    assert world.list_events("run_io_bad") == []


def test_parallel_results_keep_their_types(memory_world):
    def when(i: int) -> datetime:
        return AT + timedelta(days=i)

    async def point(i: int) -> Point:
        return Point(i, i / 2, str(i))

    seen = []

    @lw.workflow(id="par")
    async def wf(ctx, input):
        seen.append(await ctx.parallel("p", [functools.partial(when, 1), functools.partial(point, 2),
                                             lambda: {"plain": True}], max_concurrency=2))
        return None

    lw.run_workflow(wf, {}, world=memory_world, run_id="run_par")
    lw.replay_run(memory_world, "run_par", wf)
    want = [AT + timedelta(days=1), Point(2, 1.0, "2"), {"plain": True}]
    assert len(seen) == 2 and all(same_types(s, want) for s in seen)


class Approval(BaseModel):
    ok: bool
    by: str
    at: datetime


@dataclasses.dataclass
class Note:
    text: str
    when: date


def test_wait_for_event_decodes_the_payload_to_its_type_and_send_event_encodes(maker):
    world = maker()
    seen = []

    @lw.workflow(id="approve-typed")
    async def wf(ctx, input):
        approval = await ctx.wait_for_event("a", "approval", type=Approval)
        note = await ctx.wait_for_event("n", "note", type=Note)
        raw = await ctx.wait_for_event("r", "approval")  # no type: plain JSON
        missing = await ctx.wait_for_event("m", "never", timeout=0, type=Approval)
        seen.append((approval, note, raw, missing))
        return None

    approval = Approval(ok=True, by="ada", at=AT)
    lw.start_workflow(wf, {}, world=world, run_id="run_ev")
    lw.send_event(world, "run_ev", "approval", approval)  # a model, encoded on the way in
    lw.send_event(world, "run_ev", "note", Note("hi", date(2026, 5, 1)))  # a dataclass
    lw.send_event(world, "run_ev", "approval", approval)
    stored = [e.payload["payload"] for e in world.list_events("run_ev") if e.type == "signal.received"]
    assert stored[0] == {"ok": True, "by": "ada", "at": "2026-01-02T03:04:05.123456Z"}
    assert stored[1] == {"text": "hi", "when": "2026-05-01"}
    lw.run_workflow(wf, {}, world=world, run_id="run_ev")
    lw.replay_run(maker.reopen(), "run_ev", wf)
    want = (approval, Note("hi", date(2026, 5, 1)),
            {"ok": True, "by": "ada", "at": "2026-01-02T03:04:05.123456Z"}, None)
    assert len(seen) == 2 and all(same_types(s, want) for s in seen), seen


def test_an_event_payload_that_does_not_fit_fails_the_run_naming_the_wait_and_type(memory_world):
    @lw.workflow(id="approve-misfit")
    async def wf(ctx, input):
        return await ctx.wait_for_event("a", "approval", type=Approval)

    lw.start_workflow(wf, {}, world=memory_world, run_id="run_evbad")
    lw.send_event(memory_world, "run_evbad", "approval", {"ok": "perhaps"})
    with pytest.raises(lw.WorkflowFailedError) as info:
        lw.run_workflow(wf, {}, world=memory_world, run_id="run_evbad")
    assert "'a'" in str(info.value) and "Approval" in str(info.value)
    types = [e.type for e in memory_world.list_events("run_evbad")]
    assert "wait.completed" not in types and types[-1] == "run.failed"


def test_send_event_refuses_a_payload_it_cannot_encode(memory_world):
    @lw.workflow(id="waits")
    async def wf(ctx, input):
        return await ctx.wait_for_event("a", "x")

    lw.start_workflow(wf, {}, world=memory_world, run_id="run_sendbad")
    with pytest.raises(TypeError) as info:
        lw.send_event(memory_world, "run_sendbad", "x", {"f": object()})
    assert "run_sendbad" in str(info.value) and "object" in str(info.value)
    # Sets are sorted on the way in, so the same payload is the same request everywhere.
    lw.send_event(memory_world, "run_sendbad", "x", {"s": {"b", "a", "c"}}, idempotency_key="k")
    lw.send_event(memory_world, "run_sendbad", "x", {"s": {"c", "b", "a"}}, idempotency_key="k")
    sent = [e for e in memory_world.list_events("run_sendbad") if e.type == "signal.received"]
    assert len(sent) == 1 and sent[0].payload["payload"] == {"s": ["a", "b", "c"]}


class Big(BaseModel):
    text: str
    when: datetime
    tags: frozenset[str]


def test_spilled_values_keep_their_types(maker):
    world = maker()
    big = Big(text="x" * (LIMIT + 10), when=AT, tags=frozenset({"b", "a"}))
    seen = []

    def make() -> Big:
        return big

    @lw.workflow(id="spill")
    async def wf(ctx: lw.RunContext, input: Big) -> Big:
        out = await ctx.step("make", make)
        got = await ctx.wait_for_event("w", "big", type=Big)
        seen.append((input, out, got))
        return out

    lw.start_workflow(wf, big, world=world, run_id="run_spill")
    lw.send_event(world, "run_spill", "big", big)
    first = lw.run_workflow(wf, big, world=world, run_id="run_spill")
    world = maker.reopen()
    stored = lw.run_workflow(wf, big, world=world, run_id="run_spill")
    replayed = lw.replay_run(world, "run_spill", wf)
    events = world.list_events("run_spill")
    assert "outputRef" in next(e for e in events if e.type == "step.succeeded").payload
    assert "outputRef" in next(e for e in events if e.type == "run.completed").payload
    for result in (first, stored, replayed):
        assert same_types(result.output, big)
    assert len(seen) == 2 and all(same_types(part, big) for s in seen for part in s)


def test_a_stored_value_that_no_longer_fits_is_a_divergence_naming_step_and_type(memory_world):
    def count() -> int:
        return 3

    def count_v2() -> Order:  # the code changed: same step, another type
        return ORDER

    # One version: the new code declares it continues the old runs (else it is refused
    # before it runs: WorkflowVersionError), so the resume reaches the stored value.
    @lw.workflow(id="changes", version="1")
    async def v1(ctx, input):
        await ctx.step("count", count)
        await ctx.wait_for_event("go", "go")

    @lw.workflow(id="changes", version="1")
    async def v2(ctx, input):
        await ctx.step("count", count_v2)
        await ctx.wait_for_event("go", "go")

    assert lw.run_workflow(v1, {}, world=memory_world, run_id="run_chg", suspend=True).status == "waiting"
    with pytest.raises(lw.ReplayDivergenceError) as info:
        lw.replay_run(memory_world, "run_chg", v2)
    assert info.value.step_path == "count" and "Order" in str(info.value)
    lw.send_event(memory_world, "run_chg", "go", None)
    with pytest.raises((lw.ReplayDivergenceError, lw.WorkflowFailedError)) as info2:
        lw.run_workflow(v2, {}, world=memory_world, run_id="run_chg")
    err = info2.value
    divergence = err if isinstance(err, lw.ReplayDivergenceError) else err.cause
    assert isinstance(divergence, lw.ReplayDivergenceError), err
    assert divergence.step_path == "count" and "Order" in str(divergence)


def test_now_and_uuid_keep_their_types(memory_world):
    seen = []

    @lw.workflow(id="recorded")
    async def wf(ctx, input):
        seen.append((ctx.now(), ctx.uuid()))
        await ctx.wait_for_event("go", "go")

    lw.run_workflow(wf, {}, world=memory_world, run_id="run_rec", suspend=True)
    lw.send_event(memory_world, "run_rec", "go", None)
    lw.run_workflow(wf, {}, world=memory_world, run_id="run_rec")
    lw.replay_run(memory_world, "run_rec", wf)
    assert len(seen) == 3 and len(set(seen)) == 1
    assert type(seen[0][0]) is datetime and type(seen[0][1]) is uuid.UUID


class Member(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    n: int
    when: datetime = Field(alias="whenAt")


def test_pipelines_hand_typed_outputs_on_and_store_json(memory_world):
    calls = []

    @lw.workflow(id="member")
    async def member(ctx: lw.RunContext, input: Member) -> Member:
        calls.append(input)
        return Member(n=input.n + 1, when=input.when + timedelta(days=1))

    seen = []
    crash = {"left": 1}

    async def orchestrator(ctx: lw.RunContext, input: dict[str, Any]) -> Any:
        out = await ctx.call_workflow("member", Member(n=1, when=AT))
        seen.append(out)
        if crash["left"]:
            crash["left"] -= 1
            raise KeyboardInterrupt  # the process dies after the sub-run: resumed below
        return {"n": out.n}

    with pytest.raises(KeyboardInterrupt):
        lw.run_pipeline([member], {}, orchestrator=orchestrator, world=memory_world,
                        run_id="run_pipe")
    result = lw.run_pipeline([member], {}, orchestrator=orchestrator, world=memory_world,
                             run_id="run_pipe")
    assert result.output == {"n": 2}
    want = Member(n=2, when=AT + timedelta(days=1))
    assert len(seen) == 2 and all(same_types(s, want) for s in seen), seen
    assert len(calls) == 1 and same_types(calls[0], Member(n=1, when=AT))
    events = memory_world.list_events("run_pipe")
    started = next(e for e in events if e.type == "harness.tool_call.started")
    assert started.payload["args"]["input"] == {"n": 1, "whenAt": "2026-01-02T03:04:05.123456Z"}
    succeeded = next(e for e in events if e.type == "harness.tool_call.succeeded")
    assert succeeded.payload["result"]["output"] == {"n": 2, "whenAt": "2026-01-03T03:04:05.123456Z"}


class Grade(BaseModel):
    score: Decimal
    at: datetime


def test_outer_loops_give_the_supervisor_typed_values_and_keep_manifests_json(memory_world):
    @lw.workflow(id="grader")
    async def grader(ctx: lw.RunContext, input: Grade) -> Grade:
        return Grade(score=input.score + 1, at=input.at + timedelta(hours=1))

    seen = []

    def supervise(cycle: Any, history: list[Any]) -> lw.Done[Grade] | lw.Continue[Grade]:
        seen.append((cycle["input"], cycle["output"], [h["output"] for h in history]))
        out = cycle["output"]
        return lw.Done(out) if out.score >= 3 else lw.Continue(out)

    start = Grade(score=Decimal("1"), at=AT)
    r = lw.run_workflow(grader, start, world=memory_world, max_outer_cycles=5, supervise=supervise,
                        outer_loop_id="grading")
    want = Grade(score=Decimal("3"), at=AT + timedelta(hours=2))
    assert same_types(r.output, want) and r.result_kind == "done"
    assert same_types(seen[0][0], start) and same_types(seen[1][2][0], seen[0][1])
    assert all(type(s[1]) is Grade for s in seen)
    m = memory_world.read_document("outer-loops/grading.json")
    assert m["result"]["finalOutput"] == {"score": "3", "at": "2026-01-02T05:04:05.123456Z"}
    assert m["cycles"][0]["output"] == {"score": "2", "at": "2026-01-02T04:04:05.123456Z"}
    again = lw.run_workflow(grader, start, world=memory_world, max_outer_cycles=5,
                            supervise=supervise, outer_loop_id="grading")
    assert same_types(again.output, want)


def test_little_run_prints_a_typed_output_as_json(tmp_path):
    (tmp_path / "typedflow.py").write_text(
        "from datetime import datetime, timezone\n"
        "from pydantic import BaseModel\n"
        "import little_workflow as lw\n"
        "class Out(BaseModel):\n"
        "    model_config = {'ser_json_bytes': 'base64', 'val_json_bytes': 'base64'}\n"
        "    at: datetime\n"
        "    tags: set[str]\n"
        "    blob: bytes\n"
        "@lw.workflow(id='typedflow')\n"
        "async def flow(ctx: lw.RunContext, input: dict[str, int]) -> Out:\n"
        "    return Out(at=datetime(2026, 1, 1, tzinfo=timezone.utc), tags={'b', 'a'},\n"
        "               blob=b'\\xff')\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{SRC}"}
    for extra in ([], ["--json"]):
        r = subprocess.run([sys.executable, "-m", "little_workflow.cli", "run", "typedflow:flow",
                            "--input", '{"n": 1}', "--run-id", "run_cli_typed",
                            "--data-dir", str(tmp_path / "d"), *extra],
                           capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        text = r.stdout if extra else r.stdout.split("\n", 1)[1]
        doc = json.loads(text)
        out = doc["output"] if extra else doc
        assert out == {"at": "2026-01-01T00:00:00Z", "tags": ["a", "b"], "blob": "_w=="}, r.stdout


class Plain(BaseModel):  # no bytes config: pydantic's default, UTF-8 text
    blob: bytes


@dataclasses.dataclass
class Packet:
    blob: bytes


def test_bytes_are_base64_except_where_a_models_own_config_says_otherwise(memory_world):
    def raw() -> bytes:
        return b"\x00\xff"

    def packet() -> Packet:
        return Packet(b"\x00\xff")

    def text_model() -> Plain:
        return Plain(blob=b"caf\xc3\xa9")

    def binary_model() -> Plain:
        return Plain(blob=b"\xff")

    seen = []

    @lw.workflow(id="bytes")
    async def wf(ctx, input):
        seen.append([await ctx.step("raw", raw), await ctx.step("packet", packet),
                     await ctx.step("text", text_model)])
        return await ctx.step("binary", binary_model)

    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(wf, {}, world=memory_world, run_id="run_bytes")
    assert seen == [[b"\x00\xff", Packet(b"\x00\xff"), Plain(blob=b"caf\xc3\xa9")]]
    outputs = {e.payload["stepPath"]: e.payload.get("output") for e in
               memory_world.list_events("run_bytes") if e.type == "step.succeeded"}
    assert outputs == {"raw": "AP8=", "packet": {"blob": "AP8="}, "text": {"blob": "café"}}
    failed = next(e for e in memory_world.list_events("run_bytes") if e.type == "step.failed")
    message = failed.payload["error"]["message"]
    assert "'binary'" in message and "Plain" in message and "ser_json_bytes" in message, message


class Clock:
    def __init__(self, day: int):
        self.day = day

    def today(self) -> date:
        return date(2026, 4, self.day)

    def __call__(self) -> date:
        return date(2026, 5, self.day)


def test_methods_and_callable_objects_use_their_annotations(memory_world):
    clock = Clock(7)
    seen = []

    @lw.workflow(id="methods")
    async def wf(ctx, input):
        seen.append((await ctx.step("method", clock.today), await ctx.step("object", clock),
                     await ctx.step("class", functools.partial(Point, 1, 2.0), "made")))
        return None

    lw.run_workflow(wf, {}, world=memory_world, run_id="run_methods")
    lw.replay_run(memory_world, "run_methods", wf)
    want = (date(2026, 4, 7), date(2026, 5, 7), Point(1, 2.0, "made"))
    assert len(seen) == 2 and all(same_types(s, want) for s in seen)


def test_a_worker_runs_a_typed_workflow_from_its_stored_input(maker):
    world = maker()
    seen = []

    @lw.workflow(id="typed-worker")
    async def wf(ctx: lw.RunContext, input: Order) -> Receipt:
        seen.append(input)
        return Receipt(total=Decimal(input.qty), order=input)

    lw.start_workflow(wf, ORDER, world=world, run_id="run_wk")
    lw.Worker(world, workflows=[wf]).run_until_idle()
    assert lw.materialize_run_state(world, "run_wk").status == "completed"
    assert len(seen) == 1 and same_types(seen[0], ORDER)
    result = lw.run_workflow(wf, ORDER, world=world, run_id="run_wk")  # the stored result
    assert same_types(result.output, Receipt(total=Decimal(2), order=ORDER))


def test_codecs_are_built_once_per_function_and_annotation():
    from little_workflow.runtime.codec import PLAIN, codec_for, input_codec, return_codec

    def make(n: int) -> tuple[int, datetime]:
        return n, AT

    async def flow(ctx: Any, input: Order) -> Basket:
        raise NotImplementedError

    assert return_codec(make) is return_codec(functools.partial(make, 1)) is return_codec(make)
    assert codec_for(tuple[int, datetime]) is return_codec(make)
    assert input_codec(flow) is codec_for(Order) and return_codec(flow) is codec_for(Basket)
    assert return_codec(lambda: 1) is PLAIN and codec_for(Any) is PLAIN
