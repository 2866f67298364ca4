"""`fork_run`: a new run that keeps a source run's history up to a step and runs the rest.

The fork's log starts with its own `run.created` (`forkedFrom: {runId, stepPath}`), then
a renumbered copy of every record of the source appended before the cut that replaying
those steps needs. Artifacts those records refer to are re-published under the fork, so
the fork owns everything it reads and gc of the source never breaks it.
"""

from __future__ import annotations

from typing import Any

from ..errors import ForkPointError, RunNotFoundError, WorldPathError
from ..world.ids import ARTIFACT_REF_PREFIX, validate_run_id
from ..world.ids import new_run_id as make_run_id
from ..world.models import thaw
from ..world.protocol import WorldLike
from .active_index import mark_active
from .deadlines import forked_deadline
from .plans import copy_kept_plan
from .state import RunLog

#: Records of a workflow's history a fork copies (run.* events are the fork's own).
COPIED_PREFIXES = ("step.", "timer.", "wait.", "signal.", "value.", "memory.", "plan.",
                   "patch.", "harness.", "stream.")


def fork_points(log: RunLog) -> dict[str, int]:
    """Every step path a fork can start from, with the sequence it cuts at, in the order
    the run reached them: steps, sleeps and waits, and the path of a group whose children
    ran (`chunks` for `chunks/0`...), which cuts before its first child."""
    points: dict[str, int] = {}
    for path, rec in log.steps.items():
        parts = path.split("/")
        for i in range(1, len(parts)):
            group = "/".join(parts[:i])
            if group not in log.steps:
                points[group] = min(points.get(group, rec.first_sequence), rec.first_sequence)
        points[path] = rec.first_sequence
    for table in (log.timers, log.waits):
        for path, record in table.items():
            points.setdefault(path, int(record["sequence"]))
    return dict(sorted(points.items(), key=lambda item: item[1]))


def _cut_sequence(log: RunLog, source: str, from_step: str | None) -> tuple[int, str]:
    points = fork_points(log)
    if from_step is None:
        failed = sorted((rec.first_sequence, path) for path, rec in log.steps.items()
                        if rec.status == "failed")
        if not failed:
            where = "it failed outside any step" if log.status == "failed" else \
                f"it is {log.status}"
            raise ForkPointError(source, None, f"no failed step to fork from ({where})",
                                 list(points))
        return failed[0]
    if from_step in points:
        return points[from_step], from_step
    raise ForkPointError(source, from_step, f"no step {from_step!r} in this run", list(points))


def finished_siblings(log: RunLog, step_path: str) -> tuple[str, ...]:
    """The other children of a parallel group that succeeded, when `step_path` is one of
    its children (`square/2` in `square`): a fork from one child keeps them whole, even
    those that finished after it started, so only that child (and what the log had not
    finished) runs again."""
    group, _, _ = step_path.rpartition("/")
    if not group or group in log.steps:  # not a child of a group
        return ()
    return tuple(path for path, rec in log.steps.items()
                 if path != step_path and path.rpartition("/")[0] == group
                 and rec.status == "succeeded")


def _belongs_to(event: Any, step_paths: tuple[str, ...]) -> bool:
    path = event.payload.get("stepPath") if isinstance(event.payload, dict) else None
    return isinstance(path, str) and any(path == p or path.startswith(p + "/")
                                         for p in step_paths)


class _Republisher:
    """Copies the source's artifacts under the fork, each once."""

    def __init__(self, world: WorldLike, source: str, fork_id: str):
        self.world, self.source, self.fork_id = world, source, fork_id
        self.copied: dict[str, str] = {}
        self._manifests: dict[str, Any] | None = None

    def manifest(self, ref: str) -> Any:
        if self._manifests is None:
            self._manifests = {m.artifact_ref: m for m in self.world.list_artifacts(self.source)}
        m = self._manifests.get(ref)
        if m is None:  # an artifact of another run (e.g. a sub-run's): look everywhere
            m = next((m for m in self.world.list_artifacts() if m.artifact_ref == ref), None)
        return m


