"""Outer loops: run a workflow cycle after cycle under a supervisor.

Each cycle is one run. The manifest `outer-loops/<id>.json` is replaced atomically after
every `outer_loop.cycle_completed` (appended to that cycle's run). `pendingCycleRunId` is
set before a cycle starts and cleared after the supervisor decides, so a crash mid-cycle
resumes that same run without re-running its completed steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Generic, TypeVar, Union

from pydantic.alias_generators import to_camel

from ..errors import InputMismatchError, RunLockedError, WorkflowFailedError
from ..world.ids import content_hash, sha256_hex, validate_name
from ..world.models import thaw
from ..world.protocol import WorldLike
from .codec import ValueCodecError, input_codec, return_codec
from .runner import arun_single, input_json, offload
from .state import RunResult
from .values import output_json, stored_value
from .workflow import Workflow

In = TypeVar("In")
Out = TypeVar("Out")


@dataclass(frozen=True)
class Done(Generic[Out]):
    """The supervisor's "stop": `final_output` becomes the outer loop's output."""

    final_output: Out = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Continue(Generic[In]):
    """The supervisor's "go on": `next_input` is the next cycle's input."""

    next_input: In = None  # type: ignore[assignment]


@contextlib.asynccontextmanager
async def _fenced(world: WorldLike, outer_loop_id: str) -> AsyncIterator[None]:
    """Callers sharing an outer-loop id take turns: wait for the fence, then go on."""
    delay = 0.01
    while True:
        try:
            with world.fence_lock(outer_loop_id):
                yield
                return
        except RunLockedError as e:
            if e.run_id != outer_loop_id:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)


def _manifest_path(outer_loop_id: str) -> str:
    return f"outer-loops/{outer_loop_id}.json"


def _cycle_run_id(outer_loop_id: str, cycle: int) -> str:
    return f"run_ol_{sha256_hex(outer_loop_id)[:16]}_{cycle}"


class CycleRecord(dict):  # type: ignore[type-arg]
    """A cycle as the supervisor sees it: a dict with the manifest's camelCase keys
    (`cycle["output"]`), also readable as attributes (`cycle.output`, `cycle.cycle_number`)."""

    def __getattr__(self, name: str) -> Any:
        for key in (name, to_camel(name)):
            if key in self:
                return self[key]
        raise AttributeError(name)


#: `supervise(cycle, history)` for a `Workflow[In, Out]`, sync or async. (In comes first
#: in the alias, so `Supervisor[In, Out]` binds them in that order.)
Supervisor = Callable[["CycleRecord", list["CycleRecord"]],
                      Union[Continue[In], Done[Out], Awaitable[Union[Continue[In], Done[Out]]]]]


def _typed(codec: Any, stored: Any) -> Any:
    """A cycle's input or output as the supervisor sees it: typed by the workflow's
    annotations when it fits them; the manifest keeps the JSON."""
    if stored is None or codec.plain:
        return stored
    try:
        return codec.decode(stored)
    except ValueCodecError:
        return stored  # a value of the supervisor's own shape (`Done(...)`), kept as JSON


async def _decide(wf: Workflow[Any, Any], supervise: Callable[..., Any], cycle: dict[str, Any],
                  history: list[dict[str, Any]]) -> Any:
    inputs, outputs = input_codec(wf.fn), return_codec(wf.fn)

    def typed(c: dict[str, Any]) -> CycleRecord:
        record = CycleRecord(c, output=_typed(outputs, c.get("output")))
        if "input" in c:
            record["input"] = _typed(inputs, c["input"])
        return record

    decision = supervise(typed(cycle), [typed(c) for c in history])
    if inspect.isawaitable(decision):
        decision = await decision
    if not isinstance(decision, (Done, Continue)):
        raise TypeError(f"supervise must return lw.Done(...) or lw.Continue(...), not {decision!r}")
    return decision


async def arun_outer_loop(
    wf: Workflow[Any, Any],
    input: Any,
    *,
    world: WorldLike,
    max_outer_cycles: int | None,
    supervise: Callable[..., Any] | None,
    outer_loop_id: str | None,
) -> RunResult[Any]:
    if not max_outer_cycles or max_outer_cycles < 1:
        raise ValueError("max_outer_cycles must be a positive integer for an outer loop")
    if supervise is None:
        raise ValueError("an outer loop needs supervise=fn(cycle, history) -> Done | Continue")
    value = input_json(wf, input, outer_loop_id or "outer loop")
    outputs = return_codec(wf.fn)
    input_hash = content_hash(value)
    if outer_loop_id is None:
        outer_loop_id = "ol_" + sha256_hex(wf.definition_hash + input_hash)[:16]
    validate_name("outer loop id", outer_loop_id)
    path = _manifest_path(outer_loop_id)
    async with _fenced(world, outer_loop_id):
        manifest = await offload(world, world.read_document, path) or {
            "outerLoopId": outer_loop_id,
            "goal": {"workflowDefinitionHash": wf.definition_hash,
                     "description": (inspect.getdoc(wf.fn) or wf.id).strip()},
            "maxCycles": max_outer_cycles,
            "inputHash": input_hash,
            "cycles": [],
            "pendingCycleRunId": None,
            "result": None,
        }
        if manifest["inputHash"] != input_hash:
            raise InputMismatchError(outer_loop_id, manifest["inputHash"], input_hash)

        def finished() -> RunResult[Any]:
            result = manifest["result"]
            last = manifest["cycles"][-1] if manifest["cycles"] else {}
            return RunResult(run_id=last.get("runId", ""), status="completed",
                             output=_typed(outputs, result.get("finalOutput")), workflow_id=wf.id,
                             outer_loop_id=outer_loop_id, result_kind=result.get("kind"),
                             cycles=manifest["cycles"])

        if manifest.get("result"):
            return finished()
        next_input: Any = _UNSET
        while True:
            cycles: list[dict[str, Any]] = manifest["cycles"]
            number = len(cycles) + 1
            run_id = manifest.get("pendingCycleRunId") or _cycle_run_id(outer_loop_id, number)
            events = await offload(world, world.list_events, run_id)
            if events and events[0].type == "run.created":
                cycle_input = stored_value(world, events[0].payload.get("input"))  # a cycle already started
            elif number == 1:
                cycle_input = value
            elif next_input is not _UNSET:
                cycle_input = next_input
            else:
                # A crash came after the previous cycle's Continue but before this cycle's
                # run was created: ask the (deterministic) supervisor again.
                prev = cycles[-1]
                prev_events = await offload(world, world.list_events, prev["runId"])
                prev_input = (stored_value(world, prev_events[0].payload.get("input"))
                              if prev_events else None)
                decision = await _decide(wf, supervise, {**prev, "input": prev_input}, cycles[:-1])
                cycle_input = decision.next_input if isinstance(decision, Continue) else value
            if manifest.get("pendingCycleRunId") != run_id:
                manifest["pendingCycleRunId"] = run_id
                await offload(world, world.write_document, path, manifest)
            try:
                result = await arun_single(wf, cycle_input, world=world, run_id=run_id)
                # The manifest and the cycle's record hold JSON; the supervisor gets types.
                status, output = "completed", thaw(output_json(wf, result.output))
            except WorkflowFailedError:
                status, output = "failed", None
            cycle = {"cycleNumber": number, "runId": run_id,
                     "workflowVersionId": wf.version_id, "status": status, "output": output}
            decision = await _decide(wf, supervise,
                                     {**cycle, "input": input_json(wf, cycle_input, run_id)},
                                     list(cycles))
            done = isinstance(decision, Done)
            await offload(world, functools.partial(
                world.append_event, run_id, "outer_loop.cycle_completed",
                {"outerLoopId": outer_loop_id, "cycleNumber": number, "status": status,
                 "output": output, "decision": "done" if done else "continue"},
                idempotency_key=f"outer_loop.cycle_completed:{outer_loop_id}:{number}"))
            cycles.append(cycle)
            manifest["pendingCycleRunId"] = None
            if done:
                manifest["result"] = {"kind": "done",
                                      "finalOutput": thaw(output_json(wf, decision.final_output))}
            elif number >= manifest["maxCycles"]:
                manifest["result"] = {"kind": "max_cycles", "finalOutput": output}
            await offload(world, world.write_document, path, manifest)
            if manifest["result"]:
                return finished()
            next_input = decision.next_input


_UNSET: Any = object()
