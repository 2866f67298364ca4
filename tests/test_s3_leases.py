"""S3 against a real moto server: precise error mapping (only 412 means "exists").
The lease protocol itself runs on S3 and Azure Blob alike in tests/test_leases.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

import little_workflow as lw

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
