"""RunContext: what a workflow function gets. A facade over its base classes — the
records it appends (recording.py), the step engine (step_engine.py) and parallel groups
(groups.py) — plus durable time, messages, memory, plans, sub-runs and bash."""

from __future__ import annotations

import contextlib
import contextvars
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Iterator, TypeVar, overload

from ..world.ids import validate_name
from ..world.protocol import WorldLike
from .bash_steps import BashResult, run_bash_step
from .codec import codec_for
from .groups import ParallelGroups
from .memory import RunMemory
from .pipeline import call_workflow
from .plans import Plans
from .state import RunLog
from .step_engine import Mode
from .steps import current_step_or_none

if TYPE_CHECKING:
    from uuid import UUID

T = TypeVar("T")

_current_run: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "little_workflow_current_run", default=None)


def current_run() -> RunContext | None:
    """The RunContext of the workflow whose code is running here, or None outside a run.
    Set for the workflow body and everything it calls (step functions included: check
    `lw.current_step()` to tell them apart), so a library called from a workflow (an agent
    framework's durability hook) can make its own durable steps without being handed ctx."""
    return _current_run.get()


@contextlib.contextmanager
def running(ctx: RunContext) -> Iterator[None]:
    """Make `ctx` what current_run() returns while a workflow body runs."""
    token = _current_run.set(ctx)
    try:
        yield
    finally:
        _current_run.reset(token)


