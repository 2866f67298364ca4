"""Step and run values: JSON only (pydantic models dumped in JSON mode)."""

from __future__ import annotations

from typing import Any

from ..errors import StepError
from ..world.core import frozen_json


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
