"""little-workflow: durable workflows on any filesystem fsspec can reach."""

from .errors import (
    ArtifactHashMismatchError,
    ArtifactManifestCorruptError,
    ArtifactNotFoundError,
    DocumentCorruptError,
    EventLogCorruptError,
    FatalError,
    IdempotencyConflictError,
    InputMismatchError,
    LittleWorkflowError,
    MissingExtraError,
    NotInStepError,
    OutputSchemaError,
    ReplayDivergenceError,
    RunLockedError,
    RuntimeIntegrityError,
    SchemaValidationError,
    StepError,
    StepFailedError,
    StepTimeoutError,
    UnknownWorkflowError,
    UnsupportedSourceError,
    WorkflowFailedError,
    WorkflowMismatchError,
    WorldPathError,
)
from .runtime.bash_steps import Mount, file_mount, read_only
from .runtime.context import RunContext
from .runtime.outer_loop import Continue, Done
from .runtime.pipeline import arun_pipeline, run_pipeline
from .runtime.runner import (
    areplay_run,
    arun_workflow,
    materialize_run_state,
    replay_run,
    run_workflow,
)
from .runtime.state import RunResult, RunState, StepState
from .runtime.steps import Retry, StepInfo, current_step
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
    "Workflow",
    "WorkflowFailedError",
    "WorkflowMismatchError",
    "World",
    "WorldPathError",
    "areplay_run",
    "arun_pipeline",
    "arun_workflow",
    "current_step",
    "file_mount",
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
