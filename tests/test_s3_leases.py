"""Fenced S3 leases against a real moto server: renewal, fencing, store-time expiry,
generations, and precise error mapping (only 412 means "exists")."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from s3_server import NetworkPath

import fs_adapters.object_store as object_store
import little_workflow as lw
from little_workflow.world.ids import run_lock_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEASE = 5.0  # generous: under load one S3 request can take a second


@pytest.fixture
def short_lease(monkeypatch):
    monkeypatch.setattr(object_store, "LEASE_SECONDS", LEASE)
    return LEASE


@pytest.fixture
def network_path(moto_s3):
    path = NetworkPath(moto_s3)
    yield path
    path.cut()


def lock_key(bucket: str, run_id: str) -> str:
    return f"{bucket}/wf/locks/{run_lock_name(run_id)}/owner.json"


def lock_doc(fs, bucket: str, run_id: str) -> dict:
    return json.loads(fs.cat_file(lock_key(bucket, run_id)))


def lock_etag(fs, bucket: str, run_id: str) -> str:
    bucket_, _, key = lock_key(bucket, run_id).partition("/")
    return fs.call_s3("head_object", Bucket=bucket_, Key=key)["ETag"]


def cut_right_after_a_renewal(path: NetworkPath, observer, bucket: str, run_id: str) -> float:
    """Cut the holder's network just after its lease was renewed. Returns a time before
    which that renewal had not landed yet (the start of the last look that missed it)."""
    before = lock_etag(observer, bucket, run_id)
    give_up = time.monotonic() + 3 * LEASE
    while True:
        looked = time.monotonic()
        if lock_etag(observer, bucket, run_id) != before:
            break
        assert looked < give_up, "the holder never renewed its lease"
        not_yet = looked
        time.sleep(0.02)
    path.cut()
    return not_yet


def take_when_expired(world, run_id: str, since: float) -> tuple[float, int]:
    """Poll until `world` gets the run lock; return how long after `since` that was and
    the generation it took the lock at."""
    bucket = world.data_dir.split("/")[0]
    while True:
        try:
            with world.run_lock(run_id):
                return time.monotonic() - since, lock_doc(world.files, bucket, run_id)["generation"]
        except lw.RunLockedError:
            assert time.monotonic() - since < 6 * LEASE, "the lease never expired"
            time.sleep(0.2)


def test_holder_keeps_its_lease_by_renewing(moto_s3, monkeypatch):
    lease = 3.0  # short enough to need renewals, long enough for a loaded 2-core machine
    monkeypatch.setattr(object_store, "LEASE_SECONDS", lease)
    bucket = moto_s3.new_bucket()
    a = lw.virtual_world(moto_s3.filesystem(), f"{bucket}/wf")
    b = lw.virtual_world(moto_s3.filesystem(), f"{bucket}/wf")  # another host
    with a.run_lock("run_renewed"):
        end = time.monotonic() + 3 * lease
        while time.monotonic() < end:  # three leases long: only renewals keep it
            with pytest.raises(lw.RunLockedError, match="generation 1"):
                with b.run_lock("run_renewed"):
                    pass
            a.append_event("run_renewed", "tick", {})
            time.sleep(0.3)
    assert lock_doc(moto_s3.filesystem(), bucket, "run_renewed")["state"] == "free"
    with b.run_lock("run_renewed"):  # released by its holder: free at once, next generation
        assert lock_doc(moto_s3.filesystem(), bucket, "run_renewed")["generation"] == 2
    with a.run_lock("run_renewed"):
        assert lock_doc(moto_s3.filesystem(), bucket, "run_renewed")["generation"] == 3


def test_failed_renewal_fences_the_holder_before_anyone_can_take_over(
        moto_s3, network_path, short_lease):
    bucket = moto_s3.new_bucket()
    a = lw.virtual_world(network_path.filesystem(), f"{bucket}/wf")  # host A, can be cut off
    observer = moto_s3.filesystem()
    b = lw.virtual_world(moto_s3.filesystem(), f"{bucket}/wf")  # host B
    with pytest.raises(lw.LeaseLostError, match="run_fenced: lease lost"):
        with a.run_lock("run_fenced"):
            a.append_event("run_fenced", "work", {"i": 1})
            renewed = cut_right_after_a_renewal(network_path, observer, bucket, "run_fenced")
            time.sleep(LEASE * 2 / 3 + 0.05)  # past A's local deadline, before the store's expiry
            try:
                a.append_event("run_fenced", "work", {"i": 2})
            finally:
                stopped_after = time.monotonic() - renewed
                # A stopped on its own; its lease is still valid at the store.
                with pytest.raises(lw.RunLockedError):
                    with b.run_lock("run_fenced"):
                        pass
    assert stopped_after < LEASE
    taken_after, generation = take_when_expired(b, "run_fenced", renewed)
    assert taken_after > LEASE  # not before the lease ran out, by the store's clock
    assert generation == 2  # a takeover
    with b.run_lock("run_fenced"):
        b.append_event("run_fenced", "work", {"i": 2})
    assert [e.payload.get("i") for e in b.list_events("run_fenced")] == [1, 2]


def test_lost_lease_ends_the_call_and_another_host_resumes_the_run(
        moto_s3, network_path, short_lease):
    bucket = moto_s3.new_bucket()
    observer = moto_s3.filesystem()
    calls = {"one": 0, "two": 0}
    renewed_at: list[float] = []

    @lw.workflow(id="leased")
    async def wf(ctx, _):
        a = await ctx.step("one", lambda: calls.__setitem__("one", calls["one"] + 1) or 1)

        def two():
            calls["two"] += 1
            if network_path.up:  # host A loses its network while inside the step
                renewed_at.append(cut_right_after_a_renewal(network_path, observer, bucket, "run_lease"))
                time.sleep(LEASE * 2 / 3 + 0.05)
            return 2

        return a + await ctx.step("two", two)

    host_a = lw.virtual_world(network_path.filesystem(), f"{bucket}/wf")
    with pytest.raises(lw.LeaseLostError, match="run_lease"):
        lw.run_workflow(wf, None, world=host_a, run_id="run_lease")
    host_b = lw.virtual_world(moto_s3.filesystem(), f"{bucket}/wf")
    types = [e.type for e in host_b.list_events("run_lease")]
    assert "run.failed" not in types and types.count("step.succeeded") == 1  # still resumable
    taken_after, generation = take_when_expired(host_b, "run_lease", renewed_at[0])
    assert taken_after > LEASE and generation == 2
    assert lw.run_workflow(wf, None, world=host_b, run_id="run_lease").output == 3
    assert calls == {"one": 1, "two": 2}  # the committed step did not run again


SKEWED_HOST = r"""
import sys, time
real = time.time
time.time = lambda: real() + 3600  # this host's wall clock is an hour ahead
import little_workflow as lw
opts = {"key": "testing", "secret": "testing",
        "client_kwargs": {"endpoint_url": sys.argv[1], "region_name": "us-east-1"}}