class RunContext(ParallelGroups):
    """Handed to the workflow function: `await ctx.step(...)`, `await ctx.parallel(...)`."""

    suspend = False  # run_workflow(suspend=True): a run that must wait stops instead
    #: A sub-run called by its parent in this process: how far the parent had read its
    #: own log, with no cancel request in it (`cancel_if_parent_cancelled` reads on from
    #: there); 0: read the parent's whole log.
    parent_seen = 0
    #: The position of the next `write_stream` call from workflow code (streams.py).
    stream_position = 0

    def __init__(
        self,
        *,
        world: WorldLike,
        workflow: Any,
        run_id: str,
        input: Any,
        log: RunLog,
        mode: Mode = "execute",
        pipeline: Any = None,
        run_child: Callable[..., Any] | None = None,
    ):
        super().__init__(world=world, run_id=run_id, log=log, mode=mode)
        self.workflow = workflow
        self.input = input
        self.pipeline = pipeline
        #: Starts a sub-run (pipelines): `await run_child(wf, input, world=, run_id=, pipeline=)`.
        self.run_child = run_child
        self._memory: RunMemory | None = None
        self._plans: Plans | None = None
        self._calls = 0  # sub-workflow calls made so far (pipelines)

    @property
    def workflow_id(self) -> str:
        return self.workflow.id

    def patched(self, patch_id: str) -> bool:
        """Whether this code reaches here in a run that takes the patched path: True in a
        run whose log holds no later record (recorded as `patch.marked {patchId}`, so a
        resume and a replay answer True again), False in a run whose log already went
        past this point without the marker (nothing is recorded). Lets one body serve
        runs started before a change and runs started after it:

            if ctx.patched("search-v2"):
                found = await ctx.step("search_tool", search)
            else:
                found = await ctx.step("tool", old_search)
        """
        validate_name("patch id", patch_id)
        key = ("patch", patch_id)
        if key in self.log.marks:
            self.asked(key)
            return True
        if self.history is not None and self.history.ahead:
            return False
        if not self.replaying:
            self.append_sync("patch.marked", {"patchId": patch_id})
        return True

    # ---- paths ----------------------------------------------------------------------

    def scratch_view(self, *parts: str) -> Any:
        """A folder under `runs/<runId>/` as an fsspec filesystem (through the World)."""
        return self.world.file_view("/".join(("runs", self.run_id, *parts)))

    @property
    def scratch(self) -> Any:
        """The run's scratch folder (`runs/<runId>/scratch/`) as an fsspec filesystem."""
        return self.scratch_view("scratch")

    def next_call_index(self) -> int:
        """The index of the next sub-workflow call (pipelines), in call order."""
        index = self._calls
        self._calls += 1
        return index

    # ---- durable time and messages (timers.py, signals.py) ---------------------------

    async def sleep(self, path: str, seconds: float) -> None:
        """A durable timer: the wake time is committed first; a resumed run sleeps only
        the time left."""
        from .timers import sleep_seconds

        await sleep_seconds(self, path, seconds)

    async def sleep_until(self, path: str, when: datetime | float) -> None:
        """Sleep until `when` (an aware datetime or epoch seconds), durably."""
        from .timers import sleep_until_time

        await sleep_until_time(self, path, when)

    # Typed for callers: `type=Approval` gives an `Approval | None`; without it, JSON.
    @overload
    async def wait_for_event(self, path: str, name: str, timeout: float | None = None, *,
                             request: Any = None) -> Any | None: ...

    @overload
    async def wait_for_event(self, path: str, name: str, timeout: float | None = None, *,  # type: ignore[overload-overlap]
                             type: type[T], request: Any = None) -> T | None: ...

    @overload
    async def wait_for_event(self, path: str, name: str, timeout: float | None = None, *,
                             type: Any, request: Any = None) -> Any | None: ...

    async def wait_for_event(self, path: str, name: str, timeout: float | None = None, *,
                             type: Any = None, request: Any = None) -> Any | None:
        """The payload of the first event `name` sent to this run (`lw.send_event`) that
        no earlier wait took, or None once `timeout` seconds have passed. With `type=T`
        (a pydantic model, dataclass, or any annotation) the payload is decoded to a T,
        on the first run as on resume and replay; one that does not fit is
        a StepError naming the wait and the type. `request` (JSON) is recorded with the
        wait and says what it asks for: `{"kind": "tool-approval", "calls": [{"toolCallId",
        "toolName", "args"}]}` makes each call one of `lw.pending_approvals(world)`."""
        from .signals import wait_for_event

        return await wait_for_event(self, path, name, timeout,
                                    codec_for(type) if type is not None else None, request)

    def now(self) -> datetime:
        """The World clock's time as an aware UTC datetime, recorded: a resumed or
        replayed run gets the same value."""
        from .timers import now

        return now(self)

    def uuid(self) -> UUID:
        """A random uuid.UUID, recorded: a resumed or replayed run gets the same value."""
        from .timers import new_uuid

        return new_uuid(self)

    # ---- durable streams (streams.py) ------------------------------------------------

    async def write_stream(self, key: str, value: Any) -> None:
        """Append `value` (JSON, or a pydantic model, dataclass...) to this run's durable
        stream `key`, which `lw.read_stream` / `little stream` readers get in order, from
        any process, as it is written. Exactly once: a resumed or replayed run finds the
        write its log holds for this call and writes nothing again. A closed stream takes
        no more writes (StepError)."""
        from .streams import write_from_workflow

        step = current_step_or_none()
        if step is not None and step.run_id == self.run_id:
            # ctx used inside a step function: that step's write (at least once).
            await step.awrite_stream(key, value)
            return
        await write_from_workflow(self, key, value)

    async def close_stream(self, key: str) -> None:
        """Close stream `key`: its readers end after its last value; later writes are a
        StepError. Closing it again changes nothing."""
        from .streams import close_from_workflow

        await close_from_workflow(self, key)

    # ---- features built on top (memory, plans, pipelines, bash) -----------------------

    @property
    def memory(self) -> RunMemory:
        """Memory stores: `.org` (read-only), `.pipeline`, `.workflow`; writes journaled."""
        if self._memory is None:
            self._memory = RunMemory(self)
        return self._memory

    @property
    def plans(self) -> Plans:
        """Kept plans: `keep(name, value)` and `reuse(name)`."""
        if self._plans is None:
            self._plans = Plans(self)
        return self._plans

    async def call_workflow(self, name: str, input: Any) -> Any:
        """Run pipeline member `name` as a sub-run (its id reserved in this run's log)."""
        return await call_workflow(self, name, input)

    async def bash(self, path: str, script: str, **options: Any) -> BashResult:
        """Run `script` in just-bash (a bash interpreter in Python: no host shell, no
        host files) as the durable step `path`, and return its result: a dict
        {"stdout", "stderr", "exitCode"} that also has `.stdout`, `.stderr`, `.exit_code`.
        A non-zero exit code is a result, not an error. A resumed run gets the recorded
        result without running the script again.

        The script sees views of this World: `/scratch` (this step's folder, read-write,
        the working directory), `/run` (the run's scratch), `/memory/org` (read-only),
        `/memory/pipeline` and `/memory/workflow` (writes journaled), `/skills/<name>`
        (the workflow's skills, read-only). Options: `mounts={"/at": lw.read_only("folder")
        | lw.file_mount("file") | "folder"}`, `env={...}`, `limits=...` (just-bash
        ExecutionLimits or a dict), `network=...` (no network unless given). Needs the
        `bash` extra (`pip install 'little-workflow[bash]'`); without it, raises
        `MissingExtraError`."""
        return await run_bash_step(self, path, script, **options)
