"""Step and run values: JSON only (pydantic models dumped in JSON mode)."""

from __future__ import annotations

from typing import Any

from ..errors import StepError
from ..world.core import frozen_json, read_back


def to_json_value(value: Any, run_id: str, where: str) -> Any:
    try:
        from pydantic import BaseModel

        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json")
    except ImportError:  # pragma: no cover - pydantic is a dependency
        pass
    try:
        return frozen_json(value, "output")
    except TypeError as e:
        raise StepError(run_id, where, f"output is not JSON-serialisable ({e})") from None


def stored_value(world: Any, value: Any, ref: str | None = None) -> Any:
    """A value read back from a run's log, as the run produced it (DESIGN §13: every
    reader resolves spilled values): the artifact `ref` when the runtime stored it as one
    (`outputRef` of a large step or run output); otherwise a plain copy of the inline
    value with every part the World spilled (`{"$ref": …}`) read back. A scalar is
    returned as it is. Reads go through `world.read_artifact`, so a tracing World sees them.
    """
    if ref:
        return world.read_artifact(ref)
    if isinstance(value, (dict, list)):
        return read_back(value, world.read_artifact)
    return value
