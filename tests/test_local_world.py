"""local_world specifics: layout, SQLite WAL, cross-process run locks, manifests."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from checkout import SRC
from crashes import TESTS

import little_workflow as lw


def child(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, TESTS])}
    return subprocess.Popen([sys.executable, os.path.join(TESTS, "lock_child.py"), *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def wait_line(proc: subprocess.Popen, prefix: str) -> str:
    line = proc.stdout.readline()
    assert line.startswith(prefix), (line, proc.stderr.read() if proc.poll() is not None else "")
    return line


def test_layout_and_sqlite_schema(tmp_path):
    world = lw.local_world(str(tmp_path / "d"))

    @lw.workflow(id="layout")
    async def wf(ctx, input):
        if input:
            ctx.scratch.pipe_file("r", b"1")
        return await ctx.step("a/b", lambda: lw.current_step().scratch.pipe_file("f", b"1") or 1)

    lw.run_workflow(wf, True, world=world, run_id="run_layout")
    # A run's scratch folder is made when it is first used, not with every run.
    lw.run_workflow(wf, False, world=world, run_id="run_no_scratch")
    assert not (tmp_path / "d" / "runs" / "run_no_scratch" / "scratch").exists()
    world.write_artifact("run_layout", "a/b", "x", {"k": 1})
    d = tmp_path / "d"
    for sub in ("events/events.db", "artifacts/blobs", "runs/run_layout/scratch",
                "runs/run_layout/steps/a/b/scratch/f",
                "locks", "outer-loops", "memory", "workflow-versions"):
        assert (d / sub).exists(), sub
    assert len(list((d / "artifacts").glob("art_*.json"))) == 1
    conn = sqlite3.connect(str(d / "events" / "events.db"))
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    pk = [r[1] for r in conn.execute("PRAGMA table_info(events)") if r[5]]
    assert pk == ["run_id", "sequence"]
    assert list((d / "locks").iterdir()) == []  # released after the run


def test_killed_lock_holder_is_taken_over_at_once(tmp_path):
    data = str(tmp_path / "d")
    holder = child("hold", data, "run_locked", "60")
    pid = int(wait_line(holder, "HELD").split()[1])
    world = lw.local_world(data)
    with pytest.raises(lw.RunLockedError) as info:
        with world.run_lock("run_locked"):
            pass
    assert info.value.owner_pid == pid and str(pid) in str(info.value)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    t0 = time.time()
    with world.run_lock("run_locked"):
        owner = json.loads((tmp_path / "d" / "locks" / hashlib.sha256(b"run_locked").hexdigest()
                            / "owner.json").read_text())
        assert owner["pid"] == os.getpid()
        assert set(owner) == {"pid", "host", "bootId", "startTime", "token", "createdAt"}
    assert time.time() - t0 < 5.0  # at once: not after the 30 s grace window


def test_two_processes_race_for_one_run_id(tmp_path):
    data = str(tmp_path / "d")
    lw.local_world(data)
    for trial in range(20):
        procs = [child("race", data, f"run_race{trial}", stdin=subprocess.PIPE) for _ in range(2)]
        for p in procs:
            wait_line(p, "READY")
        start_at = time.time() + 0.1
        for p in procs:
            p.stdin.write(f"{start_at}\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=30)[0].strip() for p in procs]
        assert sorted(o.split()[0] for o in outs) == ["LOCKED", "WON"], outs


def test_ownerless_lock_dir_respected_for_grace_window(tmp_path):
    world = lw.local_world(str(tmp_path / "d"))
    lock_dir = tmp_path / "d" / "locks" / hashlib.sha256(b"run_ghost").hexdigest()
    lock_dir.mkdir(parents=True)
    with pytest.raises(lw.RunLockedError):
        with world.run_lock("run_ghost"):
            pass
    old = time.time() - 31
    os.utime(lock_dir, (old, old))
    with world.run_lock("run_ghost"):
        pass
    assert not lock_dir.exists()


def test_ownerless_lock_dir_from_before_the_last_boot_is_taken_over_at_once(tmp_path):
    """Lock files are not fsynced (they only matter to this boot's processes): after a
    power cut a lock dir may hold no owner.json, or an empty one. Older than the boot, it
    is stale at once, with no grace window."""
    from little_workflow.world.locks import boot_time

    world = lw.local_world(str(tmp_path / "d"))
    lock_dir = tmp_path / "d" / "locks" / hashlib.sha256(b"run_reboot").hexdigest()
    lock_dir.mkdir(parents=True)
    (lock_dir / "owner.json").write_bytes(b"")  # the rename reached the disk, the data did not
    before_boot = boot_time() - 60
    assert before_boot > 0
    os.utime(lock_dir, (before_boot, before_boot))
    t0 = time.time()
    with world.run_lock("run_reboot"):
        pass
    assert time.time() - t0 < 5.0 and not lock_dir.exists()


def test_release_only_by_token_holder(tmp_path):
    world = lw.local_world(str(tmp_path / "d"))
    owner_file = tmp_path / "d" / "locks" / hashlib.sha256(b"run_tok").hexdigest() / "owner.json"
    with world.run_lock("run_tok"):
        doc = json.loads(owner_file.read_text())
        doc["token"] = "someone-else"
        owner_file.write_text(json.dumps(doc))
    assert owner_file.exists()  # not ours any more, so not removed


def test_manifest_write_killed_midway_leaves_previous_readable(tmp_path):
    data = str(tmp_path / "d")
    rng = random.Random(7)
    world = lw.local_world(data)
    last = 0
    for _ in range(8):
        proc = child("manifests", data)
        wait_line(proc, "")
        time.sleep(rng.uniform(0.01, 0.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        doc = world.read_document("outer-loops/ol.json")
        assert isinstance(doc["n"], int) and doc["pad"] == "x" * (doc["n"] % 5000)
        last = doc["n"]
    assert last > 0
    leftovers = [n for n in os.listdir(tmp_path / "d" / "outer-loops") if n != "ol.json"]
    assert all(n.startswith(".tmp-") for n in leftovers)  # temp names only, ignored by readers


def test_readers_in_other_processes_while_one_writes(tmp_path):
    data = str(tmp_path / "d")
    lw.local_world(data)
    readers = [child("read", data, "3") for _ in range(2)]
    writer = child("append", data, "300")
    out, err = writer.communicate(timeout=120)
    assert "APPENDED" in out, err
    for r in readers:
        out, err = r.communicate(timeout=60)
        assert out.startswith("READ"), err
        assert "locked" not in err
    assert len(lw.local_world(data).list_events("run_busy")) == 300


def test_two_spellings_of_one_dir_serialize(tmp_path):
    (tmp_path / "d").mkdir()
    a = lw.local_world(str(tmp_path / "d"))
    b = lw.local_world(str(tmp_path / "d" / ".." / "d") + "/")
    with a.run_lock("run_same"):
        with pytest.raises(lw.RunLockedError):
            with b.run_lock("run_same"):
                pass


def test_two_processes_append_to_one_run(tmp_path):
    data = str(tmp_path / "d")
    lw.local_world(data)
    writers = [child("append", data, "200") for _ in range(2)]
    for w in writers:
        out, err = w.communicate(timeout=120)
        assert "APPENDED" in out, err
    events = lw.local_world(data).list_events("run_busy")
    assert [e.sequence for e in events] == list(range(1, 401))
    assert sorted(e.payload["i"] for e in events) == sorted(list(range(200)) * 2)


def test_group_commit_keeps_every_run_contiguous(tmp_path):
    import threading

    world = lw.local_world(str(tmp_path / "d"))

    def append(i):
        for j in range(60):
            world.append_event(f"run_g{i % 4}", "t", {"writer": i, "j": j})

    threads = [threading.Thread(target=append, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    fresh = lw.local_world(str(tmp_path / "d"))
    for r in range(4):
        events = fresh.list_events(f"run_g{r}")
        assert [e.sequence for e in events] == list(range(1, 121))
        assert len({(e.payload["writer"], e.payload["j"]) for e in events}) == 120
