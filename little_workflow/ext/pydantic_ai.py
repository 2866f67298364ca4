"""Durable Pydantic AI agents: `LittleWorkflowDurability()`, a Pydantic AI capability.

```python
agent = Agent(model, name="support", tools=[...], capabilities=[LittleWorkflowDurability()])

@lw.workflow(id="answer")
async def answer(ctx, input):
    result = await agent.run(input["question"])    # every model request and tool call a step
    return {"answer": result.output}
```

Inside a workflow body, every model request and tool call of the agent run is a durable
step (`ctx.step`) whose path is keyed by the agent run id and the run step, or the
tool-call id: `pydantic-ai/<agentRunId>/<runStep>/<operation>[/<toolCallId>]`, never by the
order calls happen in, so concurrent agent runs and parallel tool calls cannot swap
results on resume. A resumed (or replayed) run gets every committed response and tool
result from the log and calls nothing committed again. The agent run id and start time
come from `ctx.uuid()` and `ctx.now()`, so they are the same on resume; waits inside the
agent graph (polling a model's background job) are `ctx.sleep` timers: a resumed run
waits only until the committed wake time. A failed model request or tool call is recorded
with its type (name, module, qualified name) and, served from the log, raises the same
class again (`recorded_exception` says what is kept), so a body that catches by type takes
the same branch on resume. Values cross the step boundary as JSON (Pydantic AI's
JSON codec); outputs over 64 KiB go to artifacts as every step output does.

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
from typing import Any
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
        DurabilityEngineSpec,
        DurableOperationId,
        EventStreamHandlerId,
        JournalCallableOperationBackend,
        ModelRequestId,
        RoleBasedOperationConfig,
        ToolsetCallToolId,
        ToolsetValidateToolArgumentsId,
        conversation_id_from_run_id,
    )
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
from ..runtime.context import RunContext, current_run
from ..runtime.steps import Retry, current_step_or_none
from ..runtime.telemetry import chat_span, tool_span

__all__ = ["LittleWorkflowDurability", "STEP_PREFIX", "wait_for_approvals"]

#: The first segment of every step path the capability makes.
STEP_PREFIX = "pydantic-ai"

_SEGMENT = re.compile(r"[A-Za-z0-9_.-]{1,80}")

# The agent run whose stream event is being handled: event-handler units carry only the
# event in their cache key, so the run context reaches `execute` this way.
_event_run: ContextVar[AgentRunContext[Any] | None] = ContextVar("lw_pydantic_ai_event_run",
                                                                  default=None)


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


class _Occurrences:
    """How many units have used each path key in a run: two units with the same key (the
    same tool listing asked twice in one run step) get `-2`, `-3`… in the order they come,
    which is stable because they belong to one agent run step."""

    def __init__(self) -> None:
        self._seen: WeakKeyDictionary[RunContext, dict[str, int]] = WeakKeyDictionary()

    def path(self, ctx: RunContext, key: str) -> str:
        seen = self._seen.setdefault(ctx, defaultdict(int))
        seen[key] += 1
        n = seen[key]
        return key if n == 1 else f"{key}-{n}"


# One for the process: Pydantic AI builds a backend per request, and a workflow run may
# hold several agents; runs are told apart by their RunContext (held weakly).
_OCCURRENCES = _Occurrences()


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


class LittleWorkflowOperationBackend(JournalCallableOperationBackend["Retry | None"]):
    """Runs each durable unit of an agent run as one `ctx.step` of the enclosing workflow."""

    def __init__(self, *, agent_name: str, default_model_id: str | None,
                 config: RoleBasedOperationConfig[Retry | None]) -> None:
        super().__init__(agent_name=agent_name, default_model_id=default_model_id, config=config)

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: Retry | None,
    ) -> object:
        ctx = _in_workflow_body()
        if ctx is None:
            return await body()
        path = _OCCURRENCES.path(ctx, self._path_key(operation_id, name, cache_key))

        async def unit() -> object:
            with _genai_span(ctx, operation_id, cache_key):
                return await body()

        try:
            return await ctx.step(path, unit, retry=config)
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

    def _path_key(self, operation_id: DurableOperationId, name: str,
                  cache_key: tuple[object, ...]) -> str:
        run = next((v for v in cache_key if isinstance(v, AgentRunContext)), None)
        if run is None:
            run = _event_run.get()
        operation = _name_segment(name)
        if run is None or run.run_id is None:
            return f"{STEP_PREFIX}/{operation}"
        base = f"{STEP_PREFIX}/{_segment(run.run_id)}"
        if isinstance(operation_id, EventStreamHandlerId):
            return f"{base}/events/{operation}"  # numbered by _Occurrences, in stream order
        if isinstance(operation_id, (ToolsetCallToolId, ToolsetValidateToolArgumentsId)):
            call = run.tool_call_id or "-"
            return f"{base}/{run.run_step}/{operation}/{_segment(call)}"
        if isinstance(operation_id, ModelRequestId):
            return f"{base}/{run.run_step}/{operation}"
        return f"{base}/{run.run_step}/{operation}"


class LittleWorkflowDurability(BaseDurabilityCapability[AgentDepsT]):
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
        # Toolsets passed at run time bypass the wrapping, so their calls would not be steps.
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
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
    ) -> None:
        super().__init__(models=models, event_stream_handler=event_stream_handler, name=name)
        self._model_retry = model_retry
        self._tool_retry = tool_retry

    @property
    def in_durable_context(self) -> bool:
        return _in_workflow_body() is not None

    def get_durable_operation_backend(self) -> LittleWorkflowOperationBackend:
        return LittleWorkflowOperationBackend(
            agent_name=self.name,
            default_model_id=self.default_model_id,
            config=RoleBasedOperationConfig(model=self._model_retry, event=None, capability=None,
                                            tool=self._tool_retry),
        )

    # ---- stable identity and time on resume ----------------------------------------

    def get_default_run_id(self) -> str | None:
        ctx = _in_workflow_body()
        # Recorded in the run's log: a resumed or replayed run gets the same id.
        return None if ctx is None else f"agent-{ctx.uuid().hex}"

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
        prefix = f"{STEP_PREFIX}/{_segment(ctx.run_id or '-')}/sleep"

        async def durable_sleep(seconds: float) -> None:
            if _in_workflow_body() is None:
                import anyio

                await anyio.sleep(max(seconds, 0))
                return
            await run.sleep(_OCCURRENCES.path(run, prefix), max(seconds, 0))

        with Agent.using_sleep(durable_sleep):
            return await super().wrap_run(ctx, handler=handler)

    async def _dispatch_event_stream_event(self, ctx: AgentRunContext[AgentDepsT],
                                           event: AgentStreamEvent) -> None:
        token = _event_run.set(ctx)
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

    The decision arrives as an event sent to the run:
    `lw.send_event(world, run_id, "approval", {"approvals": {tool_call_id: true | false |
    "reason it was denied"}})`; a call the payload does not name is denied. It is a
    `ctx.wait_for_event`, so with `run_workflow(..., suspend=True)` the run stops while it
    waits and continues where it was once the event is sent. None when `timeout` passes.
    """
    payload = await ctx.wait_for_event(path, event_name, timeout=timeout)
    if payload is None:
        return None
    decisions = payload.get("approvals") if isinstance(payload, dict) else None
    if not isinstance(decisions, dict):
        raise ValueError(
            f"approval event for step {path!r} of run {ctx.run_id}: expected "
            f"{{'approvals': {{tool_call_id: true | false | 'reason'}}}}, got {payload!r}")
    approvals: dict[str, bool | ToolApproved | ToolDenied] = {}
    for call in requests.approvals:
        decision = decisions.get(call.tool_call_id, False)
        if decision is True:
            approvals[call.tool_call_id] = True
        else:
            reason = decision if isinstance(decision, str) else "The tool call was not approved."
            approvals[call.tool_call_id] = ToolDenied(reason)
    return DeferredToolResults(approvals=approvals)
