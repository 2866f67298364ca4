"""The bad-input catalogue: each bad input gives its typed error and writes nothing."""

from __future__ import annotations

import json

import pytest
from conftest import private_memory

import little_workflow as lw


def snapshot(fs) -> dict[str, bytes]:
    return {k: bytes(v.getbuffer()) for k, v in fs.store.items()}


@lw.workflow(id="cat", input_schema={"type": "object", "required": ["n"],
                                     "properties": {"n": {"type": "integer"}}})
async def cat_wf(ctx, input):
    return {"n": await ctx.step("double", lambda: input["n"] * 2)}


@pytest.fixture
def setup():
    fs = private_memory()
    world = lw.virtual_world(fs, "/wf")
    lw.run_workflow(cat_wf, {"n": 1}, world=world, run_id="run_good")
    art = world.write_artifact("run_good", "double", "a", {"k": "v"})
    return fs, world, art


BAD_RUN_IDS = ["../run_x", "run_../../etc", "run_a/b", "run_a b", " run_a", "run_", "", "x" * 10,
               "run_" + "a" * 81, "run_a\x00", "run_ä"]


def catalogue(world, art):
    """(name, action, expected error type)"""
    forged = "artifact://art_00000000deadbeef"
    items = []
    for bad in BAD_RUN_IDS:
        items += [
            (f"run_workflow run id {bad!r}", lambda b=bad: lw.run_workflow(cat_wf, {"n": 1}, world=world, run_id=b), lw.WorldPathError),
            (f"append_event run id {bad!r}", lambda b=bad: world.append_event(b, "t", {}), lw.WorldPathError),
            (f"write_artifact run id {bad!r}", lambda b=bad: world.write_artifact(b, "s", "n", 1), lw.WorldPathError),
        ]
    items += [
        ("forged artifact ref", lambda: world.append_event("run_good", "x", {"ref": forged}), lw.ArtifactNotFoundError),
        ("forged nested ref", lambda: world.append_event("run_good", "x", {"a": [{"b": forged}]}), lw.ArtifactNotFoundError),
        ("path-shaped ref", lambda: world.append_event("run_good", "x", {"r": "artifact://../../events"}), lw.ArtifactNotFoundError),
        ("read forged ref", lambda: world.read_artifact(forged), lw.ArtifactNotFoundError),
        ("schema-invalid input", lambda: lw.run_workflow(cat_wf, {"n": "one"}, world=world, run_id="run_new1"), lw.SchemaValidationError),
        ("missing required input", lambda: lw.run_workflow(cat_wf, {}, world=world, run_id="run_new2"), lw.SchemaValidationError),
        ("non-JSON input", lambda: lw.run_workflow(cat_wf, {"n": object()}, world=world, run_id="run_new3"), lw.SchemaValidationError),
        ("other input for a run", lambda: lw.run_workflow(cat_wf, {"n": 2}, world=world, run_id="run_good"), lw.InputMismatchError),
        ("non-JSON payload", lambda: world.append_event("run_good", "x", {"f": {1, 2}}), lw.EventPayloadError),
        ("idempotency conflict", lambda: (world.append_event("run_open", "k", {"a": 1}, idempotency_key="key1"),
                                          world.append_event("run_open", "k", {"a": 2}, idempotency_key="key1")), lw.IdempotencyConflictError),
        ("append after the end", lambda: world.append_event("run_good", "x", {"late": True}), lw.RunFinishedError),
        ("too deeply nested payload", lambda: world.append_event("run_good", "x", _deep(5000)), lw.EventPayloadError),
        ("too deeply nested input", lambda: lw.run_workflow(cat_wf, _deep(5000), world=world, run_id="run_new6"), lw.SchemaValidationError),
        ("bad step path", lambda: lw.run_workflow(_step_path_wf, None, world=world, run_id="run_new4"), lw.WorkflowFailedError),
        ("unknown pipeline member", lambda: lw.run_pipeline([cat_wf], {}, orchestrator=_calls_unknown, world=world, run_id="run_new5"), lw.WorkflowFailedError),
        ("bad memory path", lambda: world.memory("org").write_text("../../events/x", "y"), lw.WorldPathError),
        ("bad outer loop id", lambda: lw.run_workflow(cat_wf, {"n": 1}, world=world, max_outer_cycles=2, supervise=lambda c, h: lw.Done(1), outer_loop_id="../x"), lw.WorldPathError),
    ]
    return items


def _deep(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"a": value}
    return value