world = lw.virtual_world(f"s3://{sys.argv[2]}/wf", storage_options=opts)
try:
    with world.run_lock("run_skew"):
        print("took it")
except lw.RunLockedError as e:
    print("respected:", e)
"""


def test_a_host_with_a_skewed_clock_respects_a_live_lease(moto_s3, short_lease):
    bucket = moto_s3.new_bucket()
    a = lw.virtual_world(moto_s3.filesystem(), f"{bucket}/wf")
    with a.run_lock("run_skew"):
        r = subprocess.run([sys.executable, "-c", SKEWED_HOST, moto_s3.endpoint, bucket],
                           capture_output=True, text=True, timeout=60, cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": ROOT})
        assert r.stdout.startswith("respected:"), r.stdout + r.stderr
        a.append_event("run_skew", "still-mine", {})


# ---- error mapping: only 412 means "exists" -------------------------------------------

def test_a_bad_request_is_a_storage_error_not_a_corrupt_log(moto_s3):
    bucket = moto_s3.new_bucket()
    import s3fs

    # A misconfiguration the store answers with 400 InvalidStorageClass (EINVAL in s3fs).
    fs = s3fs.S3FileSystem(skip_instance_cache=True, s3_additional_kwargs={"StorageClass": "BOGUS"},
                           **moto_s3.storage_options)
    # Opening the World already writes (its run catalogue's marker): whichever write
    # meets the misconfiguration first, it is a StorageError naming the key.
    with pytest.raises(lw.StorageError) as info:
        world = lw.virtual_world(fs, f"{bucket}/wf")
        world.append_event("run_badreq", "t", {})
    assert not isinstance(info.value, lw.EventLogCorruptError)
    assert f"s3://{bucket}/wf/" in str(info.value)
    assert "InvalidStorageClass" in str(info.value)


def test_a_missing_bucket_is_named(moto_s3):
    # Opening the World reads its run catalogue's marker: a missing bucket is named there.
    with pytest.raises(lw.StorageError, match="bucket 'lw-no-such-bucket-here' does not exist"):
        lw.virtual_world(moto_s3.filesystem(), "lw-no-such-bucket-here/wf")


@pytest.fixture(scope="module")
def moto_with_auth():
    """A moto server that checks credentials (IAM), in its own process."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "0"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "moto server did not start"
            time.sleep(0.1)
    yield f"http://127.0.0.1:{port}"
    proc.kill()
    proc.wait()


def test_wrong_credentials_are_a_clear_error_naming_bucket_and_key(moto_with_auth):
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, key="wrong", secret="wrong",
                           client_kwargs={"endpoint_url": moto_with_auth, "region_name": "us-east-1"})
    # Opening the World reads its run catalogue's marker: the first request is refused.
    with pytest.raises(lw.StorageError, match=r"s3://lw-auth/wf/catalogue/.*access denied.*"
                                              r"HTTP 403.*credentials.*'lw-auth'"):
        lw.virtual_world(fs, "lw-auth/wf")
