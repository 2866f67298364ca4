"""Typed errors. Each carries the identifiers a user needs to act on it."""

from __future__ import annotations

from typing import Any


class LittleWorkflowError(Exception):
    """Base class of every error raised by little-workflow."""


class WorldPathError(LittleWorkflowError, ValueError):
    """A run id, step path or storage path is malformed or would escape the data dir."""


class IdempotencyConflictError(LittleWorkflowError):
    """An idempotency key was reused with a different request."""

    def __init__(self, run_id: str, key: str, existing_digest: str, new_digest: str, *,
                 sequence: int | None = None):
        self.run_id, self.key = run_id, key
        self.existing_digest, self.new_digest = existing_digest, new_digest
        #: The sequence of the event first appended with this key, where known.
        self.sequence = sequence
        super().__init__(
            f"run {run_id}: idempotency key {key!r} was first used for request "
            f"{existing_digest}, now for {new_digest}; use a new key for a new request"
        )


class RuntimeIntegrityError(LittleWorkflowError):
    """Stored data failed a verification check."""


class ArtifactNotFoundError(LittleWorkflowError, LookupError):
    def __init__(self, ref: str, detail: str = ""):
        self.ref = ref
        super().__init__(f"artifact {ref} does not exist{': ' + detail if detail else ''}")


class ArtifactHashMismatchError(RuntimeIntegrityError):
    def __init__(self, ref: str, path: str, expected: str, actual: str):
        self.ref, self.path, self.expected, self.actual = ref, path, expected, actual
        super().__init__(
            f"artifact {ref}: blob {path} hashes to {actual}, manifest says {expected}"
        )


class ArtifactManifestCorruptError(RuntimeIntegrityError):
    def __init__(self, ref: str, path: str, problem: str):
        self.ref, self.path, self.problem = ref, path, problem
        super().__init__(f"artifact {ref}: manifest {path} is corrupt: {problem}")


class EventLogCorruptError(RuntimeIntegrityError):
    def __init__(self, run_id: str, where: str, problem: str):
        self.run_id, self.where, self.problem = run_id, where, problem
        super().__init__(f"run {run_id}: event log {where} is corrupt: {problem}")


class DocumentCorruptError(RuntimeIntegrityError):
    def __init__(self, path: str, problem: str):
        self.path, self.problem = path, problem
        super().__init__(f"{path} is corrupt: {problem}")


class RunLockedError(LittleWorkflowError):
    def __init__(self, run_id: str, owner_pid: int | None = None, detail: str = ""):
        self.run_id, self.owner_pid = run_id, owner_pid
        owner = f"process {owner_pid}" if owner_pid is not None else "another caller"
        super().__init__(
            f"run {run_id} is already running in {owner}{detail}; wait for it to finish"
        )


class WorldBusyError(LittleWorkflowError):
    """`World.close()` found runs still holding their locks after waiting: the World stays
    open (closing it would drop locks a running attempt holds)."""

    def __init__(self, data_dir: str, run_ids: list[str], waited: float):
        self.data_dir, self.run_ids, self.waited = data_dir, run_ids, waited
        super().__init__(
            f"World {data_dir} still runs {', '.join(run_ids)} after {waited:g} s; let "
            "them finish or stop them (Worker.stop()), then close it again"
        )


class SchemaValidationError(LittleWorkflowError, ValueError):
    def __init__(self, what: str, message: str, path: str = ""):
        self.what, self.message, self.json_path = what, message, path
        where = f" at {path}" if path else ""
        super().__init__(f"{what} does not match its schema{where}: {message}")


class InputMismatchError(LittleWorkflowError):
    def __init__(self, run_id: str, stored_hash: str, new_hash: str):
        self.run_id, self.stored_hash, self.new_hash = run_id, stored_hash, new_hash
        super().__init__(
            f"run {run_id} was created with input {stored_hash}, not {new_hash}; "
            "use a new run id for a new input"
        )


class WorkflowMismatchError(InputMismatchError):
    """A run id already belongs to another workflow."""

    def __init__(self, run_id: str, stored: str, asked: str):
        LittleWorkflowError.__init__(
            self, f"run {run_id} belongs to workflow {stored!r}, not {asked!r}; use a new run id"
        )
        self.run_id, self.stored_hash, self.new_hash = run_id, stored, asked


