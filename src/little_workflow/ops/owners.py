"""What `little runs` and `little ui` show of a run that holds an integration's data (a
LangGraph thread, `OWNER_EVENTS` in the catalogue) rather than a workflow's lifecycle.

An integration describes its owner runs with a function `describe(world, run_id)` that
returns a JSON-able dict (or None when the run is not one of its own). Integrations live in
`little_workflow.ext` and nothing here imports them: they are named by module path and
loaded when a row of theirs is shown — where the integration is not installed, the row
stays a plain run."""

from __future__ import annotations

import importlib
from typing import Any, Callable

Describer = Callable[[Any, str], "dict[str, Any] | None"]

#: The catalogue's workflow id of an owner run → its describer, "module:function".
DESCRIBERS = {"langgraph": "little_workflow.ext.langgraph_store:describe_thread"}
_loaded: dict[str, Describer | None] = {}


def _describer(workflow_id: str | None) -> Describer | None:
    if workflow_id not in DESCRIBERS:
        return None
    if workflow_id not in _loaded:
        module, _, name = DESCRIBERS[workflow_id].partition(":")
        try:
            _loaded[workflow_id] = getattr(importlib.import_module(module), name)
        except ImportError:  # the integration's extra is not installed here
            _loaded[workflow_id] = None
    return _loaded[workflow_id]


def describe_owner(world: Any, workflow_id: str | None, run_id: str) -> dict[str, Any] | None:
    """What an integration says of its owner run `run_id`, or None."""
    describe = _describer(workflow_id)
    return describe(world, run_id) if describe is not None else None
