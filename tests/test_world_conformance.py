"""The World conformance suite: every World and filesystem must pass all of it."""

from __future__ import annotations

import hashlib
import json
import os
import threading

import pytest
from checkout import SRC

import little_workflow as lw
from little_workflow.world.ids import canonical_json

RUN = "run_conformance1"


def digest(type_, payload):
    body = json.dumps({"type": type_, "payload": payload}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


def test_envelope_ids_digests_and_contiguous_sequences(world):
    events = [world.append_event(RUN, "step.started", {"stepPath": f"s{i}", "n": i}) for i in range(5)]
    assert [e.sequence for e in events] == [1, 2, 3, 4, 5]
    for e in events:
        expected_id = "evt_" + hashlib.sha256(
            canonical_json({"runId": RUN, "sequence": e.sequence}).encode()).hexdigest()[:32]
        assert e.event_id == expected_id
        assert e.request_digest == digest(e.type, e.payload)
        assert set(e.to_json_dict()) == {"eventId", "runId", "sequence", "type", "payload",
                                         "createdAt", "appendIdempotencyKey", "requestDigest"}
    listed = world.list_events(RUN)
    assert [e.to_json_dict() for e in listed] == [e.to_json_dict() for e in events]
    assert [e.sequence for e in world.list_events(RUN, after=3)] == [4, 5]
    assert world.list_events(RUN, after=5) == []
    assert world.list_runs() == [RUN]


def test_events_are_frozen_but_equal_to_plain_json(world):
    payload = {"a": [1, {"b": "c"}], "n": None}
    e = world.append_event(RUN, "t", payload)
    payload["a"].append(99)  # the caller's own object stays theirs; the event kept a copy
    assert e.payload == {"a": [1, {"b": "c"}], "n": None}
    with pytest.raises(TypeError):
        e.payload["x"] = 1
    with pytest.raises(TypeError):
        e.payload["a"].append(2)
    with pytest.raises(TypeError):
        e.payload["a"][1]["b"] = "d"
    with pytest.raises(Exception):
        e.sequence = 7
    again = world.list_events(RUN)[0]
    assert again.payload == {"a": [1, {"b": "c"}], "n": None}
    with pytest.raises(TypeError):
        again.payload["a"].clear()


def test_idempotency_keys(make_world):
    world = make_world()
    first = world.append_event(RUN, "harness.tool_call.started", {"x": 1}, idempotency_key="k1")
    world.append_event(RUN, "other", {})
    again = world.append_event(RUN, "harness.tool_call.started", {"x": 1}, idempotency_key="k1")
    assert (again.sequence, again.event_id) == (first.sequence, first.event_id)
    assert again.to_json_dict() == first.to_json_dict()
    with pytest.raises(lw.IdempotencyConflictError) as info:
        world.append_event(RUN, "harness.tool_call.started", {"x": 2}, idempotency_key="k1")
    assert info.value.run_id == RUN and "k1" in str(info.value)
    # keys are per run
    assert world.append_event("run_other", "t", {"x": 5}, idempotency_key="k1").sequence == 1
    # a fresh World (a restarted caller that never saw the first answer) gets it too
    reopened = make_world.reopen()
    assert reopened.append_event(RUN, "harness.tool_call.started", {"x": 1},
                                 idempotency_key="k1").sequence == 1
    with pytest.raises(lw.IdempotencyConflictError):
        reopened.append_event(RUN, "harness.tool_call.started", {"x": 3}, idempotency_key="k1")
    assert [e.sequence for e in reopened.list_events(RUN)] == [1, 2]


def test_artifact_refs_must_exist(world):
    m = world.write_artifact(RUN, "s", "doc", {"k": "v"})
    ok = world.append_event(RUN, "step.succeeded", {"outputRef": m.artifact_ref,
                                                    "deep": [{"x": [m.artifact_ref]}]})
    assert ok.sequence == 1
    forged = "artifact://art_0123456789abcdef"
    for payload in ({"ref": forged}, {"deep": [1, {"x": [forged]}]}, {forged: 1},
                    {"r": "artifact://../../etc/passwd"}):
        with pytest.raises(lw.ArtifactNotFoundError):
            world.append_event(RUN, "step.succeeded", payload)
    assert [e.sequence for e in world.list_events(RUN)] == [1]
    # the receipt lookup comes first: a repeated key returns even with a forged ref later
    world.append_event(RUN, "a", {"ref": m.artifact_ref}, idempotency_key="kk")
    assert world.append_event(RUN, "a", {"ref": m.artifact_ref}, idempotency_key="kk").sequence == 2


@pytest.mark.parametrize("bad", ["", "run_", "run", "x_abc", "run_a b", "run_../x", "../run_a",
                                 "run_a/b", "run_" + "a" * 81, None, 5, "run_a\n", "run_é"])
def test_bad_run_ids_write_nothing(world, bad):
    with pytest.raises(lw.WorldPathError):
        world.append_event(bad, "t", {})
    with pytest.raises(lw.WorldPathError):
        world.write_artifact(bad, "s", "n", {})
    with pytest.raises(lw.WorldPathError):
        world.list_events(bad)
    assert world.list_runs() == []
    assert world.list_artifacts() == []


@pytest.mark.parametrize("payload", [{"x": object()}, {"x": float("nan")}, {1: "a"},
                                     {"x": {1, 2}}, {"x": b"bytes"}])
def test_non_json_payloads_write_nothing(world, payload):
    with pytest.raises(lw.EventPayloadError):
        world.append_event(RUN, "t", payload)
    assert world.list_events(RUN) == []
    assert world.list_runs() == []


def test_artifacts_content_addressed_three_encodings(world):
    for encoding, payload, ct in (("json", {"b": [1, 2], "a": "é"}, "application/json"),
                                  ("utf8", "héllo\n", "text/plain"),
                                  ("binary", b"\x00\x01\xff", "application/octet-stream")):
        m = world.write_artifact(RUN, "steps/a", "out", payload, content_type=ct, encoding=encoding)
        if encoding == "json":
            raw = canonical_json(payload).encode()
        elif encoding == "utf8":
            raw = payload.encode()
        else:
            raw = payload
        payload_hash = "sha256:" + hashlib.sha256(raw).hexdigest()
        expected = "art_" + hashlib.sha256(canonical_json({
            "runId": RUN, "stepPath": "steps/a", "name": "out", "contentType": ct,
            "encoding": encoding, "payloadHash": payload_hash}).encode()).hexdigest()[:16]
        assert m.artifact_id == expected
        assert m.artifact_ref == "artifact://" + expected
        assert m.size_bytes == len(raw)
        assert world.read_artifact(m.artifact_ref) == payload
        again = world.write_artifact(RUN, "steps/a", "out", payload, content_type=ct, encoding=encoding)
        assert again.artifact_id == m.artifact_id
        assert set(m.to_json_dict()) == {"artifactId", "artifactRef", "runId", "stepPath", "name",
                                         "contentType", "encoding", "sha256", "sizeBytes", "createdAt"}
    assert len(world.list_artifacts(RUN)) == 3


def test_artifact_tampering_is_detected(make_world):
    world = make_world()
    fs = world.files
    m = world.write_artifact(RUN, "s", "doc", {"k": "v"})
    blob = world.path("artifacts", "blobs", m.artifact_id + ".bin")
    manifest = world.path("artifacts", m.artifact_id + ".json")
    original_blob = fs.cat_file(blob)
    fs.pipe_file(blob, b'{"k":"evil"}')
    with pytest.raises(lw.ArtifactHashMismatchError) as info:
        make_world.reopen().read_artifact(m.artifact_ref)
    assert isinstance(info.value, lw.RuntimeIntegrityError)
    fs.pipe_file(blob, original_blob)
    doc = json.loads(fs.cat_file(manifest))
    doc["sizeBytes"] += 5
    fs.pipe_file(manifest, json.dumps(doc).encode())
    with pytest.raises(lw.ArtifactManifestCorruptError) as info2:
        make_world.reopen().read_artifact(m.artifact_ref)
    assert isinstance(info2.value, lw.RuntimeIntegrityError)
    fs.pipe_file(manifest, b"{not json")
    with pytest.raises(lw.ArtifactManifestCorruptError):
        make_world.reopen().read_artifact(m.artifact_ref)
    with pytest.raises(lw.ArtifactNotFoundError):
        world.read_artifact("artifact://art_ffffffffffffffff")
    with pytest.raises(lw.ArtifactNotFoundError):
        world.read_artifact("artifact://../events")


def test_reopen_sees_everything_and_continues(make_world):
    w1 = make_world()
    for i in range(3):
        w1.append_event(RUN, "t", {"i": i})
    m = w1.write_artifact(RUN, "s", "n", "text", content_type="text/plain", encoding="utf8")
    w2 = make_world.reopen()
    assert [e.payload["i"] for e in w2.list_events(RUN)] == [0, 1, 2]
    assert w2.append_event(RUN, "t", {"i": 3}).sequence == 4
    assert w2.read_artifact(m.artifact_ref) == "text"
    assert w2.list_runs() == [RUN]


def test_two_worlds_over_one_filesystem_never_lose_or_duplicate(make_world):
    a, b = make_world(), make_world()
    n_threads, per_thread = 4, 25
    errors = []

    def appender(world, tag):
        try:
            for i in range(per_thread):
                world.append_event(RUN, "t", {"tag": tag, "i": i})
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=appender, args=(a if t % 2 else b, t)) for t in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    events = make_world.reopen().list_events(RUN)
    assert [e.sequence for e in events] == list(range(1, n_threads * per_thread + 1))
    assert sorted((e.payload["tag"], e.payload["i"]) for e in events) == sorted(
        (t, i) for t in range(n_threads) for i in range(per_thread))


