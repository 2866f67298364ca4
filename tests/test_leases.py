"""Fenced leases, one case for every leased store (fs_adapters/leases.py): S3 on a real
moto server and Azure Blob on a real Azurite. Renewal, fencing before expiry, expiry by
the store's clock, a rising generation on every takeover, a SIGKILLed holder's lock taken
over, and a store failure that is never mistaken for a held lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest
from checkout import SRC
from leased_stores import leased_store

import little_workflow as lw
from little_workflow.world.ids import run_lock_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LEASE = 5.0  # generous: under load one request can take a second


@pytest.fixture(params=["s3", "azure"])
def store(request: Any, monkeypatch: Any) -> Any:
    backend = leased_store(request.param, request)
    monkeypatch.setattr(backend.module, "LEASE_SECONDS", LEASE, raising=False)
    return backend


@pytest.fixture
def network_path(store: Any) -> Any:
    path = store.network_path()
    yield path
    path.cut()


def lock_path(root: str, run_id: str) -> str:
    return f"{root}/locks/{run_lock_name(run_id)}/owner.json"


def lock_doc(fs: Any, root: str, run_id: str) -> dict:
    return json.loads(fs.cat_file(lock_path(root, run_id)))


def cut_right_after_a_renewal(store: Any, path: Any, observer: Any, root: str, run_id: str) -> float:
    """Cut the holder's network just after its lease was renewed. Returns a time before
    which that renewal had not landed yet (the start of the last look that missed it)."""
    before = store.lock_version(observer, lock_path(root, run_id))
    give_up = time.monotonic() + 3 * LEASE
    while True:
        looked = time.monotonic()
        if store.lock_version(observer, lock_path(root, run_id)) != before:
            break
        assert looked < give_up, "the holder never renewed its lease"
        not_yet = looked
        time.sleep(0.02)
    path.cut()
    return not_yet


def take_when_expired(world: Any, run_id: str, since: float) -> tuple[float, int]:
    """Poll until `world` gets the run lock; return how long after `since` that was and
    the generation it took the lock at."""
    while True:
        try:
            with world.run_lock(run_id):
                return (time.monotonic() - since,
                        lock_doc(world.files, world.data_dir, run_id)["generation"])
        except lw.RunLockedError:
            assert time.monotonic() - since < 6 * LEASE, "the lease never expired"
            time.sleep(0.2)


def test_holder_keeps_its_lease_by_renewing(store, monkeypatch):
    lease = 3.0  # short enough to need renewals, long enough for a loaded 2-core machine
    monkeypatch.setattr(store.module, "LEASE_SECONDS", lease, raising=False)
    root = store.new_root()
    a = lw.virtual_world(store.filesystem(), root)
    b = lw.virtual_world(store.filesystem(), root)  # another host
    with a.run_lock("run_renewed"):
        end = time.monotonic() + 3 * lease
        while time.monotonic() < end:  # three leases long: only renewals keep it
            with pytest.raises(lw.RunLockedError, match="generation 1"):
                with b.run_lock("run_renewed"):
                    pass
            a.append_event("run_renewed", "tick", {})
            time.sleep(0.3)
    assert lock_doc(store.filesystem(), root, "run_renewed")["state"] == "free"
    with b.run_lock("run_renewed"):  # released by its holder: free at once, next generation
        assert lock_doc(store.filesystem(), root, "run_renewed")["generation"] == 2
    with a.run_lock("run_renewed"):
        assert lock_doc(store.filesystem(), root, "run_renewed")["generation"] == 3


def test_failed_renewal_fences_the_holder_before_anyone_can_take_over(store, network_path):
    root = store.new_root()
    a = lw.virtual_world(network_path.filesystem(), root)  # host A, can be cut off
    observer = store.filesystem()
    b = lw.virtual_world(store.filesystem(), root)  # host B
    with pytest.raises(lw.LeaseLostError, match="run_fenced: lease lost"):
        with a.run_lock("run_fenced"):
            a.append_event("run_fenced", "work", {"i": 1})
            renewed = cut_right_after_a_renewal(store, network_path, observer, root, "run_fenced")
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


def test_lost_lease_ends_the_call_and_another_host_resumes_the_run(store, network_path):
    root = store.new_root()
    observer = store.filesystem()
    calls = {"one": 0, "two": 0}
    renewed_at: list[float] = []

    @lw.workflow(id="leased")
    async def wf(ctx, _):
        a = await ctx.step("one", lambda: calls.__setitem__("one", calls["one"] + 1) or 1)

        def two():
            calls["two"] += 1
            if network_path.up:  # host A loses its network while inside the step
                renewed_at.append(cut_right_after_a_renewal(
                    store, network_path, observer, root, "run_lease"))
                time.sleep(LEASE * 2 / 3 + 0.05)
            return 2

        return a + await ctx.step("two", two)

    host_a = lw.virtual_world(network_path.filesystem(), root)
    with pytest.raises(lw.LeaseLostError, match="run_lease"):
        lw.run_workflow(wf, None, world=host_a, run_id="run_lease")
    host_b = lw.virtual_world(store.filesystem(), root)
    types = [e.type for e in host_b.list_events("run_lease")]
    assert "run.failed" not in types and types.count("step.succeeded") == 1  # still resumable
    taken_after, generation = take_when_expired(host_b, "run_lease", renewed_at[0])
    assert taken_after > LEASE and generation == 2
    assert lw.run_workflow(wf, None, world=host_b, run_id="run_lease").output == 3
    assert calls == {"one": 1, "two": 2}  # the committed step did not run again


HOLDER = r"""
import json, sys, time
import little_workflow as lw
world = lw.virtual_world(sys.argv[1], storage_options=json.loads(sys.argv[2]))
with world.run_lock("run_killed"):
    world.append_event("run_killed", "work", {"by": "holder"})
    print("holding", flush=True)
    time.sleep(600)
