"""Deleting a run crash-safely: a tombstone first, the records, the tombstone last.

`gc/<runId>.json` (a document) names the run and the artifacts it owns. It is written
before anything is removed and removed after everything else, so a crash at any point
leaves the run either whole (no tombstone) or marked. A marked run is finished off by the
next gc, and by the World itself before anything reads or appends to that run id, so a
reused id starts a fresh run and never sees old records.
"""

from __future__ import annotations

from typing import Any

from ..errors import DocumentCorruptError
from .ids import utc_now_iso

TOMBSTONE_DIR = "gc"


def tombstone_path(run_id: str) -> str:
    return f"{TOMBSTONE_DIR}/{run_id}.json"


def marked_runs(world: Any) -> list[str]:
    """Run ids with a tombstone: deletions begun and not finished."""
    return [n[:-5] for n in world.list_dir(TOMBSTONE_DIR) if n.endswith(".json")]


def is_marked(world: Any, run_id: str) -> bool:
    return world.read_file(tombstone_path(run_id)) is not None


def mark_for_deletion(world: Any, run_id: str, artifact_ids: list[str]) -> None:
    """Write the tombstone (atomically replaced, durable) before anything is removed."""
    world.write_document(tombstone_path(run_id), {
        "runId": run_id, "markedAt": utc_now_iso(), "artifactIds": sorted(artifact_ids),
    })


def artifacts_by_run(world: Any) -> dict[str, list[str]]:
    """Artifact ids grouped by the run their manifest names (one pass over manifests)."""
    out: dict[str, list[str]] = {}
    for m in world.list_artifacts():
        out.setdefault(m.run_id, []).append(m.artifact_id)
    return out


def finish_deletion(world: Any, run_id: str) -> int:
    """Remove what the tombstone of `run_id` names, then the tombstone; the bytes freed.
    Every step is idempotent, so finishing twice, or after a crash, is harmless."""
    doc = world.read_document(tombstone_path(run_id))
    if doc is None:
        return 0
    ids = doc.get("artifactIds") if isinstance(doc, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise DocumentCorruptError(world.path(tombstone_path(run_id)),
                                   "artifactIds is not a list of artifact ids")
    freed = 0
    for aid in ids:
        # The manifest before its blob: no manifest ever points at a missing blob.
        freed += _remove_file(world, f"artifacts/{aid}.json")
        freed += _remove_file(world, f"artifacts/blobs/{aid}.bin")
        world.state.known_artifacts.discard(aid)
    freed += _remove_tree(world, f"runs/{run_id}")
    if world.catalogue is not None:
        world.catalogue.forget(run_id)  # before the log: never a summary without one
    freed += world.events.delete_run(run_id)
    # This process forgets the run: a reused id allocates from sequence 1 again (an
    # append holding the old ledger sees it dropped and takes a fresh one).
    world.state.forget(run_id, wait=True)
    world.remove_file(tombstone_path(run_id))
    return freed


def delete_run(world: Any, run_id: str) -> int:
    """Mark (unless already marked) and delete one run; the bytes freed."""
    if not is_marked(world, run_id):
        ids = [m.artifact_id for m in world.list_artifacts(run_id)]
        mark_for_deletion(world, run_id, ids)
    return finish_deletion(world, run_id)


def _remove_file(world: Any, rel: str) -> int:
    found = world.file_info(rel)
    if found is None or found.get("type") != "file":
        return 0
    return int(found.get("size") or 0) if world.remove_file(rel) else 0


def _remove_tree(world: Any, rel: str) -> int:
    """A folder and everything under it, files first, deepest first."""
    found = world.file_info(rel)
    if found is None:
        return 0
    if found.get("type") == "file":
        return _remove_file(world, rel)
    freed = sum(_remove_tree(world, f"{rel}/{name}") for name in world.list_dir(rel))
    world.remove_dir(rel)
    return freed


def tree_size(world: Any, rel: str) -> int:
    """Bytes of the files under a folder (what removing it would free)."""
    found = world.file_info(rel)
    if found is None:
        return 0
    if found.get("type") == "file":
        return int(found.get("size") or 0)
    return sum(tree_size(world, f"{rel}/{name}") for name in world.list_dir(rel))
