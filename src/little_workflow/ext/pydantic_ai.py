"""Durable Pydantic AI agents: `LittleWorkflowDurability()`, a Pydantic AI capability.

```python
agent = Agent(model, name="support", tools=[...], capabilities=[LittleWorkflowDurability()])

@lw.workflow(id="answer")
async def answer(ctx, input):
    result = await agent.run(input["question"])    # every model request and tool call a step
    return {"answer": result.output}
```

Inside a workflow body, every model request and tool call of the agent run is a durable
step (`ctx.step`) whose path says which agent run, which turn, and what:

    pydantic-ai/support-1/1/model          the first model request of support's first run
    pydantic-ai/support-1/1/lookup/call_7  the tool call `call_7` that request asked for
    pydantic-ai/support-1/2/model          the next request (turn = Pydantic AI's run step)

`support-1` is the agent's name and the number of its run in this workflow run (in the
order the agent runs start); a tool call is keyed by its tool-call id, never by the order
calls finish in, so concurrent agent runs and parallel tool calls cannot swap results on
resume. A resumed (or replayed) run gets every committed response and tool result from the
log and calls nothing committed again. The agent run id is `<workflow run id>:<label>`
(`run_a1:support-1`, nothing recorded: a resumed run starts its agent runs in the same
order) and its start time comes from `ctx.now()`, so both are the same on resume; waits inside the agent graph (polling a model's background job) are `ctx.sleep`
timers: a resumed run waits only until the committed wake time. A failed model request or
tool call is recorded with its type (name, module, qualified name) and, served from the
log, raises the same class again (`recorded_exception` says what is kept), so a body that
catches by type takes the same branch on resume. Values cross the step boundary as JSON
(Pydantic AI's JSON codec); outputs over 64 KiB go to artifacts as every step output does.

Per tool, through the tool's metadata under `"little_workflow"` (as `"temporal"` is for
Temporal): `False` runs the tool inline in the workflow body, not as a step — as DBOS runs
plain function tools: nothing is recorded, so a resume or replay calls it again (for tools
without side effects, or that make their own steps) — and `{"retry": lw.Retry(...),
"timeout": seconds}` sets that tool's step options. A `FunctionToolset` passed to
`agent.run(toolsets=...)` runs inline the same way; MCP and dynamic toolsets must be given
to the agent when it is built.

Outside a workflow (or inside a step function) the capability does nothing: the agent runs
as it would without it.

Built on Pydantic AI's durable-execution extension point (`BaseDurabilityCapability` with
a `CallableOperationBackend` whose `execute` runs the unit as `ctx.step`), checked against
pydantic-ai-slim 2.68.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from contextlib import nullcontext
from contextvars import ContextVar
from datetime import datetime
from typing import Any, Literal, TypedDict
from weakref import WeakKeyDictionary

try:
    from pydantic_ai import (
        Agent,
        DeferredToolRequests,
        DeferredToolResults,
        ToolApproved,
        ToolDenied,
    )
    from pydantic_ai.agent import EventStreamHandler
    from pydantic_ai.capabilities.abstract import WrapRunHandler
    from pydantic_ai.durable_exec import (
        JSON_CODEC,
        BaseDurabilityCapability,
        CapabilityOperationId,
        DurabilityEngineSpec,
        DurableOperationId,
        EventStreamHandlerId,
        JournalCallableOperationBackend,
        ModelCancelSuspendedResponseId,
        ModelCompactMessagesId,
        ModelRequestId,
        RoleBasedOperationConfig,
        ToolsetCallToolId,
        ToolsetGetInstructionsId,
        ToolsetGetToolsId,
        ToolsetValidateToolArgumentsId,
        conversation_id_from_run_id,
    )
    from pydantic_ai.exceptions import UserError
    from pydantic_ai.messages import AgentStreamEvent
    from pydantic_ai.models import Model
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.tools import AgentDepsT
    from pydantic_ai.tools import RunContext as AgentRunContext
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "little_workflow.ext.pydantic_ai needs Pydantic AI: "
        "pip install 'little-workflow[pydantic-ai]'"
    ) from e

from ..errors import StepFailedError
from ..runtime.approvals import TOOL_APPROVAL
from ..runtime.context import RunContext, current_run
from ..runtime.steps import Retry, current_step_or_none
from ..runtime.telemetry import chat_span, tool_span
from .pydantic_ai_streams import StreamRouting, aagent_events, agent_events

__all__ = ["LittleWorkflowDurability", "STEP_PREFIX", "aagent_events", "agent_events",
           "wait_for_approvals"]

#: The first segment of every step path the capability makes.
STEP_PREFIX = "pydantic-ai"

_SEGMENT = re.compile(r"[A-Za-z0-9_.-]{1,80}")

# The agent run and the stream event being handled: event-handler units carry only the
# event in their cache key, so the run context reaches `execute` this way.
_event_run: ContextVar[tuple[AgentRunContext[Any], AgentStreamEvent] | None] = ContextVar(
    "lw_pydantic_ai_event_run", default=None)


def _segment(text: str) -> str:
    """A step-path segment for an id: itself when it is one, else a stable digest."""
    text = str(text)
    if _SEGMENT.fullmatch(text) and text not in (".", ".."):
        return text
    return "h" + hashlib.sha256(text.encode()).hexdigest()[:24]


def _name_segment(name: str) -> str:
    """A readable step-path segment for an operation name (agent and toolset names may hold
    any character): other characters become '_', plus a digest when anything changed."""
    clean = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60].strip(".") or "op"
    if clean == name:
        return clean
    return f"{clean}.{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def _in_workflow_body() -> RunContext | None:
    """The run whose workflow body (not a step function) is running here, if any."""
    ctx = current_run()
    if ctx is None or current_step_or_none() is not None:
        return None
    return ctx


class _RunPaths:
    """What the capability remembers of each workflow run (held weakly by its RunContext):
    the label of each agent run (`<agent name>-<n>`, numbered per agent name in the order
    the runs start) and how many units used each path key — two units with the same key
    (the same tool listing asked twice in one run step) get `-2`, `-3`… in the order they
    come, which is stable because they belong to one agent run step."""

    def __init__(self) -> None:
        self._labels: WeakKeyDictionary[RunContext, dict[str, str]] = WeakKeyDictionary()
        self._started: WeakKeyDictionary[RunContext, dict[str, int]] = WeakKeyDictionary()
        self._seen: WeakKeyDictionary[RunContext, dict[str, int]] = WeakKeyDictionary()

    def label_new_run(self, ctx: RunContext, agent_name: str) -> str:
        """A label for an agent run starting now: `<agent name>-<n>`."""
        started = self._started.setdefault(ctx, defaultdict(int))
        started[agent_name] += 1
        label = f"{agent_name}-{started[agent_name]}"
        self._labels.setdefault(ctx, {})[f"{ctx.run_id}:{label}"] = label
        return label

    def label(self, ctx: RunContext, run_id: str) -> str:
        """The agent run's label; a run id the caller chose (`agent.run(run_id=...)`) is
        its own label."""
        label = self._labels.get(ctx, {}).get(run_id)
        return label if label is not None else _segment(run_id)

    def path(self, ctx: RunContext, key: str) -> str:
        seen = self._seen.setdefault(ctx, defaultdict(int))
        seen[key] += 1
        n = seen[key]
        return key if n == 1 else f"{key}-{n}"


# One for the process: Pydantic AI builds a backend per request, and a workflow run may
# hold several agents; runs are told apart by their RunContext (held weakly).
_RUN_PATHS = _RunPaths()


class UnitConfig(TypedDict):
    """The step options of one durable unit: `ctx.step(..., retry=, timeout=)`."""

    retry: Retry | None
    timeout: float | None


#: The keys a tool's `"little_workflow"` metadata may hold.
TOOL_CONFIG_KEYS = frozenset(UnitConfig.__annotations__)


def tool_unit_config(tool_name: str, config: Mapping[str, Any]) -> UnitConfig:
    """A tool's step options from its merged metadata: `retry` (an `lw.Retry` or the dict
    of one's fields) and `timeout` (seconds); anything else is a UserError naming the tool."""
    unknown = sorted(set(config) - TOOL_CONFIG_KEYS)
    if unknown:
        raise UserError(
            f"tool {tool_name!r}: little_workflow metadata {unknown[0]!r} is not a step option; "
            f"use {sorted(TOOL_CONFIG_KEYS)} (e.g. {{'retry': lw.Retry(max_attempts=3), "
            f"'timeout': 30}}), or False to run the tool inline")
    retry = config.get("retry")
    if isinstance(retry, Mapping):
        try:
            retry = Retry(**retry)
        except (TypeError, ValueError) as e:
            raise UserError(f"tool {tool_name!r}: little_workflow metadata 'retry': {e}") from None
    if retry is not None and not isinstance(retry, Retry):
        raise UserError(f"tool {tool_name!r}: little_workflow metadata 'retry' is an lw.Retry "
                        f"or a dict of its fields, not {retry!r}")
    timeout = config.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or timeout <= 0):
        raise UserError(f"tool {tool_name!r}: little_workflow metadata 'timeout' is a number of "
                        f"seconds above 0, not {timeout!r}")
    return UnitConfig(retry=retry, timeout=None if timeout is None else float(timeout))