"""


def test_a_killed_holders_lock_is_taken_over_after_its_lease_at_the_next_generation(store):
    root = store.new_root()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, store.url(root), json.dumps(store.storage_options)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": SRC, "LW_LEASE_SECONDS": str(LEASE)})
    try:
        line = holder.stdout.readline()
        assert line.startswith("holding"), line + holder.stdout.read()
        other = lw.virtual_world(store.filesystem(), root)  # another host
        with pytest.raises(lw.RunLockedError, match="generation 1"):
            with other.run_lock("run_killed"):
                pass
        holder.kill()  # SIGKILL: no release, no renewal any more
        holder.wait()
        killed = time.monotonic()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    taken_after, generation = take_when_expired(other, "run_killed", killed)
    assert generation == 2
    assert taken_after < 3 * LEASE  # expired by the store's clock and taken over soon
    with other.run_lock("run_killed"):
        other.append_event("run_killed", "work", {"by": "taker"})
    assert [e.payload["by"] for e in other.list_events("run_killed")] == ["holder", "taker"]


SKEWED_HOST = r"""
import json, sys, time
real = time.time
time.time = lambda: real() + 3600  # this host's wall clock is an hour ahead
import little_workflow as lw
world = lw.virtual_world(sys.argv[1], storage_options=json.loads(sys.argv[2]))
try:
    with world.run_lock("run_skew"):
        print("took it")
except lw.RunLockedError as e:
    print("respected:", e)
"""


def test_a_host_with_a_skewed_clock_respects_a_live_lease(store):
    root = store.new_root()
    a = lw.virtual_world(store.filesystem(), root)
    with a.run_lock("run_skew"):
        r = subprocess.run([sys.executable, "-c", SKEWED_HOST, store.url(root),
                            json.dumps(store.storage_options)],
                           capture_output=True, text=True, timeout=60, cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": SRC})
        assert r.stdout.startswith("respected:"), r.stdout + r.stderr
        a.append_event("run_skew", "still-mine", {})


def test_a_lock_the_store_refuses_is_a_storage_error_naming_it_not_a_held_run(store):
    root = store.new_root()
    world = lw.virtual_world(store.filesystem(), root)
    store.drop_container(root)  # deleted after the World was opened
    with pytest.raises(lw.StorageError, match=r"locks/[0-9a-f]+/owner\.json") as info:
        with world.run_lock("run_gone"):
            pass
    assert not isinstance(info.value, lw.RunLockedError)
    assert root.partition("/")[0] in str(info.value)


class AnswerLostOnce:
    """The store, as a host sees it when the network drops one answer: the first write
    reaches the store and lands, its reply never comes back (a read timeout)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.lost = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def create(self, path: str, record: Any) -> str:
        etag = self.store.create(path, record)
        if self.lost == 0:
            self.lost += 1
            raise lw.StorageUnreachableError(self.store.url(path), "writing the run lock failed: "
                                             "Timeout on reading data from socket")
        return etag


def test_a_lock_write_whose_answer_is_lost_is_found_and_kept(store):
    """A timed-out create may have landed: the holder looks again, finds its own token
    and keeps the lock (not a StorageError, and never `RunLockedError` against itself)."""
    root = store.new_root()
    a = lw.virtual_world(store.filesystem(), root)
    b = lw.virtual_world(store.filesystem(), root)  # another host
    locks = a.publisher.cross_process_locks(root)
    locks.store = AnswerLostOnce(locks.store)
    name = run_lock_name("run_lost_answer")
    token = locks.acquire(name, "run_lost_answer")
    try:
        assert locks.store.lost == 1
        assert locks.generation(token) == 1
        locks.check(name, token)
        with pytest.raises(lw.RunLockedError, match="generation 1"):
            with b.run_lock("run_lost_answer"):
                pass
    finally:
        locks.release(name, token)
    with b.run_lock("run_lost_answer"):
        assert lock_doc(store.filesystem(), root, "run_lost_answer")["generation"] == 2
