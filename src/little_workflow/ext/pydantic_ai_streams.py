"""An agent's stream events inside a durable run, and out of it through a run stream.

Two things `LittleWorkflowDurability` does with the events of a streamed model request
(`agent.run_stream`, `agent.iter` + `node.stream`, `agent.run_stream_events`, an
`event_stream_handler`):

- **Deltas inside the run.** The request runs in its step, which keeps every event the
  model streamed along with the response (Pydantic AI's recorded-events shape,
  `StreamedActivityResult`). The workflow side is fed those events, so `stream_text()`,
  `run_stream_events()` and an event handler see the same text deltas and tool-call parts
  inside a durable run as outside one — on the first run, on resume and on replay (the
  step's output is the log's). Without it they would see one event per part, its whole
  content at once.
- **Tokens out of the run** (`LittleWorkflowDurability(stream="agent")`): each model event
  is written to the run's durable stream `"agent"` from inside the model-request step as
  the model produces it (`current_step().awrite_stream`: a reader sees it at once; a step
  that runs again writes its events again), every other event — tool calls and results —
  from workflow code (`ctx.write_stream`: exactly once), and the agent run's
  `AgentRunResultEvent` last. `agent_events(world, run_id, "agent")` (or `aagent_events`)
  reads them back as typed Pydantic AI events, from any process, following the run as
  `lw.read_stream` does.
"""

from __future__ import annotations

import typing
from collections.abc import AsyncIterable, AsyncIterator, Iterator
from contextvars import ContextVar
from typing import Annotated, Any

import pydantic
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.capabilities.abstract import WrapRunHandler

# The shape whose events Pydantic AI replays as recorded (DurableModel's completed stream);
# not exported by pydantic_ai.durable_exec. Checked against pydantic-ai-slim 2.68.
from pydantic_ai.durable_exec._utils import StreamedActivityResult
from pydantic_ai.messages import AgentStreamEvent, ModelResponseStreamEvent
from pydantic_ai.run import AgentRunResult, AgentRunResultEvent
from pydantic_ai.tools import RunContext as AgentRunContext

from ..runtime.context import current_run
from ..runtime.steps import current_step_or_none
from ..runtime.streams import aread_stream, read_stream
from ..world.protocol import WorldLike

__all__ = ["AgentEvent", "StreamRouting", "aagent_events", "agent_events", "event_json"]

#: What an agent run writes to its run stream.
AgentEvent = Annotated[AgentStreamEvent | AgentRunResultEvent[Any],
                       pydantic.Discriminator("event_kind")]
_EVENTS: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(AgentEvent)

#: Events a model streams (produced inside the model-request step).
MODEL_EVENT_TYPES: tuple[type, ...] = typing.get_args(typing.get_args(ModelResponseStreamEvent)[0])

# The events of the streamed model request running in this step, kept for its output.
_captured: ContextVar[list[Any] | None] = ContextVar("lw_pydantic_ai_captured_events",
                                                     default=None)


def event_json(event: Any) -> Any:
    """A Pydantic AI stream event (or `AgentRunResultEvent`) as JSON (`event_kind` tells
    which)."""
    return _EVENTS.dump_python(event, mode="json")


def event_from_json(value: Any) -> Any:
    return _EVENTS.validate_python(value)


def agent_events(world: WorldLike, run_id: str, key: str = "agent", *, after: int = 0,
                 follow: bool = True) -> Iterator[Any]:
    """The events agents of run `run_id` wrote to its stream `key`
    (`LittleWorkflowDurability(stream=key)`), as typed Pydantic AI events, in order: text
    and tool-call deltas as the model produced them, tool calls and results, and each
    agent run's `AgentRunResultEvent`. Follows the run as `lw.read_stream` does (any
    process; until the stream is closed or the run ends)."""
    for value in read_stream(world, run_id, key, after=after, follow=follow):
        yield event_from_json(value)


async def aagent_events(world: WorldLike, run_id: str, key: str = "agent", *, after: int = 0,
                        follow: bool = True) -> AsyncIterator[Any]:
    """`agent_events` for async code."""
    async for value in aread_stream(world, run_id, key, after=after, follow=follow):
        yield event_from_json(value)


def _in_body() -> Any:
    ctx = current_run()
    return ctx if ctx is not None and current_step_or_none() is None else None


class StreamRouting:
    """Mixed into `LittleWorkflowDurability` (before Pydantic AI's
    `BaseDurabilityCapability`): the overrides described in the module docstring."""

    #: The run stream the agent's events go to (`stream=`); None: nowhere.
    run_stream_key: str | None = None

    @property
    def has_wrap_run_event_stream(self) -> bool:
        base: bool = super().has_wrap_run_event_stream  # type: ignore[misc]
        return base or (self.run_stream_key is not None and _in_body() is not None)

    def _model_stream_event_handler(self) -> EventStreamHandler[Any] | None:
        """Inside the model-request step: keep each event for the step's output, write it
        to the run stream, and hand it on to the user's handler."""
        user: EventStreamHandler[Any] | None = super()._model_stream_event_handler()  # type: ignore[misc]
        key = self.run_stream_key

        async def routing(run_context: AgentRunContext[Any],
                          stream: AsyncIterable[AgentStreamEvent]) -> None:
            captured = _captured.get()
            step = current_step_or_none()

            async def passing() -> AsyncIterator[AgentStreamEvent]:
                async for event in stream:
                    if captured is not None:
                        captured.append(event)
                    if key is not None and step is not None:
                        await step.awrite_stream(key, event_json(event))
                    yield event

            events = passing()
            if user is not None:
                await user(run_context, events)
            async for _ in events:  # what the handler left, or all of it when there is none
                pass

        return routing

    async def _model_request_stream_operation(self, params: Any) -> Any:
        captured: list[Any] = []
        token = _captured.set(captured)
        try:
            response = await super()._model_request_stream_operation(params)  # type: ignore[misc]
        finally:
            _captured.reset(token)
        return StreamedActivityResult(response=response, events=captured)

    async def wrap_run_event_stream(self, ctx: AgentRunContext[Any], *,
                                    stream: AsyncIterable[AgentStreamEvent]
                                    ) -> AsyncIterable[AgentStreamEvent]:
        events = super().wrap_run_event_stream(ctx, stream=stream)  # type: ignore[misc]
        run, key = _in_body(), self.run_stream_key
        try:
            async for event in events:
                # Model events went out live from their step; the copies replayed here are
                # the same events. The rest originate in workflow code: written exactly once.
                if run is not None and key is not None \
                        and not isinstance(event, MODEL_EVENT_TYPES):
                    await run.write_stream(key, event_json(event))
                yield event
        finally:
            await events.aclose()

    async def wrap_run(self, ctx: AgentRunContext[Any], *,
                       handler: WrapRunHandler) -> AgentRunResult[Any]:
        result: AgentRunResult[Any] = await super().wrap_run(ctx, handler=handler)  # type: ignore[misc]
        run, key = _in_body(), self.run_stream_key
        if run is not None and key is not None:
            await run.write_stream(key, event_json(AgentRunResultEvent(result)))
        return result
