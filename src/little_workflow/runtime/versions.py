"""A run is pinned to the version of the code that created it: changed code never re-runs
history.

`run.created` records `version`: the decorator's `version=` when given, else the code's
definition hash. A run written before runs recorded one holds only `definitionHash`, and
is pinned to it. A fork runs the code it is given: its `run.created` names no version,
and the first execution's `run.started {version}` pins it.

Resuming with code of another version is refused (`WorkflowVersionError`) before anything
runs. The refusal is recorded as `run.resume_refused {version, codeVersion}` — once
until the run next executes, so a worker trying again does not grow the log — and the
catalogue folds it into `RunSummary.needs_version`, cleared by the next `run.started`.
"""

from __future__ import annotations

from typing import Any

from ..errors import WorkflowVersionError
from ..world.protocol import WorldLike
from .state import RunLog
from .workflow import Workflow


def pinned_version(log: RunLog) -> str | None:
    """The version code must have to resume this run (None: any code may, a fork that
    has not run yet)."""
    created = log.created or {}
    version = created.get("version")
    if isinstance(version, str):
        return version
    if created.get("forkedFrom") is not None:
        return log.started_version
    definition_hash = created.get("definitionHash")
    return definition_hash if isinstance(definition_hash, str) else None


def refuse_other_versions(world: WorldLike, log: RunLog, wf: Workflow[Any, Any]) -> None:
    """Raise `WorkflowVersionError` when `wf` is not the version the run is pinned to,
    recording the refusal first (once since the run last executed). Called under the
    run's lock, before the execution's `run.started`."""
    pinned = pinned_version(log)
    if pinned is None or pinned == wf.code_version:
        return
    if log.refused is None:
        world.append_event(log.run_id, "run.resume_refused",
                           {"version": pinned, "codeVersion": wf.code_version})
    raise WorkflowVersionError(log.run_id, wf.id, pinned, wf.code_version, wf.version is not None)
