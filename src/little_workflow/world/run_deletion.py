"""Deleting a run crash-safely: a tombstone first, the records, the tombstone last.

`gc/<runId>.json` (a document) names the run and the artifacts it owns. It is written
before anything is removed and removed after everything else, so a crash at any point
leaves the run either whole (no tombstone) or marked. A marked run is finished off by the
next gc, and by the World itself before anything reads or appends to that run id, so a
reused id starts a fresh run and never sees old records.
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import DocumentCorruptError
from .files import FilesLike
from .ids import utc_now_iso

TOMBSTONE_DIR = "gc"


def tombstone_path(run_id: str) -> str:
    return f"{TOMBSTONE_DIR}/{run_id}.json"


def marked_runs(files: FilesLike) -> list[str]:
    """Run ids with a tombstone: deletions begun and not finished."""
    return [n[:-5] for n in files.list_dir(TOMBSTONE_DIR) if n.endswith(".json")]


def is_marked(files: FilesLike, run_id: str) -> bool:
    return files.read_file(tombstone_path(run_id)) is not None


def mark_for_deletion(files: FilesLike, run_id: str, artifact_ids: list[str]) -> None:
    """Write the tombstone (atomically replaced, durable) before anything is removed."""
    files.write_document(tombstone_path(run_id), {
        "runId": run_id, "markedAt": utc_now_iso(), "artifactIds": sorted(artifact_ids),
    })


def artifacts_by_run(world: Any) -> dict[str, list[str]]:
    """Artifact ids grouped by the run their manifest names (one pass over manifests)."""
    out: dict[str, list[str]] = {}
    for m in world.list_artifacts():
        out.setdefault(m.run_id, []).append(m.artifact_id)
    return out


def finish_deletion(files: FilesLike, run_id: str, *, forget_artifact: Callable[[str], None],
                    remove_log: Callable[[str], int]) -> int:
    """Remove what the tombstone of `run_id` names — each artifact (then
    `forget_artifact(id)`), `runs/<runId>/`, then the log (`remove_log(run_id)`, which
    returns the bytes it freed) — and the tombstone last; the bytes freed. Every step is
    idempotent, so finishing twice, or after a crash, is harmless."""
    doc = files.read_document(tombstone_path(run_id))
    if doc is None:
        return 0
    ids = doc.get("artifactIds") if isinstance(doc, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise DocumentCorruptError(files.path(tombstone_path(run_id)),
                                   "artifactIds is not a list of artifact ids")
    freed = 0
    for aid in ids:
        # The manifest before its blob: no manifest ever points at a missing blob.
        freed += _remove_file(files, f"artifacts/{aid}.json")
        freed += _remove_file(files, f"artifacts/blobs/{aid}.bin")
        forget_artifact(aid)
    freed += _remove_tree(files, f"runs/{run_id}")
    freed += remove_log(run_id)
    files.remove_file(tombstone_path(run_id))
    return freed


def _remove_file(files: FilesLike, rel: str) -> int:
    found = files.file_info(rel)
    if found is None or found.get("type") != "file":
        return 0
    return int(found.get("size") or 0) if files.remove_file(rel) else 0


def _remove_tree(files: FilesLike, rel: str) -> int:
    """A folder and everything under it, files first, deepest first."""
    found = files.file_info(rel)
    if found is None:
        return 0
    if found.get("type") == "file":
        return _remove_file(files, rel)
    freed = sum(_remove_tree(files, f"{rel}/{name}") for name in files.list_dir(rel))
    files.remove_dir(rel)
    return freed


def tree_size(files: FilesLike, rel: str) -> int:
    """Bytes of the files under a folder (what removing it would free)."""
    found = files.file_info(rel)
    if found is None:
        return 0
    if found.get("type") == "file":
        return int(found.get("size") or 0)
    return sum(tree_size(files, f"{rel}/{name}") for name in files.list_dir(rel))
