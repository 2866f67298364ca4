"""Memory inside a run: `ctx.memory.org` (read-only), `.pipeline`, `.workflow`.

Every change inside a run — a write, or a removal from a bash mount — is journaled as
`memory.written` with the content hash *before* the file changes (`memory.write_failed`
follows when the change then fails), so whatever changed memory is always traceable to a
run and step (a mitigation for memory poisoning). Replays journal and write nothing.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from ..errors import ReplayDivergenceError
from ..world.ids import canonical_json, sha256_hex
from ..world.memory_store import MemoryStore
from .steps import current_step_or_none, error_record
from .values import stored_value


def pipeline_key(definition_hashes: list[str]) -> str:
    """`pk_` + 16 hex of the sorted set of workflow definition hashes."""
    return "pk_" + sha256_hex(canonical_json(sorted(set(definition_hashes))))[:16]


class MemoryJournal:
    """Journals the changes to one memory scope made inside a run."""

    def __init__(self, memory: "RunMemory", scope: str, key: str):
        self.memory, self.scope, self.key = memory, scope, key

    def before(self, path: str, data: bytes | None) -> bool:
        ctx = self.memory.ctx
        if ctx.replaying:
            return False
        step = current_step_or_none()
        step_path = step.step_path if step is not None else None
        index = self.memory.next_change_index()
        content_hash = None if data is None else "sha256:" + hashlib.sha256(data).hexdigest()
        idem = "mem_" + sha256_hex(canonical_json(
            {"runId": ctx.run_id, "scope": self.scope, "path": path, "index": index,
             "stepPath": step_path, "contentHash": content_hash}))[:32]
        written = ("memory.written", self.scope, path, idem)
        if written in ctx.log.marks:  # journaled by an earlier execution: written again
            ctx.asked(written)
            return True
        ctx.append_sync("memory.written", {
            "scope": self.scope, "key": self.key, "path": path, "contentHash": content_hash,
            "sizeBytes": None if data is None else len(data), "stepPath": step_path,
            "deleted": data is None,
        }, idempotency_key=idem)
        return True

    def failed(self, path: str, error: BaseException) -> None:
        self.memory.ctx.append_sync("memory.write_failed", {
            "scope": self.scope, "key": self.key, "path": path, "error": error_record(error)})


class MemoryReads:
    """Records what the workflow body reads from one memory scope (`memory.read`), and
    serves a resumed or replayed run what the first execution read, in call order per
    path — even if the memory has changed since. Reads inside a step function are not
    recorded: the step's output is."""

    def __init__(self, memory: "RunMemory", scope: str):
        self.memory, self.scope = memory, scope
        self._counts: dict[str, int] = {}

    def __call__(self, path: str, data: bytes | None) -> bytes | None:
        if current_step_or_none() is not None:
            return data
        ctx = self.memory.ctx
        index = self._counts.get(path, 0)
        self._counts[path] = index + 1
        recorded = ctx.log.memory_reads.get((self.scope, path, index))
        if recorded is not None:
            ctx.asked(("memory", self.scope, path, index))
            return _decode(stored_value(ctx.world, recorded))
        if ctx.replaying:
            raise ReplayDivergenceError(ctx.run_id, f"memory {self.scope}/{path}",
                                        "the code reads memory the log holds no record of")
        ctx.append_sync("memory.read", {
            "scope": self.scope, "path": path, "index": index, **_encode(data),
        }, idempotency_key=f"memory.read:{self.scope}:{path}:{index}")
        return data


def _encode(data: bytes | None) -> dict[str, Any]:
    if data is None:
        return {"contentHash": None, "content": None, "encoding": None}
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    try:
        return {"contentHash": digest, "content": data.decode("utf-8"), "encoding": "utf8"}
    except UnicodeDecodeError:
        return {"contentHash": digest, "content": base64.b64encode(data).decode(),
                "encoding": "base64"}


def _decode(payload: dict[str, Any]) -> bytes | None:
    content = payload.get("content")
    if content is None:
        return None
    if payload.get("encoding") == "base64":
        return base64.b64decode(content)
    return str(content).encode("utf-8")


class RunMemory:
    def __init__(self, ctx: Any):
        self.ctx = ctx
        self._changes = 0
        self.org = MemoryStore(ctx.world, "org", read_only=True, on_read=MemoryReads(self, "org"))
        pipeline = ctx.pipeline
        key = pipeline.key if pipeline is not None else pipeline_key([ctx.workflow.definition_hash])
        self.pipeline = MemoryStore(ctx.world, "pipeline", key,
                                    journal=MemoryJournal(self, "pipeline", key),
                                    on_read=MemoryReads(self, "pipeline"))
        self.workflow = MemoryStore(ctx.world, "workflow", ctx.workflow.id,
                                    journal=MemoryJournal(self, "workflow", ctx.workflow.id),
                                    on_read=MemoryReads(self, "workflow"))

    def next_change_index(self) -> int:
        index = self._changes
        self._changes += 1
        return index
