"""Storage: the World interface, shared event rules, artifacts, locks and adapters."""

from .core import EventPayloadError, World
from .local import local_world
from .models import ArtifactManifest, Event
from .tracing import tracing_world
from .virtual import virtual_world


def default_world() -> World:
    """What `run_workflow` uses when given no World: local_world() in the current dir."""
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