def recorded_exception(error: Mapping[str, Any]) -> Exception | None:
    """The exception a failed unit raised, rebuilt from its log record: same class, same
    `str()`, `args == (message,)`; any attribute the class declares (Pydantic AI's `message`,
    `body`, `model_name`…) is the message for `message` and None otherwise, as their
    values are not recorded. None (the caller keeps the StepFailedError) when the class is
    not an Exception subclass of a module already loaded in this process: the log never
    makes us import code."""
    module = sys.modules.get(str(error.get("module")))
    cls: Any = module
    for part in str(error.get("qualname") or "").split("."):
        cls = getattr(cls, part, None) if part and part != "<locals>" else None
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        return None
    message = str(error.get("message", ""))
    try:
        exc = cls.__new__(cls)
        Exception.__init__(exc, message)
        for klass in reversed(cls.__mro__):
            for name in getattr(klass, "__annotations__", {}):
                if not name.startswith("_"):
                    setattr(exc, name, message if name == "message" else None)
    except (TypeError, AttributeError):
        return None  # a class that cannot be built this way: the StepFailedError says what
    return exc


def _genai_span(ctx: RunContext, operation_id: DurableOperationId,
                cache_key: tuple[object, ...]) -> Any:
    """The OpenTelemetry GenAI span of a model request or tool call (a no-op otherwise)."""
    run = next((v for v in cache_key if isinstance(v, AgentRunContext)), None)
    if isinstance(operation_id, ModelRequestId):
        model = getattr(run, "model", None)
        return chat_span(ctx, operation_id.model_name or getattr(model, "model_name", "unknown"),
                         provider=getattr(model, "system", None))
    if isinstance(operation_id, ToolsetCallToolId) and run is not None and run.tool_name:
        return tool_span(ctx, run.tool_name, call_id=run.tool_call_id)
    return nullcontext()


