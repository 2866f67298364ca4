"""Memory stores: small files of policies, runbooks and learned notes, one folder a scope.

`memory/org/`, `memory/pipelines/<pipelineKey>/`, `memory/workflows/<workflowId>/`.
Created lazily on first write; every write replaces its file atomically.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from ..errors import LittleWorkflowError, WorldPathError
from .ids import validate_name

_SEGMENT = re.compile(r"[A-Za-z0-9_.-]+")
_MISSING = object()


class MemoryReadOnlyError(LittleWorkflowError, PermissionError):
    def __init__(self, scope: str, path: str):
        self.scope, self.path = scope, path
        super().__init__(
            f"memory scope {scope!r} is read-only inside runs (tried to write {path!r}); "
            "pre-populate it with world.memory('org')"
        )


def validate_memory_path(path: Any) -> str:
    if not isinstance(path, str) or not path:
        raise WorldPathError(f"invalid memory path {path!r}")
    for seg in path.split("/"):
        if not _SEGMENT.fullmatch(seg) or set(seg) == {"."} or seg.startswith(".tmp-"):
            raise WorldPathError(f"invalid memory path {path!r}: segments are [A-Za-z0-9_.-]+")
    return path


def scope_dir(scope: str, key: str | None) -> str:
    if scope == "org":
        return "memory/org"
    if scope == "pipeline":
        return f"memory/pipelines/{validate_name('pipeline key', key)}"
    if scope == "workflow":
        return f"memory/workflows/{validate_name('workflow id', key)}"
    raise ValueError(f"unknown memory scope {scope!r}: use 'org', 'pipeline' or 'workflow'")


class MemoryStore:
    """A folder of memory files with synchronous read/write helpers."""

    def __init__(
        self,
        world: Any,
        scope: str,
        key: str | None = None,
        *,
        read_only: bool = False,
        on_write: Callable[[str, bytes], bool] | None = None,
    ):
        self.world = world
        self.scope = scope
        self.key = key
        self.root = world.path(scope_dir(scope, key))
        self.read_only = read_only
        self._on_write = on_write  # journals the write; False means "do not write" (replay)

    def __repr__(self) -> str:
        return f"<MemoryStore {self.scope} {self.root}>"

    def _path(self, path: str) -> str:
        return f"{self.root}/{validate_memory_path(path)}"

    def read_bytes(self, path: str, default: Any = _MISSING) -> Any:
        data = self.world.publisher.read(self._path(path))
        if data is None:
            if default is _MISSING:
                raise FileNotFoundError(f"memory {self.scope}: no file {path!r}")
            return default
        return data

    def read_text(self, path: str, default: Any = _MISSING) -> Any:
        data = self.read_bytes(path, default=_MISSING if default is _MISSING else None)
        return default if data is None else data.decode("utf-8")

    def read_json(self, path: str, default: Any = _MISSING) -> Any:
        data = self.read_bytes(path, default=_MISSING if default is _MISSING else None)
        return default if data is None else json.loads(data)

    def write_bytes(self, path: str, data: bytes) -> None:
        full = self._path(path)
        if self.read_only:
            raise MemoryReadOnlyError(self.scope, path)
        if self._on_write is not None and not self._on_write(path, data):
            return
        # One writer at a time per store in this process, so a write is never torn by
        # another thread's write to the same store.
        with self.world.state.named_lock("memory:" + self.root):
            self.world.publisher.ensure_dir(full.rsplit("/", 1)[0])
            self.world.publisher.replace(full, data)

    def write_text(self, path: str, text: str) -> None:
        self.write_bytes(path, text.encode("utf-8"))

    def write_json(self, path: str, value: Any) -> None:
        self.write_bytes(path, json.dumps(value, ensure_ascii=False, sort_keys=True).encode())

    def list(self) -> list[str]:
        out: list[str] = []

        def walk(prefix: str, rel: str) -> None:
            for name in self.world.publisher.list_names(prefix):
                child = f"{prefix}/{name}"
                child_rel = f"{rel}{name}"
                if self.world.publisher.read(child) is not None:
                    out.append(child_rel)
                else:
                    walk(child, child_rel + "/")

        walk(self.root, "")
        return sorted(out)

    @property
    def fs(self) -> Any:
        """An fsspec view rooted at the store (read-only stores refuse writes there too)."""
        from fsspec.implementations.dirfs import DirFileSystem

        self.world.publisher.ensure_dir(self.root)
        view = DirFileSystem(path=self.root, fs=self.world.files)
        if self.read_only:
            from fs_adapters.views import ReadOnlyFileSystem

            return ReadOnlyFileSystem(view, label=f"memory {self.scope}")
        return view