def failure_text(run_id: str, error: dict[str, Any]) -> str:
    """`Type: message` of a run's error record, without repeating the run id: a step's
    failure reads "step 'parse' failed: ValueError: ...", the rest "KeyError: 'x'"."""
    message = str(error.get("message"))
    for prefix in (f"run {run_id}, ", f"run {run_id}: "):
        if message.startswith(prefix):
            message = message[len(prefix):]
    if error.get("type") in (None, "StepFailedError"):
        return message  # it names the step and the step's own error type already
    return f"{error.get('type')}: {message}"


class WorkflowFailedError(LittleWorkflowError):
    """A run failed. `error` is its stored `{type, message}`; `traceback` the stored
    traceback text (bounded) when the failure was recorded with one."""

    def __init__(self, run_id: str, cause: BaseException | None, error: dict[str, Any],
                 traceback: str | None = None):
        self.run_id, self.cause, self.error, self.traceback = run_id, cause, error, traceback
        self.__cause__ = cause
        super().__init__(f"run {run_id} failed: {failure_text(run_id, error)}")


class OutputSchemaError(WorkflowFailedError, SchemaValidationError):
    """A run's output failed its output schema: the run failed (WorkflowFailedError), and
    the reason is a schema violation (SchemaValidationError) — catch either."""

    def __init__(self, run_id: str, cause: SchemaValidationError):
        self.run_id, self.cause, self.__cause__ = run_id, cause, cause
        self.error = {"type": "SchemaValidationError", "message": str(cause)}
        self.traceback = None
        self.what, self.message, self.json_path = cause.what, cause.message, cause.json_path
        Exception.__init__(self, f"run {run_id} failed: {cause}")


class FatalError(LittleWorkflowError):
    """Raise from a step to fail it at once, without retries."""


class StepError(LittleWorkflowError, ValueError):
    """A step could not be executed as asked (bad path, reused path, bad output)."""

    def __init__(self, run_id: str, step_path: str, message: str):
        self.run_id, self.step_path = run_id, step_path
        super().__init__(f"run {run_id}, step {step_path!r}: {message}")


class ForkPointError(StepError):
    """`fork_run` was not told, or told wrongly, where to fork from. `fork_points` are the
    step paths it can fork from, in the order the run reached them (a parallel group's
    path included); `reason` is the problem without the hint, for a CLI to phrase its own."""

    def __init__(self, run_id: str, from_step: str | None, reason: str, fork_points: list[str]):
        self.run_id, self.from_step, self.reason = run_id, from_step, reason
        self.step_path = from_step or ""  # StepError's field: "" when none was asked for
        self.fork_points = fork_points
        LittleWorkflowError.__init__(self, f"run {run_id}: {reason}; pass from_step= "
                                     f"one of: {fork_point_list(fork_points)}")


def fork_point_list(points: list[str], shown: int = 12) -> str:
    if not points:
        return "(none: the run reached no step)"
    more = f", … ({len(points) - shown} more)" if len(points) > shown else ""
    return ", ".join(points[:shown]) + more


class ClockStalledError(LittleWorkflowError):
    """A run sleeps on a FakeClock that nobody advanced for `stalled_seconds` of real time,
    in a call that does not suspend: it would block forever. Not a failure of the run: it
    stays unfinished."""

    def __init__(self, wake_at: str, stalled_seconds: float, run_id: str | None = None,
                 step_path: str | None = None):
        self.wake_at, self.stalled_seconds = wake_at, stalled_seconds
        self.run_id, self.step_path = run_id, step_path
        where = f"run {run_id}, step {step_path!r}: " if run_id else ""
        super().__init__(
            f"{where}sleeping until {wake_at} on a FakeClock nobody advanced for "
            f"{stalled_seconds:g} s of real time; run it with suspend=True (it returns status "
            "'waiting'; advance the clock, e.g. lw_clock.advance(seconds), and run it again), "
            "or advance the clock from another thread")


class NotInStepError(LittleWorkflowError, RuntimeError):
    """`current_step()` was called outside a step function."""


class StepFailedError(LittleWorkflowError):
    """A step failed after its last attempt (or on a recorded failure during replay)."""

    def __init__(self, run_id: str, step_path: str, error: dict[str, Any]):
        self.run_id, self.step_path, self.error = run_id, step_path, error
        super().__init__(
            f"run {run_id}, step {step_path!r} failed: {error.get('type')}: {error.get('message')}"
        )


class StepTimeoutError(LittleWorkflowError, TimeoutError):
    def __init__(self, step_path: str, seconds: float):
        self.step_path, self.seconds = step_path, seconds
        super().__init__(f"step {step_path!r} timed out after {seconds} s")


