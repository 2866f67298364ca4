"""The moto server the S3 tests run against must keep S3's promise that a conditional
PUT is atomic: of writers racing `If-Match: <etag>` (or `If-None-Match: *`) on one key,
exactly one wins. moto 5.2 checks the condition and then writes in two separate steps
of a threaded server, so two racing writers could both pass the check — a lost update
that real S3 never produces and that made our compare-and-swap tests fail once in a
while (tests/s3_server.py makes the check-and-write one step)."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest


def _race(moto_s3: Any, bucket: str, condition: dict[str, str], writers: int) -> int:
    """`writers` threads, each with its own client, PUT the key at once under
    `condition`; returns how many the server accepted. Every body is new, so every
    accepted write changes the ETag (a write of the same bytes would keep it)."""
    import boto3

    clients = [boto3.client("s3", endpoint_url=moto_s3.endpoint, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")
               for _ in range(writers)]
    start = threading.Barrier(writers)
    won: list[int] = []

    def write(i: int) -> None:
        start.wait()
        try:
            clients[i].put_object(Bucket=bucket, Key="doc", Body=uuid.uuid4().bytes, **condition)
            won.append(i)
        except clients[i].exceptions.ClientError as e:
            assert e.response["Error"]["Code"] in ("PreconditionFailed", "ConditionalRequestConflict")

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(won)


@pytest.fixture
def slow_condition_check() -> Any:
    """Widen the window between moto's condition check and its write (both look the key
    up through `S3Backend.get_object`) so a race that happens once in thousands of
    requests happens every time: without the lock every round below has several winners."""
    import time

    from moto.s3.models import S3Backend

    original = S3Backend.get_object

    def slow_get_object(self: Any, *args: Any, **kwargs: Any) -> Any:
        found = original(self, *args, **kwargs)
        time.sleep(0.02)  # after the lookup: the checker holds what may soon be stale
        return found

    S3Backend.get_object = slow_get_object  # type: ignore[method-assign]
    yield
    S3Backend.get_object = original  # type: ignore[method-assign]


def test_racing_conditional_puts_have_one_winner(moto_s3, slow_condition_check):
    import boto3

    client = boto3.client("s3", endpoint_url=moto_s3.endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    bucket = moto_s3.new_bucket()
    for round_ in range(2):
        client.delete_object(Bucket=bucket, Key="doc")
        assert _race(moto_s3, bucket, {"IfNoneMatch": "*"}, 6) == 1, f"round {round_}: create"
        etag = client.head_object(Bucket=bucket, Key="doc")["ETag"]
        assert _race(moto_s3, bucket, {"IfMatch": etag}, 6) == 1, f"round {round_}: replace"


def test_the_moto_server_lists_its_service_folders_once(moto_s3):
    """tests/s3_server.py's `list_moto_modules_once` is in the request path: moto's
    dispatcher asks the patched function (if moto ever stopped asking it, the patch would
    silently save nothing), and it answers what moto's own listing does."""
    import os

    import moto
    import moto.backends
    from moto.moto_server import werkzeug_app

    assert getattr(moto.backends.list_of_moto_modules, "_lw_once", False)
    assert werkzeug_app.backends.list_of_moto_modules is moto.backends.list_of_moto_modules
    folder = os.path.dirname(moto.__file__)
    assert list(moto.backends.list_of_moto_modules()) == [
        name for name in sorted(os.listdir(folder))
        if os.path.isdir(os.path.join(folder, name)) and not name.startswith("__")]
    assert "s3" in moto.backends.list_of_moto_modules()
