"""Memory inside a run: `ctx.memory.org` (read-only), `.pipeline`, `.workflow`.

Every change inside a run — a write, or a removal from a bash mount — is journaled as
`memory.written` with the content hash *before* the file changes (`memory.write_failed`
follows when the change then fails), so whatever changed memory is always traceable to a
run and step (a mitigation for memory poisoning). Replays journal and write nothing.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..world.ids import canonical_json, sha256_hex
from ..world.memory_store import MemoryStore
from .steps import current_step_or_none, error_record


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
        ctx.append_sync("memory.written", {
            "scope": self.scope, "key": self.key, "path": path, "contentHash": content_hash,
            "sizeBytes": None if data is None else len(data), "stepPath": step_path,
            "deleted": data is None,
        }, idempotency_key=idem)
        return True

    def failed(self, path: str, error: BaseException) -> None:
        self.memory.ctx.append_sync("memory.write_failed", {
            "scope": self.scope, "key": self.key, "path": path, "error": error_record(error)})


class RunMemory:
    def __init__(self, ctx: Any):
        self.ctx = ctx
        self._changes = 0
        self.org = MemoryStore(ctx.world, "org", read_only=True)
        pipeline = ctx.pipeline
        key = pipeline.key if pipeline is not None else pipeline_key([ctx.workflow.definition_hash])
        self.pipeline = MemoryStore(ctx.world, "pipeline", key,
                                    journal=MemoryJournal(self, "pipeline", key))
        self.workflow = MemoryStore(ctx.world, "workflow", ctx.workflow.id,
                                    journal=MemoryJournal(self, "workflow", ctx.workflow.id))

    def next_change_index(self) -> int:
        index = self._changes
        self._changes += 1
        return index