async def _call_unit(body: Callable[[], Awaitable[object]]) -> object:
    # Unannotated on purpose: the unit's result is already JSON (Pydantic AI's codec), so
    # the step keeps it as plain JSON without looking up a type for each unit.
    return await body()


class LittleWorkflowOperationBackend(JournalCallableOperationBackend[UnitConfig]):
    """Runs each durable unit of an agent run as one `ctx.step` of the enclosing workflow."""

    def __init__(self, *, agent_name: str, default_model_id: str | None,
                 config: RoleBasedOperationConfig[UnitConfig]) -> None:
        super().__init__(agent_name=agent_name, default_model_id=default_model_id, config=config)
        self._default_model_id = default_model_id

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: UnitConfig,
    ) -> object:
        ctx = _in_workflow_body()
        if ctx is None:
            return await body()
        path = _RUN_PATHS.path(ctx, self._path_key(ctx, operation_id, name, cache_key))

        async def traced() -> object:
            with _genai_span(ctx, operation_id, cache_key):
                return await body()

        try:
            return await ctx.step(path, _call_unit, traced, retry=config["retry"],
                                  timeout=config["timeout"])
        except StepFailedError as e:
            # The first execution raises what the model or tool raised (Pydantic AI and the
            # workflow body act on the type); a failure served from the log raises the same
            # class again, so a resumed body takes the same branch.
            if e.__cause__ is not None:
                raise e.__cause__ from None
            again = recorded_exception(e.error)
            if again is None:
                raise
            raise again from e

    def _path_key(self, ctx: RunContext, operation_id: DurableOperationId, name: str,
                  cache_key: tuple[object, ...]) -> str:
        run = next((v for v in cache_key if isinstance(v, AgentRunContext)), None)
        tool_name, tool_call_id = (run.tool_name, run.tool_call_id) if run else (None, None)
        handled = _event_run.get()
        if run is None and handled is not None:
            run, event = handled
            # A tool's call and result events name their call: keyed by it, not by the
            # order parallel tools' events arrive in.
            part = getattr(event, "part", None)
            tool_name = getattr(part, "tool_name", None)
            tool_call_id = getattr(part, "tool_call_id", None)
        if run is None or run.run_id is None:
            return f"{STEP_PREFIX}/{_name_segment(name)}"
        tool_call = f"{_name_segment(tool_name or 'tool')}/{_segment(tool_call_id or '-')}" \
            if tool_call_id else None
        return f"{STEP_PREFIX}/{_RUN_PATHS.label(ctx, run.run_id)}/{run.run_step}/" \
               f"{self._unit_name(operation_id, name, tool_call)}"

    def _model_suffix(self, model_id: str | None) -> str:
        if model_id is None or model_id == self._default_model_id:
            return ""
        return "." + _name_segment(model_id)

    def _unit_name(self, operation_id: DurableOperationId, name: str,
                   tool_call: str | None) -> str:
        """The last part of a unit's path: `model` (`.stream`, `.<model id>` when another
        model than the agent's own), `<tool>/<call id>`, or what the operation is."""
        match operation_id:
            case ModelRequestId(model_id=model_id, streaming=streaming):
                return ("model.stream" if streaming else "model") + self._model_suffix(model_id)
            case ModelCancelSuspendedResponseId(model_id=model_id):
                return "model.cancel" + self._model_suffix(model_id)
            case ModelCompactMessagesId(model_id=model_id):
                return "model.compact" + self._model_suffix(model_id)
            case ToolsetCallToolId():
                return tool_call or "tool/-"
            case ToolsetValidateToolArgumentsId():
                return f"{tool_call or 'tool/-'}.args"
            case EventStreamHandlerId():
                # Numbered by _RunPaths in stream order, which is fixed within one tool call.
                return f"{tool_call}.event" if tool_call else "event"
            case ToolsetGetToolsId(toolset_id=toolset_id):
                return f"tools.{_name_segment(toolset_id)}"
            case ToolsetGetInstructionsId(toolset_id=toolset_id):
                return f"instructions.{_name_segment(toolset_id)}"
            case CapabilityOperationId(capability_id=capability_id, operation=operation):
                return _name_segment(f"{capability_id}.{operation}")
        return _name_segment(name)  # an operation kind newer than this module


