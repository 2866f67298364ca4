"""Memory stores: small files of policies, runbooks and learned notes, one folder a scope.

`memory/org/`, `memory/pipelines/<pipelineKey>/`, `memory/workflows/<workflowId>/`.
Created lazily on first write; every write replaces its file atomically (World.write_file).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable

from ..errors import LittleWorkflowError, WorldPathError
from .ids import validate_name
from .views import ChangeJournal, journaled

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
    """A folder of memory files with synchronous read/write helpers, all through the
    World's file methods. A `journal` is told of every write or removal (a run journals
    them as `memory.written`); `on_read(path, data)` may record or replace what a read
    returns (a run's workflow body records its reads)."""

    def __init__(
        self,
        world: Any,
        scope: str,
        key: str | None = None,
        *,
        read_only: bool = False,
        journal: ChangeJournal | None = None,
        on_read: Callable[[str, bytes | None], bytes | None] | None = None,
    ):
        self.world = world
        self.scope = scope
        self.key = key
        self.root = scope_dir(scope, key)  # relative to the data dir
        self.read_only = read_only
        self.journal = journal
        self.on_read = on_read  # a run records what it read (and is served it on replay)

    def __repr__(self) -> str:
        return f"<MemoryStore {self.scope} {self.root}>"

    def _path(self, path: str) -> str:
        return f"{self.root}/{validate_memory_path(path)}"

    def read_bytes(self, path: str, default: Any = _MISSING) -> Any:
        data = self.world.read_file(self._path(path))
        if self.on_read is not None:
            data = self.on_read(path, data)
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
        journaled(self.journal, path, data, lambda: self.world.write_file(full, data))

    def write_text(self, path: str, text: str) -> None:
        self.write_bytes(path, text.encode("utf-8"))

    def write_json(self, path: str, value: Any) -> None:
        self.write_bytes(path, json.dumps(value, ensure_ascii=False, sort_keys=True).encode())

    def list(self) -> list[str]:
        out: list[str] = []

        def walk(prefix: str, rel: str) -> None:
            for name in self.world.list_dir(prefix):
                info = self.world.file_info(f"{prefix}/{name}")
                if info is None:
                    continue
                if info["type"] == "file":
                    out.append(rel + name)
                else:
                    walk(f"{prefix}/{name}", f"{rel}{name}/")

        walk(self.root, "")
        return sorted(out)

    @property
    def fs(self) -> Any:
        """An fsspec view rooted at the store, through the World (read-only stores refuse
        writes there too; writes in a run are journaled like write_bytes)."""
        return self.world.file_view(self.root, read_only=self.read_only, journal=self.journal)
