"""fs_adapters: S3 (s3fs on a real moto server) and PyFilesystem2, beyond the conformance suite."""

from __future__ import annotations

import threading

import pytest
from checkout import SRC
from soak import soak_size

import little_workflow as lw
from little_workflow.testing import FaultPlan, FaultyFileSystem, SimulatedCrash

#: Appends per thread (4 threads on each of 2 hosts). With the conditional create taken
#: away (a plain PUT: two hosts may both write one sequence number) 5 were enough: every
#: one of 5 trials failed (one host's event overwritten, the run taken for replaced).
S3_APPENDS_PER_THREAD = soak_size("LW_S3_APPENDS_PER_THREAD", short=8, full=30)


def test_two_s3_hosts_append_concurrently(moto_s3):
    bucket = moto_s3.new_bucket()
    hosts = [lw.virtual_world(moto_s3.filesystem(), f"{bucket}/wf") for _ in range(2)]
    assert hosts[0].files is not hosts[1].files
    per_thread, threads_per_host = S3_APPENDS_PER_THREAD, 4
    errors = []

    def appender(world, tag):
        try:
            for i in range(per_thread):
                world.append_event("run_s3race", "t", {"tag": tag, "i": i})
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=appender, args=(hosts[t % 2], t))
               for t in range(2 * threads_per_host)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    total = per_thread * 2 * threads_per_host
    for host in hosts:  # both hosts see every event, despite s3fs's listing cache
        events = host.list_events("run_s3race")
        assert [e.sequence for e in events] == list(range(1, total + 1))
        assert sorted((e.payload["tag"], e.payload["i"]) for e in events) == sorted(
            (t, i) for t in range(2 * threads_per_host) for i in range(per_thread))


def test_s3_idempotency_across_hosts(moto_s3):
    bucket = moto_s3.new_bucket()
    a = lw.virtual_world(moto_s3.filesystem(), f"{bucket}/wf")
    b = lw.virtual_world(moto_s3.filesystem(), f"{bucket}/wf")
    first = a.append_event("run_idem", "t", {"x": 1}, idempotency_key="k")
    b.append_event("run_idem", "other", {})
    assert a.append_event("run_idem", "t", {"x": 1}, idempotency_key="k").sequence == first.sequence
    a.append_event("run_idem", "mine", {})  # a's cached sequence is stale: it must catch up
    assert [e.type for e in b.list_events("run_idem")] == ["t", "other", "mine"]


def test_s3_blob_without_manifest_is_never_valid(moto_s3):
    bucket = moto_s3.new_bucket()
    inner = moto_s3.filesystem()
    # crash on the manifest publication, right after the blob's
    probe = FaultPlan()
    lw.virtual_world(FaultyFileSystem(inner, probe), f"{bucket}/probe").write_artifact(
        "run_a", "s", "n", {"big": "x"})
    manifest_op = next(i for i, op in enumerate(probe.operations, 1)
                       if op.startswith("publish") and op.endswith(".json"))
    plan = FaultPlan(crash_at=manifest_op)
    crashed = lw.virtual_world(FaultyFileSystem(inner, plan), f"{bucket}/wf")
    with pytest.raises(SimulatedCrash):
        crashed.write_artifact("run_a", "s", "n", {"big": "x"})
    fresh = lw.virtual_world(moto_s3.filesystem(), f"{bucket}/wf")
    aid = lw.virtual_world(moto_s3.filesystem(), f"{bucket}/probe").list_artifacts()[0].artifact_id
    assert fresh.files.exists(fresh.path("artifacts", "blobs", aid + ".bin"))
    with pytest.raises(lw.ArtifactNotFoundError):
        fresh.read_artifact("artifact://" + aid)
    with pytest.raises(lw.ArtifactNotFoundError):
        fresh.append_event("run_a", "x", {"ref": "artifact://" + aid})
    m = fresh.write_artifact("run_a", "s", "n", {"big": "x"})  # writing again completes it
    assert fresh.read_artifact(m.artifact_ref) == {"big": "x"}


