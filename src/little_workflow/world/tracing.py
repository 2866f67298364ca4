"""tracing_world: report every World call to a callback, change nothing else."""

from __future__ import annotations

import contextlib
import inspect
from typing import TYPE_CHECKING, Any, Callable

from .core import file_view_of, memory_store_of

if TYPE_CHECKING:
    from .append import PendingEvent
    from .clock import Clock
    from .models import ArtifactManifest, Event
    from .protocol import WorldLike
    from .queue_slots import Slot
    from .slots import StepSlots


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


class TracingWorld:
    """Wraps a World; each call of a public World method is reported as
    `on_call(name, args, kwargs)` before it runs, with the arguments as the caller passed
    them. Everything else (files, data_dir, locks, shared state) is the wrapped World's,
    so locks and write chains stay keyed the same. Memory stores and file views are built
    around the tracer, so what those objects do is reported too."""

    def __init__(self, world: WorldLike, on_call: Callable[..., Any]):
        self._world = world
        self._report = _reporter(on_call)
        self._blocking: bool | None = None

    def __enter__(self) -> "TracingWorld":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._world.close()

    def __repr__(self) -> str:
        return f"<TracingWorld {self._world!r}>"

    @property
    def wrapped(self) -> WorldLike:
        return self._world

    # What the wrapped World is, read through (not calls: nothing reported).

    @property
    def kind(self) -> str:
        return self._world.kind

    @property
    def data_dir(self) -> str:
        return self._world.data_dir

    @property
    def files(self) -> Any:
        return self._world.files

    @property
    def clock(self) -> Clock:
        return self._world.clock

    @property
    def catalogue(self) -> Any:
        return self._world.catalogue

    @property
    def max_concurrent_steps(self) -> int | None:
        return self._world.max_concurrent_steps

    @property
    def step_slots(self) -> StepSlots:
        return self._world.step_slots

    @property
    def host_sources_allowed(self) -> bool:
        return self._world.host_sources_allowed

    @property
    def read_only(self) -> bool:
        return self._world.read_only

    @property
    def closed(self) -> bool:
        return self._world.closed

    @property
    def blocking(self) -> bool:
        return self._world.blocking if self._blocking is None else self._blocking

    @blocking.setter
    def blocking(self, value: bool) -> None:
        """Say the traced World's calls block (a test's slow store over a memory World)."""
        self._blocking = value

    @property
    def storage_key(self) -> int:
        return self._world.storage_key

    # Calls, each reported before it runs.

    def close(self, *args: Any, **kwargs: Any) -> None:
        self._report("close", args, kwargs)
        self._world.close(*args, **kwargs)

    def append_event(self, *args: Any, **kwargs: Any) -> Event:
        self._report("append_event", args, kwargs)
        return self._world.append_event(*args, **kwargs)

    def submit_event(self, *args: Any, **kwargs: Any) -> PendingEvent:
        self._report("submit_event", args, kwargs)
        return self._world.submit_event(*args, **kwargs)

    def sync(self, *args: Any, **kwargs: Any) -> None:
        self._report("sync", args, kwargs)
        self._world.sync(*args, **kwargs)

    def resolve_refs(self, *args: Any, **kwargs: Any) -> Any:
        self._report("resolve_refs", args, kwargs)
        return self._world.resolve_refs(*args, **kwargs)

    def list_events(self, *args: Any, **kwargs: Any) -> list[Event]:
        self._report("list_events", args, kwargs)
        return self._world.list_events(*args, **kwargs)

    def read_event(self, *args: Any, **kwargs: Any) -> Event:
        self._report("read_event", args, kwargs)
        return self._world.read_event(*args, **kwargs)

    def log_size(self, *args: Any, **kwargs: Any) -> int:
        self._report("log_size", args, kwargs)
        return self._world.log_size(*args, **kwargs)

    def list_runs(self, *args: Any, **kwargs: Any) -> list[str]:
        self._report("list_runs", args, kwargs)
        return self._world.list_runs(*args, **kwargs)

    def delete_run(self, *args: Any, **kwargs: Any) -> int:
        self._report("delete_run", args, kwargs)
        return self._world.delete_run(*args, **kwargs)

    def finish_deletion(self, *args: Any, **kwargs: Any) -> int:
        self._report("finish_deletion", args, kwargs)
        return self._world.finish_deletion(*args, **kwargs)

    def write_artifact(self, *args: Any, **kwargs: Any) -> ArtifactManifest:
        self._report("write_artifact", args, kwargs)
        return self._world.write_artifact(*args, **kwargs)

    def read_artifact(self, *args: Any, **kwargs: Any) -> Any:
        self._report("read_artifact", args, kwargs)
        return self._world.read_artifact(*args, **kwargs)

    def list_artifacts(self, *args: Any, **kwargs: Any) -> list[ArtifactManifest]:
        self._report("list_artifacts", args, kwargs)
        return self._world.list_artifacts(*args, **kwargs)

    def run_lock(self, *args: Any, **kwargs: Any) -> contextlib.AbstractContextManager[str]:
        self._report("run_lock", args, kwargs)
        return self._world.run_lock(*args, **kwargs)

    def fence_lock(self, *args: Any, **kwargs: Any) -> contextlib.AbstractContextManager[str]:
        self._report("fence_lock", args, kwargs)
        return self._world.fence_lock(*args, **kwargs)

    def take_slot(self, *args: Any, **kwargs: Any) -> Slot | None:
        self._report("take_slot", args, kwargs)
        return self._world.take_slot(*args, **kwargs)

    def update_document(self, *args: Any, **kwargs: Any) -> Any:
        self._report("update_document", args, kwargs)
        return self._world.update_document(*args, **kwargs)

    def take_number(self, *args: Any, **kwargs: Any) -> int:
        self._report("take_number", args, kwargs)
        return self._world.take_number(*args, **kwargs)

    def memory(self, *args: Any, **kwargs: Any) -> Any:
        self._report("memory", args, kwargs)
        return memory_store_of(self, *args, **kwargs)

    def file_view(self, *args: Any, **kwargs: Any) -> Any:
        self._report("file_view", args, kwargs)
        return file_view_of(self, *args, **kwargs)

    def path(self, *args: Any, **kwargs: Any) -> str:
        self._report("path", args, kwargs)
        return self._world.path(*args, **kwargs)

    def read_file(self, *args: Any, **kwargs: Any) -> bytes | None:
        self._report("read_file", args, kwargs)
        return self._world.read_file(*args, **kwargs)

    def write_file(self, *args: Any, **kwargs: Any) -> None:
        self._report("write_file", args, kwargs)
        self._world.write_file(*args, **kwargs)

    def create_file(self, *args: Any, **kwargs: Any) -> bool:
        self._report("create_file", args, kwargs)
        return self._world.create_file(*args, **kwargs)

    def remove_file(self, *args: Any, **kwargs: Any) -> bool:
        self._report("remove_file", args, kwargs)
        return self._world.remove_file(*args, **kwargs)

    def remove_dir(self, *args: Any, **kwargs: Any) -> None:
        self._report("remove_dir", args, kwargs)
        self._world.remove_dir(*args, **kwargs)

    def list_dir(self, *args: Any, **kwargs: Any) -> list[str]:
        self._report("list_dir", args, kwargs)
        return self._world.list_dir(*args, **kwargs)

    def file_info(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        self._report("file_info", args, kwargs)
        return self._world.file_info(*args, **kwargs)

    def ensure_dir(self, *args: Any, **kwargs: Any) -> None:
        self._report("ensure_dir", args, kwargs)
        self._world.ensure_dir(*args, **kwargs)

    def read_document(self, *args: Any, **kwargs: Any) -> Any | None:
        self._report("read_document", args, kwargs)
        return self._world.read_document(*args, **kwargs)

    def write_document(self, *args: Any, **kwargs: Any) -> None:
        self._report("write_document", args, kwargs)
        self._world.write_document(*args, **kwargs)

    def create_document(self, *args: Any, **kwargs: Any) -> bool:
        self._report("create_document", args, kwargs)
        return self._world.create_document(*args, **kwargs)


def tracing_world(world: WorldLike, on_call: Callable[..., Any]) -> WorldLike:
    return TracingWorld(world, on_call)