def test_tracing_world_keeps_files_and_reports(world):
    calls = []
    traced = lw.tracing_world(world, lambda name, args, kwargs: calls.append(name))
    assert traced.files is world.files and traced.data_dir == world.data_dir
    traced.append_event(RUN, "t", {})
    traced.list_events(RUN)
    assert calls == ["append_event", "list_events"]
    assert world.list_events(RUN)[0].sequence == 1
    names = []
    lw.tracing_world(world, names.append).write_artifact(RUN, "s", "n", {"a": 1})
    assert names == ["write_artifact"]  # a one-argument callback gets the method name


def test_worlds_from_one_url_share_one_filesystem_across_threads():
    import uuid

    url = f"memory://shared-{uuid.uuid4().hex}"
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(lw.virtual_world(url))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    main = lw.virtual_world(url)
    assert all(w.files is main.files for w in seen)
    assert main.data_dir == "/" + url.split("://")[1]
    seen[0].append_event(RUN, "t", {})
    assert [e.sequence for e in main.list_events(RUN)] == [1]  # they coordinate
    with main.run_lock(RUN):
        with pytest.raises(lw.RunLockedError):
            with seen[1].run_lock(RUN):
                pass


def test_non_durable_appends_are_read_back_after_reopen(make_world):
    # Visibility only, on every backend; what sync() makes durable is proven below.
    world = make_world()
    for i in range(3):
        world.append_event(RUN, "step.started", {"i": i}, durable=False)
    world.sync()  # every backend offers it
    assert [e.payload["i"] for e in make_world.reopen().list_events(RUN)] == [0, 1, 2]