class LittleWorkflowDurability(StreamRouting, BaseDurabilityCapability[AgentDepsT]):
    """Makes an agent's model requests and tool calls durable steps of the enclosing
    little-workflow run; transparent outside one.

    Args:
        models: extra models by id, for `agent.run(model=...)` inside a workflow (a `Model`
            instance cannot be rebuilt from the log, so it is looked up by id).
        event_stream_handler: handles the run's events; each tool event is handled in its own
            step, model events live inside the model request's step.
        name: names the agent's steps; defaults to the agent's `name`.
        model_retry / tool_retry: an `lw.Retry` for model-request and tool-call steps.
            Default: no step-level retry (the model client retries requests itself, and a
            tool that wants another try raises `ModelRetry`, which is a result, not an error).
            A tool's own metadata `{"little_workflow": {"retry": ..., "timeout": ...}}`
            overrides them for that tool; `{"little_workflow": False}` runs it inline.
        stream: the key of a run stream the agent's events go to as they happen (text and
            tool-call deltas, tool calls and results, the run's result): read them with
            `agent_events(world, run_id, key)` from any process (pydantic_ai_streams.py).

    Streamed requests (`run_stream`, `iter`, `run_stream_events`) deliver the model's deltas
    inside a durable run as outside one (pydantic_ai_streams.py).
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="little-workflow",
        durable_unit_noun="step",
        durable_unit_plural="steps",
        durable_container_noun="workflow",
        codec=JSON_CODEC,
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        toolset_lifecycles={"function": "enter-always", "mcp": "enter-in-durable-unit",
                            "dynamic": "enter-never"},
        # A function toolset passed at run time bypasses the wrapping: its tools run inline
        # in the workflow body, as DBOS runs them. MCP and dynamic toolsets do I/O to list
        # their tools, which only a step may do, so they must be given to the agent.
        unsupported_runtime_toolset_kinds=frozenset({"mcp", "dynamic"}),
        journal_discovery=True,
        sequential_tools_in_durable_context=False,
        tool_config_key="little_workflow",
    )

    def __init__(
        self,
        *,
        models: Mapping[str, Model] | None = None,
        event_stream_handler: EventStreamHandler[AgentDepsT] | None = None,
        name: str | None = None,
        model_retry: Retry | None = None,
        tool_retry: Retry | None = None,
        stream: str | None = None,
    ) -> None:
        super().__init__(models=models, event_stream_handler=event_stream_handler, name=name)
        self.run_stream_key = stream
        self._model_retry = model_retry
        self._tool_retry = tool_retry

    @property
    def in_durable_context(self) -> bool:
        return _in_workflow_body() is not None

    def get_durable_operation_backend(self) -> LittleWorkflowOperationBackend:
        # Pydantic AI asks for it on every model request and tool listing (callable engines
        # bind per request); it holds only the agent's name, default model and step options,
        # so one per bound capability serves them all. `copy.copy` (Pydantic AI binds a copy
        # per agent, renamed) carries the cached one along: its key tells it is another's.
        key = (self.name, self.default_model_id, self._model_retry, self._tool_retry)
        cached = self.__dict__.get("_lw_backend")
        if cached is not None and cached[0] == key:
            backend: LittleWorkflowOperationBackend = cached[1]
            return backend
        backend = self._build_backend()
        self.__dict__["_lw_backend"] = (key, backend)
        return backend

    def _build_backend(self) -> LittleWorkflowOperationBackend:
        no_options = UnitConfig(retry=None, timeout=None)
        tool_options = UnitConfig(retry=self._tool_retry, timeout=None)
        per_tool = self._build_resolve_tool_config(tool_options)

        def resolve_tool(operation_id: DurableOperationId, tool: object | None,
                         tool_name: str) -> UnitConfig | Literal[False]:
            # Pydantic AI merges the tool's `little_workflow` metadata over the defaults,
            # and answers False for a tool marked not durable (run inline).
            config = per_tool(tool, tool_name)  # type: ignore[arg-type]
            return False if config is False else tool_unit_config(tool_name, config)

        return LittleWorkflowOperationBackend(
            agent_name=self.name,
            default_model_id=self.default_model_id,
            config=RoleBasedOperationConfig(
                model=UnitConfig(retry=self._model_retry, timeout=None), event=no_options,
                capability=no_options, tool=tool_options, resolve_tool=resolve_tool),
        )

    # ---- stable identity and time on resume ----------------------------------------

    def get_default_run_id(self) -> str | None:
        ctx = _in_workflow_body()
        if ctx is None:
            return None
        # The workflow run's id and the agent run's label (its number among this agent's
        # runs in the workflow run, in the order they start): a resumed or replayed run
        # starts them in the same order and gets the same ids, with nothing recorded —
        # as DBOS derives its agent run ids from the workflow id and step.
        label = _RUN_PATHS.label_new_run(ctx, _name_segment(self.name))
        return f"{ctx.run_id}:{label}"

    def get_default_conversation_id(self, run_id: str) -> str | None:
        return conversation_id_from_run_id(run_id) if self.in_durable_context else None

    async def get_run_start_time(self, run_id: str) -> datetime | None:
        ctx = _in_workflow_body()
        return None if ctx is None else ctx.now()

    # ---- run: durable sleeps, events keyed by their run ------------------------------

    async def wrap_run(self, ctx: AgentRunContext[AgentDepsT], *,
                       handler: WrapRunHandler) -> AgentRunResult[Any]:
        run = _in_workflow_body()
        if run is None:
            return await super().wrap_run(ctx, handler=handler)
        prefix = f"{STEP_PREFIX}/{_RUN_PATHS.label(run, ctx.run_id or '-')}/sleep"

        async def durable_sleep(seconds: float) -> None:
            if _in_workflow_body() is None:
                import anyio

                await anyio.sleep(max(seconds, 0))
                return
            await run.sleep(_RUN_PATHS.path(run, prefix), max(seconds, 0))

        with Agent.using_sleep(durable_sleep):
            return await super().wrap_run(ctx, handler=handler)

    async def _dispatch_event_stream_event(self, ctx: AgentRunContext[AgentDepsT],
                                           event: AgentStreamEvent) -> None:
        token = _event_run.set((ctx, event))
        try:
            await super()._dispatch_event_stream_event(ctx, event)
        finally:
            _event_run.reset(token)


async def wait_for_approvals(
    ctx: RunContext,
    path: str,
    requests: DeferredToolRequests,
    *,
    event_name: str = "approval",
    timeout: float | None = None,
) -> DeferredToolResults | None:
    """Wait durably for a person to approve the tool calls an agent run deferred
    (tools with `requires_approval=True`), and return the `DeferredToolResults` to pass to
    the next `agent.run(message_history=..., deferred_tool_results=...)`.

    Each decision arrives as an event sent to the run — `lw.approve_tool_call(world,
    run_id, tool_call_id, approved=..., reason=...)`, `little approve RUN CALL_ID [--deny]`,
    or by hand `lw.send_event(world, run_id, "approval", {"approvals": {tool_call_id: true
    | false | "reason it was denied"}})` — and one event may decide several calls. Until
    every call is decided the run waits again (`path`, then `path-2`, `path-3`…), each
    wait recording the calls still undecided (tool name, arguments, call id), which is
    what `lw.pending_approvals(world)` and `little approvals` list. These are
    `ctx.wait_for_event`s, so with `run_workflow(..., suspend=True)` the run stops while it
    waits and continues where it was once an event is sent. `timeout` (seconds) applies to
    each wait; None when one passes.
    """
    calls = {call.tool_call_id: call for call in requests.approvals}
    decisions: dict[str, Any] = {}
    round_ = 1
    while len(decisions) < len(calls):
        undecided = [call for call_id, call in calls.items() if call_id not in decisions]
        wait_path = path if round_ == 1 else f"{path}-{round_}"
        request = {"kind": TOOL_APPROVAL, "calls": [
            {"toolCallId": call.tool_call_id, "toolName": call.tool_name,
             "args": call.args_as_dict()} for call in undecided]}
        payload = await ctx.wait_for_event(wait_path, event_name, timeout=timeout,
                                           request=request)
        if payload is None:
            return None
        answered = payload.get("approvals") if isinstance(payload, dict) else None
        if not isinstance(answered, dict):
            raise ValueError(
                f"approval event for step {wait_path!r} of run {ctx.run_id}: expected "
                f"{{'approvals': {{tool_call_id: true | false | 'reason'}}}}, got {payload!r}")
        for call in undecided:
            if call.tool_call_id in answered:
                decisions[call.tool_call_id] = answered[call.tool_call_id]
        round_ += 1
    approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
    for call_id in calls:
        decision = decisions[call_id]
        if decision is True:
            approvals[call_id] = True
        else:
            reason = decision if isinstance(decision, str) else "The tool call was not approved."
            approvals[call_id] = ToolDenied(reason)
    return DeferredToolResults(approvals=approvals)
