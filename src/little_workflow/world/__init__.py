"""Storage: the World interface, shared event rules, artifacts, locks and adapters."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .core import World
    from .local import local_world
    from .models import ArtifactManifest, Event
    from .payloads import EventPayloadError
    from .tracing import tracing_world
    from .virtual import virtual_world

# Imported when first used (PEP 562): a submodule (`world.ids`, `world.event_stores`)
# loads without the World core, and with it fsspec, which `little runs` does not need.
_LAZY = {
    "ArtifactManifest": ".models",
    "Event": ".models",
    "EventPayloadError": ".payloads",
    "World": ".core",
    "local_world": ".local",
    "tracing_world": ".tracing",
    "virtual_world": ".virtual",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def default_world() -> World:
    """What `run_workflow` uses when given no World: local_world() in the current dir."""
    from .local import local_world

    return local_world()


__all__ = [
    "ArtifactManifest",
    "Event",
    "EventPayloadError",
    "World",
    "default_world",
    "local_world",
    "tracing_world",
    "virtual_world",
]