def test_s3_run_lock_is_leased_and_released_by_holder(moto_s3):
    bucket = moto_s3.new_bucket()
    a = lw.virtual_world(moto_s3.filesystem(), f"{bucket}/wf")
    b = lw.virtual_world(moto_s3.filesystem(), f"{bucket}/wf")  # another host
    with a.run_lock("run_leased"):
        with pytest.raises(lw.RunLockedError):
            with b.run_lock("run_leased"):
                pass
    with b.run_lock("run_leased"):  # released by its holder: free for the other host
        pass


def test_s3_workflow_runs_and_resumes_from_another_host(moto_s3):
    bucket = moto_s3.new_bucket()
    calls = []
    crash = {"armed": True}

    @lw.workflow(id="s3wf")
    async def wf(ctx, input):
        a = await ctx.step("a", lambda: calls.append("a") or 1)
        if crash.pop("armed", False):
            raise KeyboardInterrupt  # the first host dies here
        b = await ctx.step("b", lambda: calls.append("b") or 2)
        return a + b

    url = f"s3://{bucket}/runs"
    with pytest.raises(KeyboardInterrupt):
        lw.run_workflow(wf, None, world=lw.virtual_world(moto_s3.filesystem(), f"{bucket}/runs"),
                        run_id="run_s3")
    other = lw.virtual_world(url, storage_options=moto_s3.storage_options)
    assert lw.run_workflow(wf, None, world=other, run_id="run_s3").output == 3
    assert calls == ["a", "b"]


def test_pyfilesystem_bridge_basics(tmp_path):
    from fs.memoryfs import MemoryFS
    from fs.osfs import OSFS

    from fs_adapters.pyfilesystem import PyFilesystemFS

    for pyfs in (MemoryFS(), OSFS(str(tmp_path))):
        fs = PyFilesystemFS(pyfs)
        fs.pipe_file("/a/b.txt", b"hello")
        assert fs.cat_file("/a/b.txt") == b"hello"
        assert fs.ls("/a", detail=False) == ["/a/b.txt"]
        assert fs.info("/a")["type"] == "directory"
        with fs.open("/a/c.txt", "wb") as f:
            f.write(b"via open")
        assert fs.cat_file("/a/c.txt") == b"via open"
        with pytest.raises(FileExistsError):
            fs.pipe_file("/a/b.txt", b"x", mode="create")
        assert fs.publish_if_absent("/a/new.txt", b"1") and not fs.publish_if_absent("/a/new.txt", b"2")
        assert fs.cat_file("/a/new.txt") == b"1"
        fs.mv("/a/c.txt", "/a/d.txt")
        assert not fs.exists("/a/c.txt") and fs.cat_file("/a/d.txt") == b"via open"
        fs.rm_file("/a/d.txt")
        with pytest.raises(FileNotFoundError):
            fs.cat_file("/a/d.txt")
        world = lw.virtual_world(fs)

        @lw.workflow(id="pyfs")
        async def wf(ctx, input):
            return await ctx.step("s", lambda: input * 2)

        assert lw.run_workflow(wf, 21, world=world).output == 42


def test_pyfs_imports_without_warnings():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-W", "error", "-c",
                        "import fs_adapters.pyfilesystem as p; p._import_fs(); print('ok')"],
                       capture_output=True, text=True)
    assert r.stdout.strip() == "ok", r.stderr


def test_cli_world_url_on_s3(moto_s3):
    import json
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bucket = moto_s3.new_bucket()
    env = {**os.environ, "AWS_ENDPOINT_URL": moto_s3.endpoint, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "PYTHONPATH": SRC}

    def little(*args):
        return subprocess.run([sys.executable, "-m", "little_workflow.cli", "--world",
                               f"s3://{bucket}/wf", *args], cwd=root, env=env,
                              capture_output=True, text=True, timeout=120)

    r = little("run", "examples.quickstart:squares", "--input", '{"n": 3}', "--run-id", "run_cli_s3", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["output"] == {"sum": 5}
    r = little("replay", "run_cli_s3", "--json")
    assert json.loads(r.stdout)["status"] == "completed"
    assert little("verify").returncode == 0
