"""little-workflow: durable workflows on any filesystem fsspec can reach."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    ApprovalNotPendingError,
    ArtifactHashMismatchError,
    ArtifactManifestCorruptError,
    ArtifactNotFoundError,
    CatalogueQueryError,
    ClockStalledError,
    DocumentCorruptError,
    DuplicateRunError,
    EventLogCorruptError,
    FatalError,
    ForkPointError,
    IdempotencyConflictError,
    InputMismatchError,
    LeaseLostError,
    LittleWorkflowError,
    MissingExtraError,
    NotInStepError,
    OutputSchemaError,
    QueueNotEmptyError,
    QueueNotFoundError,
    ReplayDivergenceError,
    RunCancelledError,
    RunFinishedError,
    RunLockedError,
    RunNotFoundError,
    RunQueuedError,
    RuntimeIntegrityError,
    ScheduleError,
    SchemaValidationError,
    StepError,
    StepFailedError,
    StepTimeoutError,
    StorageDamagedError,
    StorageError,
    StorageFullError,
    StorageIOError,
    StorageNotADatabaseError,
    StorageNotFoundError,
    StoragePermissionError,
    StorageReadOnlyError,
    StorageUnreachableError,
    UnknownWorkflowError,
    UnsupportedSourceError,
    WorkflowFailedError,
    WorkflowMismatchError,
    WorkflowVersionError,
    WorldBusyError,
    WorldPathError,
)

if TYPE_CHECKING:  # what type checkers and IDEs see: the same names, imported eagerly
    from . import testing
    from .ops.gc import GcReport, gc
    from .runtime.api import arun_pipeline, arun_workflow, run_pipeline, run_workflow
    from .runtime.approvals import PendingApproval, approve_tool_call, pending_approvals
    from .runtime.bash_steps import Mount, file_mount, read_only
    from .runtime.context import RunContext, current_run
    from .runtime.control import cancel_run, start_workflow
    from .runtime.fork import fork_run
    from .runtime.handles import RunHandle, get_run
    from .runtime.outer_loop import Continue, Done
    from .runtime.queues import Queue, RateLimit, declare_queue, delete_queue, enqueue, list_queues
    from .runtime.runner import areplay_run, materialize_run_state, replay_run
    from .runtime.schedules import Schedule, add_schedule, list_schedules, remove_schedule
    from .runtime.signals import send_event
    from .runtime.state import RunResult, RunState, StepState
    from .runtime.steps import Retry, StepInfo, current_step
    from .runtime.streams import aread_stream, read_stream
    from .runtime.worker import Worker
    from .runtime.workflow import Workflow, workflow
    from .world import (
        ArtifactManifest,
        Event,
        EventPayloadError,
        World,
        local_world,
        tracing_world,
        virtual_world,
    )
    from .world.catalogue import RunPage, RunSummary, list_runs
    from .world.memory_store import MemoryReadOnlyError, MemoryStore
    from .world.verify import VerifyReport, verify_world

# Everything else is imported when first used (PEP 562), so `import little_workflow`
# — and a `little` command that needs only part of it — does not pay for pydantic,
# jsonschema, asyncio or the testing helpers up front.
_LAZY = {
    "ArtifactManifest": ".world",
    "Continue": ".runtime.outer_loop",
    "Done": ".runtime.outer_loop",
    "Event": ".world",
    "EventPayloadError": ".world",
    "GcReport": ".ops.gc",
    "MemoryReadOnlyError": ".world.memory_store",
    "MemoryStore": ".world.memory_store",
    "Mount": ".runtime.bash_steps",
    "PendingApproval": ".runtime.approvals",
    "Queue": ".runtime.queues",
    "RateLimit": ".runtime.queues",
    "Retry": ".runtime.steps",
    "RunContext": ".runtime.context",
    "RunHandle": ".runtime.handles",
    "current_run": ".runtime.context",
    "RunPage": ".world.catalogue",
    "RunResult": ".runtime.state",
    "Schedule": ".runtime.schedules",
    "RunState": ".runtime.state",
    "RunSummary": ".world.catalogue",
    "StepInfo": ".runtime.steps",
    "StepState": ".runtime.state",
    "VerifyReport": ".world.verify",
    "Worker": ".runtime.worker",
    "Workflow": ".runtime.workflow",
    "World": ".world",
    "add_schedule": ".runtime.schedules",
    "areplay_run": ".runtime.runner",
    "arun_pipeline": ".runtime.api",
    "arun_workflow": ".runtime.api",
    "approve_tool_call": ".runtime.approvals",
    "aread_stream": ".runtime.streams",
    "cancel_run": ".runtime.control",
    "current_step": ".runtime.steps",
    "declare_queue": ".runtime.queues",
    "delete_queue": ".runtime.queues",
    "enqueue": ".runtime.queues",
    "file_mount": ".runtime.bash_steps",
    "fork_run": ".runtime.fork",
    "gc": ".ops.gc",
    "get_run": ".runtime.handles",
    "list_queues": ".runtime.queues",
    "list_runs": ".world.catalogue",
    "list_schedules": ".runtime.schedules",
    "local_world": ".world",
    "materialize_run_state": ".runtime.runner",
    "pending_approvals": ".runtime.approvals",
    "read_only": ".runtime.bash_steps",
    "remove_schedule": ".runtime.schedules",
    "read_stream": ".runtime.streams",
    "replay_run": ".runtime.runner",
    "run_pipeline": ".runtime.api",
    "run_workflow": ".runtime.api",
    "send_event": ".runtime.signals",
    "start_workflow": ".runtime.control",
    "tracing_world": ".world",
    "verify_world": ".world.verify",
    "virtual_world": ".world",
    "workflow": ".runtime.workflow",
}
#: Subpackages reachable as attributes (`lw.testing.FakeClock`, `lw.world.ids`).
_SUBMODULES = frozenset({"testing", "world", "runtime", "ops", "errors", "cli", "demo"})


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module, __name__), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'little_workflow' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | _SUBMODULES)


__version__ = "0.1.0"

__all__ = [
    "ApprovalNotPendingError",
    "ArtifactHashMismatchError",
    "ArtifactManifest",
    "ArtifactManifestCorruptError",
    "ArtifactNotFoundError",
    "CatalogueQueryError",
    "Continue",
    "DocumentCorruptError",
    "Done",
    "DuplicateRunError",
    "Event",
    "EventLogCorruptError",
    "EventPayloadError",
    "FatalError",
    "ClockStalledError",
    "ForkPointError",
    "GcReport",
    "IdempotencyConflictError",
    "InputMismatchError",
    "LittleWorkflowError",
    "MemoryReadOnlyError",
    "MemoryStore",
    "MissingExtraError",
    "NotInStepError",
    "OutputSchemaError",
    "Mount",
    "PendingApproval",
    "Queue",
    "QueueNotEmptyError",
    "QueueNotFoundError",
    "RateLimit",
    "ReplayDivergenceError",
    "Retry",
    "RunContext",
    "RunHandle",
    "RunLockedError",
    "RunNotFoundError",
    "RunQueuedError",
    "RunFinishedError",
    "RunCancelledError",
    "LeaseLostError",
    "StorageError",
    "StorageDamagedError",
    "StorageFullError",
    "StorageIOError",
    "StorageNotADatabaseError",
    "StorageNotFoundError",
    "StoragePermissionError",
    "StorageReadOnlyError",
    "StorageUnreachableError",
    "RunPage",
    "RunResult",
    "RunSummary",
    "RunState",
    "RuntimeIntegrityError",
    "Schedule",
    "ScheduleError",
    "SchemaValidationError",
    "StepError",
    "StepFailedError",
    "StepInfo",
    "StepState",
    "StepTimeoutError",
    "UnknownWorkflowError",
    "UnsupportedSourceError",
    "VerifyReport",
    "Worker",
    "Workflow",
    "WorkflowFailedError",
    "WorkflowMismatchError",
    "WorkflowVersionError",
    "World",
    "WorldBusyError",
    "WorldPathError",
    "add_schedule",
    "approve_tool_call",
    "areplay_run",
    "arun_pipeline",
    "cancel_run",
    "fork_run",
    "send_event",
    "start_workflow",
    "testing",
    "arun_workflow",
    "aread_stream",
    "current_run",
    "current_step",
    "declare_queue",
    "delete_queue",
    "enqueue",
    "file_mount",
    "gc",
    "get_run",
    "list_queues",
    "list_runs",
    "list_schedules",
    "local_world",
    "materialize_run_state",
    "pending_approvals",
    "read_only",
    "remove_schedule",
    "read_stream",
    "replay_run",
    "run_pipeline",
    "run_workflow",
    "tracing_world",
    "verify_world",
    "virtual_world",
    "workflow",
]