# ---- sync() under a power cut ------------------------------------------------------------
# Where durability is the World's doing (local disk), a `durable=False` append is durable
# once sync() returns: the power is cut right after it (PowerCutPosix keeps only what was
# synced) and a fresh World on the surviving tree must read every event. Memory worlds have
# no power to cut, and an object store's PUT is durable when answered, so sync() has
# nothing to do there. local_world's SQLite writes through its own I/O, which no Python
# layer sees: there the system calls, traced, must show the WAL fsynced after the last
# non-durable commit and before sync() returns.

POWER_CUT_KINDS = ["local-file", "pyfs-osfs"]


def power_cut_world(kind: str, posix, data_dir: str):
    from little_workflow.testing import power_cut_filesystem

    if kind == "local-file":
        return lw.virtual_world(power_cut_filesystem(posix), data_dir)
    from fs.osfs import OSFS

    from fs_adapters.pyfilesystem import PyFilesystemFS

    return lw.virtual_world(PyFilesystemFS(OSFS(data_dir, create=True), posix=posix), "/wf")


def after_the_cut(kind: str, cut_dir: str, resume_dir: str):
    """A World over what survived, as a machine rebooted after the cut would open it (the
    folder is moved first, so no in-process state of the dead World is shared)."""
    os.rename(cut_dir, resume_dir)
    if kind == "local-file":
        from fsspec.implementations.local import LocalFileSystem

        return lw.virtual_world(LocalFileSystem(skip_instance_cache=True), resume_dir)
    from fs.osfs import OSFS

    from fs_adapters.pyfilesystem import PyFilesystemFS

    return lw.virtual_world(PyFilesystemFS(OSFS(resume_dir)), "/wf")