def _republish(world: WorldLike, value: Any, fork_id: str, copied: Any) -> Any:
    """`value` with every artifact ref replaced by a copy owned by the fork."""
    if isinstance(value, str):
        if not value.startswith(ARTIFACT_REF_PREFIX):
            return value
        if value not in copied.copied:
            manifest = copied.manifest(value)
            data = world.read_artifact(value)  # raises ArtifactNotFoundError when gone
            if manifest.encoding == "json":
                # A spilled part may hold refs of its own (a dict that gave up members,
                # then was given up by its parent): the fork owns those too.
                data = _republish(world, data, fork_id, copied)
            new = world.write_artifact(fork_id, manifest.step_path, manifest.name, data,
                                       content_type=manifest.content_type,
                                       encoding=manifest.encoding)
            copied.copied[value] = new.artifact_ref
        return copied.copied[value]
    if isinstance(value, dict):
        return {_republish(world, k, fork_id, copied): _republish(world, v, fork_id, copied)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_republish(world, v, fork_id, copied) for v in value]
    return value


def fork_run(world: WorldLike, run_id: str, *, from_step: str | None = None,
             new_run_id: str | None = None) -> str:
    """A new run with the same workflow and input, whose log holds the source's records
    of every step that started before `from_step` (default: the first failed step).
    Running it (`run_workflow` with the fixed code, or a worker) serves those from the
    log and calls `from_step` and everything after. The source run is unchanged."""
    validate_run_id(run_id)
    fork_id = validate_run_id(new_run_id) if new_run_id is not None else make_run_id()
    events = world.list_events(run_id)
    log = RunLog.fold(run_id, events)
    if log.created is None:
        raise RunNotFoundError(run_id, f" in {world.data_dir}")
    cut, step_path = _cut_sequence(log, run_id, from_step)
    with world.run_lock(fork_id):
        if world.list_events(fork_id):
            raise WorldPathError(f"run id {fork_id} is already used; pick another new_run_id")
        # No `version`: a fork runs the code it is given, and its first run pins it. Its
        # deadline is the source's time again, from now (the source's may be long past).
        created = {k: thaw(v) for k, v in log.created.items()
                   if k not in ("forkedFrom", "version", "deadline")}
        created.update(forked_deadline(log, world.clock.now()))
        created["forkedFrom"] = {"runId": run_id, "stepPath": step_path}
        copied_refs = _Republisher(world, run_id, fork_id)
        created = _republish(world, created, fork_id, copied_refs)
        mark_active(world, fork_id, str(created.get("workflowId")))  # before run.created
        world.append_event(fork_id, "run.created", created, durable=False)
        renumbered: dict[int, int] = {}
        # A sub-run unfinished at the cut belongs to the source: the fork starts its own.
        finished_calls = {e.payload.get("callPath") for e in events
                          if e.sequence < cut and e.type == "harness.tool_call.succeeded"}
        kept_siblings = finished_siblings(log, step_path)
        for e in events:
            if not e.type.startswith(COPIED_PREFIXES):
                continue
            if e.sequence >= cut and not _belongs_to(e, kept_siblings):
                continue
            call_path = e.payload.get("callPath") if isinstance(e.payload, dict) else None
            if e.type.startswith("harness.tool_call.") and call_path is not None \
                    and call_path not in finished_calls:
                continue
            payload = _republish(world, thaw(e.payload), fork_id, copied_refs)
            if e.type == "plan.kept":  # the file first, then its record (as Plans.keep)
                copy_kept_plan(world, run_id, fork_id, payload)
            if e.type == "wait.completed" and isinstance(payload.get("signalSequence"), int):
                payload["signalSequence"] = renumbered[payload["signalSequence"]]
            new = world.append_event(fork_id, e.type, payload,
                                     idempotency_key=e.append_idempotency_key, durable=False)
            renumbered[e.sequence] = new.sequence
        world.sync()
    return fork_id
