"""Memory inside a run: `ctx.memory.org` (read-only), `.pipeline`, `.workflow`.

Every write inside a run is journaled as `memory.written` with the content hash *before*
the file changes, so whatever changed memory is always traceable to a run and step
(a mitigation for memory poisoning). Replays journal and write nothing.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from ..world.ids import canonical_json, sha256_hex
from ..world.memory_store import MemoryStore

if TYPE_CHECKING:
    from .context import RunContext


def pipeline_key(definition_hashes: list[str]) -> str:
    """`pk_` + 16 hex of the sorted set of workflow definition hashes."""
    return "pk_" + sha256_hex(canonical_json(sorted(set(definition_hashes))))[:16]


class RunMemory:
    def __init__(self, ctx: "RunContext"):
        self._ctx = ctx
        self._writes = 0
        self.org = MemoryStore(ctx.world, "org", read_only=True)
        pipeline = ctx.pipeline
        key = pipeline.key if pipeline is not None else pipeline_key([ctx.workflow.definition_hash])
        self.pipeline = MemoryStore(ctx.world, "pipeline", key, on_write=self._journal("pipeline", key))
        self.workflow = MemoryStore(ctx.world, "workflow", ctx.workflow.id,
                                    on_write=self._journal("workflow", ctx.workflow.id))

    def _journal(self, scope: str, key: str) -> Any:
        def on_write(path: str, data: bytes) -> bool:
            ctx = self._ctx
            if ctx.replaying:
                return False
            from .steps import _current

            step = _current.get()
            index = self._writes
            self._writes += 1
            content_hash = "sha256:" + hashlib.sha256(data).hexdigest()
            step_path = step.step_path if step is not None else None
            idem = "mem_" + sha256_hex(canonical_json(
                {"runId": ctx.run_id, "scope": scope, "path": path, "index": index,
                 "stepPath": step_path, "contentHash": content_hash}))[:32]
            ctx.append_sync("memory.written", {
                "scope": scope, "key": key, "path": path, "contentHash": content_hash,
                "sizeBytes": len(data), "stepPath": step_path,
            }, idempotency_key=idem)
            return True

        return on_write
