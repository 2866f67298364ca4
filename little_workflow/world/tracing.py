"""tracing_world: report every World call to a callback, change nothing else."""

from __future__ import annotations

from typing import Any, Callable

from .core import World

TRACED = (
    "append_event",
    "list_events",
    "read_event",
    "list_runs",
    "write_artifact",
    "read_artifact",
    "read_artifact_manifest",
    "list_artifacts",
)


class TracingWorld:
    """Wraps a World; each traced call is reported as `on_call(name, args, kwargs)` before it
    runs. Everything else (files, data_dir, locks, shared state) is the wrapped World's,
    so locks and write chains stay keyed the same."""

    def __init__(self, world: World, on_call: Callable[[str, tuple, dict], Any]):
        self._world = world
        self._on_call = on_call

    @property
    def wrapped(self) -> World:
        return self._world

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._world, name)
        if name in TRACED and callable(attr):
            def traced(*args: Any, **kwargs: Any) -> Any:
                self._on_call(name, args, kwargs)
                return attr(*args, **kwargs)

            return traced
        return attr

    def __repr__(self) -> str:
        return f"<TracingWorld {self._world!r}>"


def tracing_world(world: Any, on_call: Callable[[str, tuple, dict], Any]) -> Any:
    return TracingWorld(world, on_call)
