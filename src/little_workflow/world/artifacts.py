"""Content-addressed artifacts: blob then manifest, both published atomically; every
read re-hashes the blob against its manifest."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..errors import (
    ArtifactHashMismatchError,
    ArtifactManifestCorruptError,
    ArtifactNotFoundError,
    WorldPathError,
)
from .ids import (
    ARTIFACT_ID_RE,
    ARTIFACT_REF_PREFIX,
    artifact_id,
    artifact_ref,
    canonical_bytes,
    utc_now_iso,
    validate_run_id,
    validate_step_path,
)
from .models import ArtifactManifest
from .publish import Publisher
from .shared_state import StorageState
from .storage_errors import storage_error

ENCODINGS = ("json", "utf8", "binary")


def encode_payload(payload: Any, encoding: str) -> bytes:
    if encoding == "json":
        try:
            return canonical_bytes(payload)
        except (TypeError, ValueError) as e:
            raise TypeError(f"artifact payload is not JSON-serialisable: {e}") from None
    if encoding == "utf8":
        if not isinstance(payload, str):
            raise TypeError(f"utf8 artifacts take a str, not {type(payload).__name__}")
        return payload.encode("utf-8")
    if encoding == "binary":
        if isinstance(payload, bytes):
            return payload  # no copy: artifacts can be large
        if not isinstance(payload, (bytearray, memoryview)):
            raise TypeError(f"binary artifacts take bytes, not {type(payload).__name__}")
        return bytes(payload)
    raise ValueError(f"unknown artifact encoding {encoding!r}: use one of {', '.join(ENCODINGS)}")


def decode_payload(data: bytes, encoding: str) -> Any:
    if encoding == "json":
        return json.loads(data)
    if encoding == "utf8":
        return data.decode("utf-8")
    return data


def parse_ref(ref: Any) -> str:
    if not isinstance(ref, str):
        raise ArtifactNotFoundError(repr(ref), "an artifact ref is a string artifact://art_…")
    aid = ref[len(ARTIFACT_REF_PREFIX):] if ref.startswith(ARTIFACT_REF_PREFIX) else ref
    if ARTIFACT_ID_RE.fullmatch(aid) is None:
        # A forged ref must not become a path: nothing outside artifacts/ is ever read.
        raise ArtifactNotFoundError(ref, "not a well-formed artifact://art_<16 hex> reference")
    return aid


class ArtifactStore:
    def __init__(self, publisher: Publisher, root: str, state: StorageState, clock: Any = None):
        self.publisher = publisher
        self.clock = clock
        self.root = root
        self.state = state

    def manifest_path(self, aid: str) -> str:
        return f"{self.root}/artifacts/{aid}.json"

    def blob_path(self, aid: str) -> str:
        return f"{self.root}/artifacts/blobs/{aid}.bin"

    def write(
        self,
        run_id: str,
        step_path: str,
        name: str,
        payload: Any,
        *,
        content_type: str,
        encoding: str,
    ) -> ArtifactManifest:
        validate_run_id(run_id)
        if step_path:
            validate_step_path(step_path)
        if not isinstance(name, str) or not name:
            raise WorldPathError(f"invalid artifact name {name!r}: a non-empty string")
        if encoding not in ENCODINGS:
            raise ValueError(
                f"unknown artifact encoding {encoding!r}: use one of {', '.join(ENCODINGS)}"
            )
        data = encode_payload(payload, encoding)
        digest = hashlib.sha256(data).hexdigest()
        aid = artifact_id(run_id, step_path, name, content_type, encoding, "sha256:" + digest)
        existing = self._read_manifest_if_valid(aid)
        if existing is not None:
            return existing  # same inputs, same id: writing again is a no-op
        manifest = ArtifactManifest(
            artifact_id=aid,
            artifact_ref=artifact_ref(aid),
            run_id=run_id,
            step_path=step_path,
            name=name,
            content_type=content_type,
            encoding=encoding,
            sha256=digest,
            size_bytes=len(data),
            created_at=utc_now_iso(self.clock.now() if self.clock is not None else None),
        )
        try:
            self._publish(aid, data, manifest)
        except OSError as e:  # disk full, read-only: the manifest is never published
            raise storage_error(e, self.manifest_path(aid)) from None
        self.state.known_artifacts.add(aid)
        return manifest

    def _publish(self, aid: str, data: bytes, manifest: ArtifactManifest) -> None:
        blob_path = self.blob_path(aid)
        if not self.publisher.publish_if_absent(blob_path, data):
            # A blob is already there (an earlier writer, maybe killed before its
            # manifest). Keep it only if it holds exactly these bytes.
            if self.publisher.read(blob_path) != data:
                self.publisher.replace(blob_path, data)
        # The manifest goes last: a manifest never points at a blob that is not complete.
        manifest_bytes = json.dumps(manifest.to_json_dict(), sort_keys=True).encode()
        if not self.publisher.publish_if_absent(self.manifest_path(aid), manifest_bytes):
            if self._read_manifest_if_valid(aid) is None:
                self.publisher.replace(self.manifest_path(aid), manifest_bytes)

    def _read_manifest_if_valid(self, aid: str) -> ArtifactManifest | None:
        try:
            manifest = self.read_manifest(aid)
            self._read_verified_blob(manifest)
            return manifest
        except (ArtifactNotFoundError, ArtifactManifestCorruptError, ArtifactHashMismatchError):
            return None

    def read_manifest(self, ref_or_id: str) -> ArtifactManifest:
        aid = parse_ref(ref_or_id)
        path = self.manifest_path(aid)
        raw = self.publisher.read(path)
        if raw is None:
            raise ArtifactNotFoundError(artifact_ref(aid))
        try:
            doc = json.loads(raw)
            manifest = ArtifactManifest.model_validate(doc)
        except ValueError as e:
            raise ArtifactManifestCorruptError(
                artifact_ref(aid), path, str(e).splitlines()[0]) from None
        expected = artifact_id(
            manifest.run_id,
            manifest.step_path,
            manifest.name,
            manifest.content_type,
            manifest.encoding,
            "sha256:" + manifest.sha256,
        )
        if manifest.artifact_id != aid or expected != aid:
            raise ArtifactManifestCorruptError(
                artifact_ref(aid), path, "its fields do not derive the artifact id"
            )
        if manifest.encoding not in ENCODINGS:
            raise ArtifactManifestCorruptError(
                artifact_ref(aid), path, f"unknown encoding {manifest.encoding!r}"
            )
        return manifest

    def _read_verified_blob(self, manifest: ArtifactManifest) -> bytes:
        path = self.blob_path(manifest.artifact_id)
        data = self.publisher.read(path)
        if data is None:
            raise ArtifactNotFoundError(manifest.artifact_ref, f"its blob {path} is missing")
        actual = hashlib.sha256(data).hexdigest()
        if actual != manifest.sha256:
            raise ArtifactHashMismatchError(
                manifest.artifact_ref, path, "sha256:" + manifest.sha256, "sha256:" + actual
            )
        if len(data) != manifest.size_bytes:
            raise ArtifactManifestCorruptError(
                manifest.artifact_ref,
                self.manifest_path(manifest.artifact_id),
                f"sizeBytes is {manifest.size_bytes}, the blob has {len(data)} bytes",
            )
        return data

    def read(self, ref: str) -> Any:
        manifest = self.read_manifest(ref)
        data = self._read_verified_blob(manifest)
        try:
            return decode_payload(data, manifest.encoding)
        except ValueError as e:
            raise ArtifactManifestCorruptError(
                manifest.artifact_ref, self.manifest_path(manifest.artifact_id), str(e)
            ) from None

    def require(self, ref: str) -> None:
        """Artifact-reference validation for event payloads: the manifest must exist."""
        aid = parse_ref(ref)
        if aid in self.state.known_artifacts:
            return
        self.read_manifest(aid)
        self.state.known_artifacts.add(aid)

    def list_ids(self) -> list[str]:
        return [
            n[:-5]
            for n in self.publisher.list_names(f"{self.root}/artifacts")
            if n.endswith(".json") and ARTIFACT_ID_RE.fullmatch(n[:-5])
        ]