def appended_then_cut(kind: str, tmp_path, *, sync: bool) -> list[int]:
    from little_workflow.testing import PowerCutPosix

    posix = PowerCutPosix(None)
    cut_dir, resume_dir = str(tmp_path / "cut"), str(tmp_path / "resumed")
    world = power_cut_world(kind, posix, cut_dir)
    for i in range(3):
        world.append_event(RUN, "step.started", {"i": i}, durable=False)
    if sync:
        world.sync()
    posix.cut_now()
    return [e.payload["i"] for e in after_the_cut(kind, cut_dir, resume_dir).list_events(RUN)]


@pytest.mark.parametrize("kind", POWER_CUT_KINDS)
def test_non_durable_appends_then_sync(kind, tmp_path):
    assert appended_then_cut(kind, tmp_path, sync=True) == [0, 1, 2]


@pytest.mark.parametrize("kind", POWER_CUT_KINDS)
def test_non_durable_appends_without_sync_do_not_survive_the_cut(kind, tmp_path):
    # What gives the test above its teeth: the appends really are not durable on their
    # own, so a sync() that did nothing would lose them there too.
    assert appended_then_cut(kind, tmp_path, sync=False) != [0, 1, 2]


SQLITE_SYNC_CHILD = r"""
import os, sys
import little_workflow as lw
from little_workflow.world.event_stores import SqliteEventStore
if sys.argv[2] == "no-sync":
    SqliteEventStore.sync = lambda self: None
world = lw.local_world(sys.argv[1])
world.append_event("run_sync", "run.created", {})  # the store, its WAL and schema made
os.write(1, b"APPENDING\n")
for i in range(3):
    world.append_event("run_sync", "step.started", {"i": i}, durable=False)
os.write(1, b"SYNCING\n")
world.sync()
os.write(1, b"SYNCED\n")
os._exit(0)  # no close: closing checkpoints, which would sync everything anyway
"""


def wal_synced_by_sync(tmp_path, mode: str) -> tuple[int, bool]:
    """(WAL writes of the non-durable appends, whether the WAL was fsynced after the last
    of them and before sync() returned), from the child's traced system calls."""
    import re
    import subprocess
    import sys

    from external_tools import require_tool

    strace = require_tool("strace")
    data_dir = str(tmp_path / mode)
    trace = tmp_path / f"{mode}.trace"
    r = subprocess.run([strace, "-f", "-y", "-qq", "-o", str(trace), "-e",
                        "trace=write,pwrite64,fsync,fdatasync", sys.executable, "-c",
                        SQLITE_SYNC_CHILD, data_dir, mode],
                       capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": SRC})
    assert r.returncode == 0 and r.stdout.split() == ["APPENDING", "SYNCING", "SYNCED"], r.stderr
    wal = os.path.join(data_dir, "events", "events.db-wal")
    phase, wal_writes, synced = "", 0, False
    for line in trace.read_text().splitlines():
        marker = re.search(r'^\d+\s+write\(1<[^>]*>, "(APPENDING|SYNCING|SYNCED)\\n"', line)
        if marker:
            phase = marker.group(1)
            continue
        touches_wal = f"<{wal}>" in line
        if phase == "APPENDING" and touches_wal and re.search(r"\bp?write(64)?\(", line):
            wal_writes += 1
            synced = False
        elif phase in ("APPENDING", "SYNCING") and touches_wal and re.search(
                r"\bf(data)?sync\(", line):
            synced = True
    return wal_writes, synced


def test_non_durable_appends_then_sync_local_world(tmp_path):
    wal_writes, synced = wal_synced_by_sync(tmp_path, "sync")
    assert wal_writes >= 3 and synced
    # The teeth: the non-durable commits alone leave the WAL unsynced.
    wal_writes, synced = wal_synced_by_sync(tmp_path, "no-sync")
    assert wal_writes >= 3 and not synced
