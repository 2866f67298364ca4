"""The two World primitives queues stand on, on every backend:

- `update_document`: a read-modify-write that loses no update (compare-and-swap: the
  store's conditional write on S3 and Azure, a kernel lock of the folder on local disk);
- `take_slot`: a named slot with one holder across processes — a kernel lock on local
  disk (dropped when its holder dies), a fenced lease on S3 (back when it lapses, never
  before), never a pid check.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from checkout import SRC

import little_workflow as lw

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, HERE]), **(extra or {})}


def s3_env(moto_s3, lease: float | None = None) -> dict[str, str]:
    env = {"FSSPEC_S3_ENDPOINT_URL": moto_s3.endpoint, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    if lease is not None:
        env["LW_LEASE_SECONDS"] = str(lease)
    return env


def increment(doc):
    return {"n": (doc or {"n": 0})["n"] + 1}


def test_update_document_loses_no_update_between_threads(world):
    threads = [threading.Thread(target=lambda: [world.update_document("q/counter.json", increment)
                                                for _ in range(15)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert world.read_document("q/counter.json") == {"n": 60}


def test_update_document_returns_what_it_wrote_and_writes_nothing_unchanged(world):
    assert world.update_document("q/doc.json", lambda doc: {"items": [1]}) == {"items": [1]}
    calls = []

    def same(doc):
        calls.append(doc)
        return doc

    before = world.publisher.read_versioned(world.path("q", "doc.json"))
    assert world.update_document("q/doc.json", same) == {"items": [1]}
    assert calls == [{"items": [1]}]
    assert world.publisher.read_versioned(world.path("q", "doc.json")) == before


def test_replace_if_refuses_a_version_another_host_replaced(make_world):
    """The primitive under update_document, between two Worlds over the same storage (on
    S3 and Azure two clients with their own caches: two hosts)."""
    one, two = make_world(), make_world.reopen()
    path_one, path_two = one.path("q", "cas.json"), two.path("q", "cas.json")
    assert one.publisher.read_versioned(path_one) is None
    assert one.publisher.replace_if(path_one, b'{"v": 1}', None)
    assert not two.publisher.replace_if(path_two, b'{"v": 9}', None)  # exists already
    data, version = two.publisher.read_versioned(path_two)
    assert data == b'{"v": 1}'
    assert one.publisher.replace_if(path_one, b'{"v": 2}', version)
    assert not two.publisher.replace_if(path_two, b'{"v": 3}', version)  # stale
    assert one.publisher.read_versioned(path_one)[0] == b'{"v": 2}'


PROCESS_KINDS = ["local_world", "local-file", "s3"]


def world_spec(kind: str, tmp_path, moto_s3) -> tuple[str, dict[str, str]]:
    if kind == "local_world":
        return f"local:{tmp_path / 'lw'}", {}
    if kind == "local-file":
        return f"file://{tmp_path / 'files'}", {}
    bucket = moto_s3.new_bucket()
    return f"s3://{bucket}/wf", s3_env(moto_s3)


def parent_world(spec: str, moto_s3) -> object:
    if spec.startswith("local:"):
        return lw.local_world(spec[len("local:"):])
    if spec.startswith("s3://"):
        return lw.virtual_world(moto_s3.filesystem(), spec[len("s3://"):])
    return lw.virtual_world(spec)


@pytest.mark.parametrize("kind", PROCESS_KINDS)
def test_update_document_loses_no_update_between_processes(kind, tmp_path, request):
    moto_s3 = request.getfixturevalue("moto_s3") if kind == "s3" else None
    spec, env = world_spec(kind, tmp_path, moto_s3)
    per_process = 15 if kind == "s3" else 40
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "queue_child.py"), "count",
                               spec, "q/counter.json", str(per_process)], env=child_env(env),
                              stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    written: list[int] = []
    for p in procs:
        out, _ = p.communicate(timeout=240)
        assert p.returncode == 0
        written += [int(line) for line in out.split()]
    twice = sorted({n for n in written if written.count(n) > 1})
    assert not twice, f"values written by two processes (two writes of one version won): {twice}"
    assert sorted(written) == list(range(1, 3 * per_process + 1))
    world = parent_world(spec, moto_s3)
    assert world.read_document("q/counter.json") == {"n": 3 * per_process}


def test_a_slot_has_one_holder_until_released(world):
    first = world.take_slot("slot-test-0", "test")
    assert first is not None
    assert world.take_slot("slot-test-0", "test") is None
    assert world.take_slot("slot-test-1", "test") is not None  # another slot is another lock
    first.release()
    first.release()  # harmless
    again = world.take_slot("slot-test-0", "test")
    assert again is not None
    again.release()


def test_a_slot_name_is_checked(memory_world):
    with pytest.raises(lw.WorldPathError, match="slot name"):
        memory_world.take_slot("../x", "test")


@pytest.mark.parametrize("kind", PROCESS_KINDS)
def test_a_slot_another_process_holds_is_refused_and_comes_back_when_it_dies(kind, tmp_path,
                                                                             request):
    """Kernel locks (local disk) come back at the holder's death; an S3 lease comes back
    when it lapses, and is still refused right after the kill."""
    moto_s3 = request.getfixturevalue("moto_s3") if kind == "s3" else None
    spec, env = world_spec(kind, tmp_path, moto_s3)
    lease = 2.0
    if kind == "s3":
        env = {**env, "LW_LEASE_SECONDS": str(lease)}
    holder = subprocess.Popen([sys.executable, os.path.join(HERE, "queue_child.py"), "hold-slot",
                               spec, "slot-q-0"], env=child_env(env), stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        world = parent_world(spec, moto_s3)
        assert world.take_slot("slot-q-0", "test") is None
        holder.kill()  # SIGKILL: no release
        holder.wait()
        if kind == "s3":
            assert world.take_slot("slot-q-0", "test") is None  # its lease has not lapsed
            deadline = time.monotonic() + 10 * lease + 10
            slot = None
            while slot is None and time.monotonic() < deadline:
                time.sleep(0.25)
                slot = world.take_slot("slot-q-0", "test")
        else:
            slot = world.take_slot("slot-q-0", "test")
        assert slot is not None
        slot.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