class ReplayDivergenceError(LittleWorkflowError):
    """The code no longer fits a run's log: it asks for steps the log does not hold, or in
    another order (`step_path` names where), or it ends another way than the log says —
    raises where the run completed, fails with another error type, or completes where the
    run failed (`step_path` is "", and `__cause__` is what the code raised).
    `log_step_path` names what the log holds where the code asked for `step_path` (None
    when not known). Raised by `replay_run`, and when code resumes a run
    (`resuming=True`): then nothing was called or appended but that execution's
    `run.started`, and the run stays resumable by code that fits its log."""

    def __init__(self, run_id: str, step_path: str, message: str, *,
                 log_step_path: str | None = None, resuming: bool = False):
        self.run_id, self.step_path, self.detail = run_id, step_path, message
        self.log_step_path, self.resuming = log_step_path, resuming
        where = f" at step {step_path!r}" if step_path else ""
        what = "resuming run" if resuming else "replay of run"
        super().__init__(f"{what} {run_id} diverged{where}: {message}")


class WorkflowVersionError(LittleWorkflowError):
    """A run is pinned to the version of the code that created it (`version=` when the
    decorator was given one, else the code's definition hash); other code may not resume
    it. Nothing was executed."""

    def __init__(self, run_id: str, workflow_id: str, run_version: str, code_version: str,
                 code_names_version: bool):
        self.run_id, self.workflow_id = run_id, workflow_id
        self.run_version, self.code_version = run_version, code_version
        this = (f"this code is version {code_version!r}" if code_names_version else
                f"this code's definition hash is {code_version!r} (it gives no version=)")
        super().__init__(
            f"run {run_id} of workflow {workflow_id!r} is pinned to version {run_version!r}, "
            f"the code it was created with; {this}. To resume it with this code, give the "
            f"workflow version={run_version!r} (declaring that this code continues that "
            f"version's runs), or fork it onto this code: lw.fork_run(world, {run_id!r}, "
            f"from_step=PATH) (little fork {run_id} --from-step PATH) and run the fork")


class UnknownWorkflowError(LittleWorkflowError, LookupError):
    def __init__(self, name: str, available: list[str]):
        self.name, self.available = name, available
        super().__init__(
            f"no workflow named {name!r}; available: {', '.join(sorted(available)) or '(none)'}"
        )


class UnsupportedSourceError(LittleWorkflowError, ValueError):
    """A skill folder source that this World cannot mount."""


class MissingExtraError(LittleWorkflowError, ImportError):
    def __init__(self, feature: str, extra: str):
        super().__init__(f"{feature} needs the '{extra}' extra: pip install 'little-workflow[{extra}]'")


class RunNotFoundError(LittleWorkflowError, LookupError):
    """No run with this id exists in the World."""

    def __init__(self, run_id: str, detail: str = ""):
        self.run_id = run_id
        super().__init__(f"run {run_id} does not exist{detail}")


class ApprovalNotPendingError(LittleWorkflowError, LookupError):
    """No call with this id waits for approval in the run (never asked, or answered)."""

    def __init__(self, run_id: str, tool_call_id: str, pending: list[str]):
        self.run_id, self.tool_call_id, self.pending = run_id, tool_call_id, pending
        waiting = (f"the calls waiting there: {', '.join(pending)}" if pending
                   else "nothing waits for approval there")
        super().__init__(f"run {run_id}: no tool call {tool_call_id!r} waits for approval "
                         f"({waiting}; `little approvals` lists them)")


class RunFinishedError(LittleWorkflowError):
    """The run already has its terminal event: nothing more may be appended to it."""

    def __init__(self, run_id: str, status: str, attempted: str = ""):
        self.run_id, self.status = run_id, status
        what = f" (tried to append {attempted!r})" if attempted else ""
        super().__init__(f"run {run_id} is already {status}; nothing can be appended after its end{what}")


class RunCancelledError(LittleWorkflowError):
    """The run was cancelled (`lw.cancel_run`); a cancelled run never runs again."""

    def __init__(self, run_id: str, reason: str | None = None):
        self.run_id, self.reason = run_id, reason
        why = f": {reason}" if reason else ""
        super().__init__(f"run {run_id} was cancelled{why}")


class QueueNotFoundError(LittleWorkflowError, LookupError):
    """No queue of that name is declared in the World (`lw.declare_queue` first)."""

    def __init__(self, queue: str, where: str = ""):
        self.queue = queue
        super().__init__(f"queue {queue!r} is not declared{where}; declare it first: "
                         f"lw.declare_queue(world, {queue!r}, concurrency=...)")


