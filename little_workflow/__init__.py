"""little-workflow: durable workflows on any filesystem fsspec can reach."""

from . import testing  # lw.testing.FakeClock
from .errors import (
    ArtifactHashMismatchError,
    ArtifactManifestCorruptError,
    ArtifactNotFoundError,
    DocumentCorruptError,
    EventLogCorruptError,
    FatalError,
    ClockStalledError,
    ForkPointError,
    IdempotencyConflictError,
    InputMismatchError,
    LeaseLostError,
    LittleWorkflowError,
    MissingExtraError,
    NotInStepError,
    OutputSchemaError,
    ReplayDivergenceError,
    RunCancelledError,
    RunFinishedError,
    RunLockedError,
    RunNotFoundError,
    RuntimeIntegrityError,
    SchemaValidationError,
    StepError,
    StepFailedError,
    StepTimeoutError,
    StorageError,
    UnknownWorkflowError,
    UnsupportedSourceError,
    WorkflowFailedError,
    WorkflowMismatchError,
    WorldBusyError,
    WorldPathError,
)
from .ops.gc import GcReport, gc
from .runtime.api import arun_pipeline, arun_workflow, run_pipeline, run_workflow
from .runtime.bash_steps import Mount, file_mount, read_only
from .runtime.context import RunContext, current_run
from .runtime.control import cancel_run, start_workflow
from .runtime.fork import fork_run
from .runtime.outer_loop import Continue, Done
from .runtime.runner import areplay_run, materialize_run_state, replay_run
from .runtime.signals import send_event
from .runtime.state import RunResult, RunState, StepState
from .runtime.steps import Retry, StepInfo, current_step
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
from .world.memory_store import MemoryReadOnlyError, MemoryStore
from .world.verify import VerifyReport, verify_world

__version__ = "0.1.0"

__all__ = [
    "ArtifactHashMismatchError",
    "ArtifactManifest",
    "ArtifactManifestCorruptError",
    "ArtifactNotFoundError",
    "Continue",
    "DocumentCorruptError",
    "Done",
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
    "ReplayDivergenceError",
    "Retry",
    "RunContext",
    "RunLockedError",
    "RunNotFoundError",
    "RunFinishedError",
    "RunCancelledError",
    "LeaseLostError",
    "StorageError",
    "RunResult",
    "RunState",
    "RuntimeIntegrityError",
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
    "World",
    "WorldBusyError",
    "WorldPathError",
    "areplay_run",
    "arun_pipeline",
    "cancel_run",
    "fork_run",
    "send_event",
    "start_workflow",
    "testing",
    "arun_workflow",
    "current_run",
    "current_step",
    "file_mount",
    "gc",
    "local_world",
    "materialize_run_state",
    "read_only",
    "replay_run",
    "run_pipeline",
    "run_workflow",
    "tracing_world",
    "verify_world",
    "virtual_world",
    "workflow",
]
