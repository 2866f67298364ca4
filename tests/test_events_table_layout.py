"""local_world's `events` table keeps an event on the pages that hold it (issue 29): a new
events.db stores events of ~2 KB in about their own size, where a WITHOUT ROWID table
moved each row's tail to a mostly empty overflow page of its own. Files written with the
old WITHOUT ROWID table keep it and keep working: appends (a taken sequence refused),
reads, `little verify`, gc, fork, read-only opens."""

from __future__ import annotations

import os
import random
import sqlite3
import string
import subprocess
import sys
import textwrap
import threading

from checkout import SRC
from crashes import TESTS
from read_only_mount import run_on_read_only

import little_workflow as lw

FLOWS = '''
import little_workflow as lw


@lw.workflow(id="w")
async def w(ctx, input):
    def b():
        if input.get("fail"):
            raise ValueError("boom")
        return "y" * 2000

    await ctx.step("a", lambda: "x" * 2000)
    return await ctx.step("b", b)
'''

#: The events table local_world wrote before issue 29 (keep: files carry it for good).
OLD_EVENTS_TABLE = (
    "CREATE TABLE events ("
    " run_id TEXT NOT NULL, sequence INTEGER NOT NULL,"
    " idempotency_key TEXT, envelope TEXT NOT NULL,"
    " PRIMARY KEY (run_id, sequence)) WITHOUT ROWID"
)


def little(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "little_workflow.cli", *args], cwd=str(cwd),
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": f"{SRC}:{cwd}"})


def events_table_sql(db) -> str:
    c = sqlite3.connect(db)
    try:
        return c.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()[0]
    finally:
        c.close()


def envelope_bytes(db) -> int:
    c = sqlite3.connect(db)
    try:
        return c.execute("SELECT SUM(LENGTH(CAST(envelope AS BLOB))) FROM events").fetchone()[0]
    finally:
        c.close()


def test_two_kilobyte_events_take_about_their_own_size(tmp_path):
    data = tmp_path / "empty"
    lw.local_world(str(data)).close()
    empty_size = os.path.getsize(data / "events" / "events.db")
    data = tmp_path / "d"
    world = lw.local_world(str(data))
    rng = random.Random(29)
    for i in range(300):
        # Sizes vary as LangGraph's checkpoint events do (1.5-2.5 KB envelopes).
        text = "".join(rng.choice(string.ascii_letters) for _ in range(rng.randrange(1200, 2200)))
        world.append_event(f"run_{i % 3}", "t", {"text": text})
    world.close()
    db = data / "events" / "events.db"
    assert not os.path.exists(f"{db}-wal")
    payload = envelope_bytes(db)
    size = os.path.getsize(db)
    # A WITHOUT ROWID table stored these in 2.4x their bytes (an overflow page per row);
    # the rowid table in 1.37x (measured).
    assert size <= 1.6 * payload + empty_size, (size, payload, empty_size)
    assert "WITHOUT ROWID" not in events_table_sql(db)


def make_old_schema_world(tmp_path):
    """A data dir whose events.db has the pre-issue-29 events table, with finished runs."""
    (tmp_path / "flows.py").write_text(FLOWS)
    data = tmp_path / "data"
    lw.local_world(str(data)).close()
    db = data / "events" / "events.db"
    c = sqlite3.connect(db, isolation_level=None)
    c.execute("BEGIN")
    c.execute("DROP TABLE events")  # empty: the World was only created
    c.execute(OLD_EVENTS_TABLE)
    c.execute("CREATE UNIQUE INDEX events_idempotency_key ON events (run_id, idempotency_key)"
              " WHERE idempotency_key IS NOT NULL")
    c.execute("COMMIT")
    c.close()
    assert "WITHOUT ROWID" in events_table_sql(db)
    for i in range(3):
        r = little("--data-dir", "data", "run", "flows:w", "--input", f'{{"i": {i}}}',
                   "--run-id", f"run_ok{i}", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
    r = little("--data-dir", "data", "run", "flows:w", "--input", '{"fail": true}',
               "--run-id", "run_bad", cwd=tmp_path)
    assert r.returncode != 0 and "boom" in r.stderr, r.stderr
    return data, db


def test_an_old_schema_file_keeps_its_table_and_works(tmp_path):
    data, db = make_old_schema_world(tmp_path)
    world = lw.local_world(str(data))
    assert lw.materialize_run_state(world, "run_ok0").status == "completed"
    assert [e.sequence for e in world.list_events("run_ok1")] == list(
        range(1, len(world.list_events("run_ok1")) + 1))
    # A taken sequence is refused: two threads append to one run, the log stays contiguous.
    def append(n: int) -> None:
        for j in range(40):
            world.append_event("run_many", "t", {"n": n, "j": j})
    threads = [threading.Thread(target=append, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [e.sequence for e in world.list_events("run_many")] == list(range(1, 161))
    key_a = world.append_event("run_keyed", "t", {}, idempotency_key="k")
    key_b = world.append_event("run_keyed", "t", {}, idempotency_key="k")
    assert key_a.sequence == key_b.sequence == 1
    forked = lw.fork_run(world, "run_bad")
    assert [e.type for e in world.list_events(forked)][:1] == ["run.created"]
    world.close()
    assert "WITHOUT ROWID" in events_table_sql(db)

    r = little("--data-dir", "data", "verify", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    probe = textwrap.dedent(f'''
        import little_workflow as lw
        with lw.local_world({str(data)!r}, read_only=True) as world:
            print(lw.materialize_run_state(world, "run_ok2").status, len(world.list_events("run_many")))
    ''')
    r = run_on_read_only(str(data), [sys.executable, "-c", probe], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": SRC}, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["completed", "160"], r.stdout + r.stderr
    done = little("--data-dir", "data", "gc", "--older-than", "0s", "--status", "failed",
                  cwd=tmp_path)
    assert done.returncode == 0 and "deleted run_bad" in done.stdout, done.stdout + done.stderr
    world = lw.local_world(str(data))
    assert "run_bad" not in world.list_runs() and "run_ok0" in world.list_runs()
    world.close()
    assert "WITHOUT ROWID" in events_table_sql(db)


def test_an_old_schema_file_gets_no_second_index_on_its_key(tmp_path):
    """The new table's key index comes with the table: an old file, whose table is that
    key, is given no second copy of it when opened."""
    data, db = make_old_schema_world(tmp_path)
    lw.local_world(str(data)).close()
    c = sqlite3.connect(db)
    indexes = [r[0] for r in c.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events'")]
    c.close()
    assert indexes == ["events_idempotency_key"], indexes


def test_two_processes_append_to_one_run_of_an_old_schema_file(tmp_path):
    """Two writers race for each sequence of one run: the old table's key refuses the
    loser's row as the new table's does, and the log comes out contiguous."""
    data, db = make_old_schema_world(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, TESTS])}
    writers = [subprocess.Popen([sys.executable, os.path.join(TESTS, "lock_child.py"), "append",
                                 str(data), "200"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for w in writers:
        out, err = w.communicate(timeout=120)
        assert "APPENDED" in out, err
    world = lw.local_world(str(data))
    events = world.list_events("run_busy")
    assert [e.sequence for e in events] == list(range(1, 401))
    assert sorted(e.payload["i"] for e in events) == sorted(list(range(200)) * 2)
    world.close()
    assert "WITHOUT ROWID" in events_table_sql(db)