@lw.workflow(id="steppath")
async def _step_path_wf(ctx, input):
    return await ctx.step("../escape", lambda: 1)


async def _calls_unknown(ctx, input):
    return await ctx.call_workflow("nope", {})


def test_catalogue_typed_errors_write_nothing(setup):
    fs, world, art = setup
    for name, action, error in catalogue(world, art):
        before = snapshot(fs)
        with pytest.raises(error):
            action()
        after = snapshot(fs)
        if name in ("idempotency conflict",):
            continue  # its first, valid append is meant to be written
        if name in ("bad step path", "unknown pipeline member"):
            # the run is created, then fails with its typed cause recorded; nothing escapes
            new = {k for k in after if k not in before}
            assert all("/events/run_new" in k or "workflow-versions" in k
                       or "/catalogue/" in k and "run_new" in k for k in new), (name, new)
            continue
        assert after == before, f"{name} wrote {set(after) ^ set(before)}"


def test_tampered_and_truncated_storage(setup):
    fs, world, art = setup
    blob = world.path("artifacts", "blobs", art.artifact_id + ".bin")
    manifest = world.path("artifacts", art.artifact_id + ".json")
    event2 = world.path("events", "run_good", "0000000002.json")
    original = {p: fs.cat_file(p) for p in (blob, manifest, event2)}

    fs.pipe_file(blob, b'{"k":"w"}')
    with pytest.raises(lw.ArtifactHashMismatchError):
        lw.virtual_world(fs, "/wf").read_artifact(art.artifact_ref)
    fs.pipe_file(blob, original[blob])

    doc = json.loads(original[manifest])
    for field, value in (("sizeBytes", 999), ("sha256", "0" * 64), ("runId", "run_other")):
        fs.pipe_file(manifest, json.dumps({**doc, field: value}).encode())
        with pytest.raises(lw.RuntimeIntegrityError):
            lw.virtual_world(fs, "/wf").read_artifact(art.artifact_ref)
    fs.pipe_file(manifest, b"{trunc")
    with pytest.raises(lw.ArtifactManifestCorruptError):
        lw.virtual_world(fs, "/wf").read_artifact(art.artifact_ref)
    fs.pipe_file(manifest, original[manifest])

    fs.pipe_file(event2, original[event2][: len(original[event2]) // 2])  # truncated JSON
    before = snapshot(fs)
    fresh = lw.virtual_world(fs, "/wf")
    with pytest.raises(lw.EventLogCorruptError) as info:
        fresh.list_events("run_good")
    assert info.value.run_id == "run_good" and "event 2" in str(info.value)
    with pytest.raises(lw.EventLogCorruptError):
        lw.run_workflow(cat_wf, {"n": 1}, world=fresh, run_id="run_good")
    assert snapshot(fs) == before
    report = lw.verify_world(fresh)
    assert not report.ok and "event 2" in report.problems["run_good"][0]

    env = json.loads(original[event2])
    env["payload"]["start"] = 42  # payload edited, digest left stale
    fs.pipe_file(event2, json.dumps(env).encode())
    report = lw.verify_world(lw.virtual_world(fs, "/wf"))
    assert "requestDigest does not match" in report.problems["run_good"][0]
    env["sequence"] = 7
    fs.pipe_file(event2, json.dumps(env).encode())
    with pytest.raises(lw.EventLogCorruptError):
        lw.virtual_world(fs, "/wf").list_events("run_good")
    fs.pipe_file(event2, original[event2])

    fs.rm_file(world.path("events", "run_good", "0000000003.json"))  # a hole in the log
    report = lw.verify_world(lw.virtual_world(fs, "/wf"))
    assert any("not contiguous" in p for p in report.problems["run_good"])
    # Reading the run names the gap; running it again re-executes nothing over it.
    before = snapshot(fs)
    with pytest.raises(lw.EventLogCorruptError, match="event 3 is missing"):
        lw.virtual_world(fs, "/wf").list_events("run_good")
    with pytest.raises(lw.EventLogCorruptError, match="event 3 is missing"):
        lw.run_workflow(cat_wf, {"n": 1}, world=lw.virtual_world(fs, "/wf"), run_id="run_good")
    assert snapshot(fs) == before


def test_unknown_workflow_name_lists_available(setup):
    fs, world, art = setup
    with pytest.raises(lw.WorkflowFailedError) as info:
        lw.run_pipeline({"cat": cat_wf}, {}, orchestrator=_calls_unknown, world=world)
    err = info.value.cause
    assert isinstance(err, lw.UnknownWorkflowError) and err.available == ["cat"]
