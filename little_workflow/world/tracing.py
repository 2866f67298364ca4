"""tracing_world: report every World call to a callback, change nothing else."""

from __future__ import annotations

import inspect
from typing import Any, Callable


def _reporter(on_call: Callable[..., Any]) -> Callable[[str, tuple, dict], Any]:
    """Accept `on_call(name)` as well as `on_call(name, args, kwargs)`."""
    try:
        params = inspect.signature(on_call).parameters.values()
    except (TypeError, ValueError):
        return on_call
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) == 1 and not any(p.kind == p.VAR_POSITIONAL for p in params):
        return lambda name, args, kwargs: on_call(name)
    return on_call


#: World methods that build objects which talk to the World (views, memory stores):
#: built around the tracer, so what those objects do is reported too.
VIEW_BUILDERS = frozenset({"file_view", "memory"})


class TracingWorld:
    """Wraps a World; each call of a public World method is reported as
    `on_call(name, args, kwargs)` before it runs. Everything else (files, data_dir, locks,
    shared state) is the wrapped World's, so locks and write chains stay keyed the same."""

    def __init__(self, world: Any, on_call: Callable[..., Any]):
        self._world = world
        self._report = _reporter(on_call)

    def __enter__(self) -> "TracingWorld":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._world.close()

    @property
    def wrapped(self) -> Any:
        return self._world

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._world, name)
        if name.startswith("_") or not callable(attr) or not inspect.ismethod(attr):
            return attr

        if name in VIEW_BUILDERS:
            unbound = attr.__func__

            def built(*args: Any, **kwargs: Any) -> Any:
                self._report(name, args, kwargs)
                return unbound(self, *args, **kwargs)

            return built

        def traced(*args: Any, **kwargs: Any) -> Any:
            self._report(name, args, kwargs)
            return attr(*args, **kwargs)

        return traced

    def __repr__(self) -> str:
        return f"<TracingWorld {self._world!r}>"


def tracing_world(world: Any, on_call: Callable[..., Any]) -> Any:
    return TracingWorld(world, on_call)