class QueueNotEmptyError(LittleWorkflowError):
    """`lw.delete_queue` on a queue that still has unfinished runs, without `force=True`."""

    def __init__(self, queue: str, run_ids: list[str]):
        self.queue, self.run_ids = queue, run_ids
        shown = ", ".join(run_ids[:5]) + (f" and {len(run_ids) - 5} more" if len(run_ids) > 5 else "")
        super().__init__(f"queue {queue!r} still has {len(run_ids)} unfinished runs ({shown}); "
                         "delete_queue(..., force=True) cancels them")


class DuplicateRunError(LittleWorkflowError):
    """`lw.enqueue(..., dedup_id=D, on_duplicate="raise")` while a run with that dedup id is
    unfinished on the queue: `.run_id` is that run."""

    def __init__(self, queue: str, dedup_id: str, run_id: str):
        self.queue, self.dedup_id, self.run_id = queue, dedup_id, run_id
        super().__init__(f"queue {queue!r} already has run {run_id} for dedup id {dedup_id!r} "
                         "(unfinished); its handle: lw.enqueue(..., on_duplicate='return')")


class RunQueuedError(LittleWorkflowError):
    """The run is on a queue: only workers start it, within the queue's limits."""

    def __init__(self, run_id: str, queue: str):
        self.run_id, self.queue = run_id, queue
        super().__init__(f"run {run_id} is on queue {queue!r}: a worker starts it within the "
                         "queue's limits (lw.Worker / little worker); wait for it with its "
                         "handle's result()")


class LeaseLostError(LittleWorkflowError):
    """This process can no longer be sure it holds the run's lease (renewal failed or the
    lease may have expired): it stops appending so another holder can take over safely."""

    def __init__(self, run_id: str, detail: str = ""):
        self.run_id = run_id
        super().__init__(f"run {run_id}: lease lost{': ' + detail if detail else ''}")


class StorageError(LittleWorkflowError, OSError):
    """The storage itself failed (read-only data dir, disk full, a file that is not what it
    should be). Names the file and what to do."""

    def __init__(self, path: str, problem: str, hint: str = ""):
        self.path, self.problem = path, problem
        super().__init__(f"{path}: {problem}{'; ' + hint if hint else ''}")


# What failed, as a class, decided where the failure is met (world/storage_errors.py for
# OS and SQLite errors, each fs_adapter for its store's answers): callers that act on the
# kind of failure use isinstance, never the message. A failure no class below fits stays
# a plain StorageError. Made from an OSError, `errno` keeps the OS's code.


class StorageDamagedError(StorageError):
    """A database its engine finds damaged (SQLite: malformed pages). Parts of it may
    still be readable (`little verify` lists them); nothing more is written into it."""


class StorageNotADatabaseError(StorageError):
    """A file that should be a database is not one (SQLite: "file is not a database")."""


class StorageFullError(StorageError):
    """The disk, quota or file size limit is full."""


class StorageReadOnlyError(StorageError):
    """The data dir is on a read-only filesystem (or its database was opened read-only)."""


class StoragePermissionError(StorageError):
    """The storage refuses this user: file permissions, or an object store's credentials
    and policy."""


class StorageNotFoundError(StorageError):
    """The storage itself is missing: the data dir's folder, a bucket, a container."""


class StorageIOError(StorageError):
    """The device failed an I/O operation."""


class StorageUnreachableError(StorageError):
    """No answer came back from a remote store (endpoint, network, DNS)."""


class CatalogueNotBuiltError(StorageError):
    """A World written before the run catalogue existed, opened read-only: its catalogue
    is built the first time it is opened for writing (or by `little verify --repair`)."""

    def __init__(self, path: str):
        super().__init__(path, "its run catalogue was never built (a World written by an "
                         "older version)", "open it once for writing, or run `little verify "
                         "--repair`, to build it")


class CatalogueQueryError(LittleWorkflowError, ValueError):
    """`list_runs` was asked something it cannot answer: an unknown status, a limit below
    1, a cursor it did not hand out, a naive datetime."""

    def __init__(self, argument: str, problem: str):
        self.argument, self.problem = argument, problem
        super().__init__(f"list_runs {argument}: {problem}")


class ScheduleError(LittleWorkflowError, ValueError):
    """A schedule that cannot be stored: a bad name, cron expression, timezone,
    catch_up or queue (`add_schedule`)."""

    def __init__(self, name: str, problem: str):
        self.name, self.problem = name, problem
        super().__init__(f"schedule {name!r}: {problem}")
