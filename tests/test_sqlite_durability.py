"""local_world's SQLite store keeps DESIGN.md §10: an acknowledged durable append was
preceded by an fsync of the WAL, every checkpoint write into events.db is fsynced before
the WAL is reset or the next append is acknowledged, and `synchronous` is never OFF."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import textwrap

from checkout import SRC
from external_tools import require_tool

import little_workflow as lw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The child opens a fresh local_world, appends durable events (enough of them for SQLite
# to checkpoint the WAL into events.db at least once), prints "ACK n" with a raw write
# after each append returns, and closes the store.
CHILD = textwrap.dedent("""
    import os, sys
    import little_workflow as lw
    world = lw.local_world(sys.argv[1])
    os.write(1, b"OPENED\\n")
    for i in range(int(sys.argv[2])):
        world.append_event("run_trace", "step.succeeded", {"stepPath": f"s{i}", "output": "x" * 3000})
        os.write(1, f"ACK {i}\\n".encode())
    world.events.close()
    os.write(1, b"CLOSED\\n")
""")

LINE_RE = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(\w+)\((.*)")
FD_PATH_RE = re.compile(r"^(\d+)<([^>]*)>")


def traced_syscalls(data_dir: str, appends: int, tmp_path) -> list[tuple[str, str, str]]:
    """(syscall, path of its fd or of its path argument, rest of the line), in order."""
    strace = require_tool("strace")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    trace = tmp_path / "trace.txt"
    env = dict(os.environ, PYTHONPATH=SRC)
    r = subprocess.run(
        [strace, "-f", "-y", "-qq", "-s", "64", "-o", str(trace),
         "-e", "trace=openat,write,pwrite64,fsync,fdatasync,close,rename,unlink,ftruncate",
         sys.executable, str(script), data_dir, str(appends)],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines()[-1] == "CLOSED"
    calls = []
    for line in trace.read_text().splitlines():
        if "resumed>" in line:
            continue  # the "<unfinished ...>" half already gave the call and its fd
        m = LINE_RE.match(line)
        if not m:
            continue
        name, args = m.groups()
        fd = FD_PATH_RE.match(args)
        if fd:
            path = fd.group(2)
        else:
            quoted = re.search(r'"([^"]*)"', args)
            path = quoted.group(1) if quoted else ""
        calls.append((name, path, args))
    return calls


def check_durability(calls: list[tuple[str, str, str]], db: str, appends: int) -> dict[str, int]:
    wal = db + "-wal"
    acks = 0
    wal_dirty = False            # bytes written to the WAL since its last fsync
    wal_synced_since_ack = False
    db_dirty: str | None = None  # what wrote events.db pages since its last fsync
    db_writes = db_syncs = 0
    for name, path, args in calls:
        if name in ("write", "pwrite64") and path == wal:
            if db_dirty and name == "pwrite64" and re.search(r",\s*0\)\s*=", args):
                raise AssertionError(f"WAL reset (header rewrite) while events.db writes are"
                                     f" not fsynced: {db_dirty}")
            wal_dirty = True
        elif name in ("fsync", "fdatasync") and path == wal:
            wal_dirty, wal_synced_since_ack = False, True
        elif name in ("write", "pwrite64") and path == db:
            db_writes += 1
            db_dirty = db_dirty or f"{name}({args[:60]}"
        elif name in ("fsync", "fdatasync") and path == db:
            db_syncs += 1
            db_dirty = None
        elif name in ("unlink", "ftruncate") and path == wal and db_dirty:
            raise AssertionError(f"WAL removed or truncated while events.db writes are not"
                                 f" fsynced: {db_dirty}")
        elif name == "write" and args.startswith("1<"):
            marker = re.search(r'"(ACK \d+|OPENED|CLOSED)\\n"', args)
            if not marker:
                continue
            label = marker.group(1)
            assert db_dirty is None, f"{label}: events.db written without fsync: {db_dirty}"
            if label.startswith("ACK"):
                assert int(label.split()[1]) == acks
                assert wal_synced_since_ack and not wal_dirty, (
                    f"{label} acknowledged without an fsync of {wal} after its commit")
                acks += 1
            wal_synced_since_ack = False
    assert db_dirty is None, f"events.db written and never fsynced: {db_dirty}"
    assert acks == appends
    return {"acks": acks, "db_writes": db_writes, "db_syncs": db_syncs}


def test_fresh_local_world_fsyncs_wal_before_ack_and_db_after_checkpoint(tmp_path):
    data_dir = str(tmp_path / "data")
    appends = 700  # 3+ WAL pages each (overflow pages): more than the 1,000-page autocheckpoint
    calls = traced_syscalls(data_dir, appends, tmp_path)
    db = os.path.join(data_dir, "events", "events.db")
    figures = check_durability(calls, db, appends)
    # The trace really saw a checkpoint into events.db (and its fsync), not nothing.
    assert figures["db_writes"] > 0 and figures["db_syncs"] > 0, figures
    print(f"\nstrace: {figures['acks']} acknowledged appends, each after a WAL fsync; "
          f"{figures['db_writes']} writes to events.db, {figures['db_syncs']} fsyncs of it")
    # And the data is all there afterwards, with no table of ours but `events` and the
    # run catalogue's (DESIGN §14).
    conn = sqlite3.connect(db)
    tables = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'"))
    count = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    conn.close()
    assert tables == ["catalogue_meta", "events", "runs"] and count == appends


def test_reopening_an_existing_data_dir_is_traced_durable_too(tmp_path):
    data_dir = str(tmp_path / "data")
    before = lw.local_world(data_dir)
    before.append_event("run_before", "x", {})
    before.events.close()  # a clean close: SQLite checkpoints and deletes the WAL
    calls = traced_syscalls(data_dir, 5, tmp_path)
    check_durability(calls, os.path.join(data_dir, "events", "events.db"), 5)


def is_closed(conn: sqlite3.Connection) -> bool:
    try:
        conn.execute("SELECT 1")
    except sqlite3.ProgrammingError:
        return True
    return False


def test_synchronous_is_never_off_on_any_write_connection(tmp_path, monkeypatch):
    """Every connection the store opens is traced from its first statement, and its
    `PRAGMA synchronous` is read back after open and after each kind of append."""
    connections: list[sqlite3.Connection] = []
    statements: list[str] = []
    real_connect = sqlite3.connect

    def connect(*args, **kwargs):
        conn = real_connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        connections.append(conn)
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect)
    world = lw.local_world(str(tmp_path / "data"))
    monkeypatch.setattr(sqlite3, "connect", real_connect)
    assert connections, "local_world opened no SQLite connection through sqlite3.connect"

    # The connection that builds a new events.db under a temporary name is closed before
    # the file gets its name: its statements are checked (never OFF, below), its level
    # cannot be read back.
    open_connections = [c for c in connections if not is_closed(c)]
    assert open_connections, "local_world kept no SQLite connection open"

    def levels() -> list[int]:
        return [c.execute("PRAGMA synchronous").fetchone()[0] for c in open_connections]

    after_open = levels()
    world.append_event("run_sync", "a", {"n": 1})
    after_durable = levels()
    world.append_event("run_sync", "b", {"n": 2}, durable=False)
    after_lazy = levels()
    world.sync()
    world.append_event("run_sync", "c", {"n": 3})
    after_durable_again = levels()
    off = [s for s in statements if re.search(r"synchronous\s*=\s*(off|0)\b", s, re.I)]
    assert off == [], f"synchronous was set OFF: {off}"
    assert all(v == 2 for v in after_open), after_open          # FULL
    assert all(v == 2 for v in after_durable), after_durable    # FULL
    assert all(v in (1, 2) for v in after_lazy), after_lazy     # NORMAL allowed
    assert all(v == 2 for v in after_durable_again), after_durable_again
    tables = [r[0] for r in open_connections[0].execute(
        "SELECT name FROM sqlite_master WHERE type='table'")]
    assert sorted(tables) == ["catalogue_meta", "events", "runs"], tables  # + the run catalogue
    world.events.close()


def test_close_is_idempotent_and_final(tmp_path):
    world = lw.local_world(str(tmp_path / "data"))
    world.append_event("run_close", "a", {})
    store = world.events
    store.close()
    store.close()  # a second close is a no-op
    wal = os.path.join(world.data_dir, "events", "events.db-wal")
    assert not os.path.exists(wal)  # the last connection checkpointed and removed it
    try:
        store.read_after("run_close", 0)
    except lw.StorageError as e:
        assert "closed" in str(e) and "events.db" in str(e)
    else:
        raise AssertionError("a closed store still answered")
    again = lw.local_world(world.data_dir)
    assert [e.type for e in again.list_events("run_close")] == ["a"]
