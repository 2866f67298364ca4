"""A damaged events.db (garbage in the middle, header intact): new runs are refused as
reads are (nothing more is written into a broken store), and `little verify` reports what
it can still read, run by run, instead of one line."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest
from checkout import SRC

import little_workflow as lw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLOWS = '''
import little_workflow as lw


@lw.workflow(id="w")
async def w(ctx, input):
    return await ctx.step("s", lambda: "x" * 2000)
'''


def little(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "little_workflow.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": f"{SRC}:{cwd}"})


@pytest.fixture(params=["rowid", "without_rowid"])
def damaged(tmp_path, request):
    """200 runs, then 8 KiB of garbage written over the middle of events.db: in today's
    events table, and in the WITHOUT ROWID one files made before issue 29 keep."""
    (tmp_path / "flows.py").write_text(FLOWS)
    sys.path.insert(0, str(tmp_path))
    sys.modules.pop("flows", None)
    try:
        import flows
    finally:
        sys.path.remove(str(tmp_path))
    data = tmp_path / "data"
    if request.param == "without_rowid":
        from test_events_table_layout import OLD_EVENTS_TABLE

        lw.local_world(str(data)).close()
        c = sqlite3.connect(data / "events" / "events.db")
        c.execute("DROP TABLE events")
        c.execute(OLD_EVENTS_TABLE)
        c.commit()
        c.close()
    with lw.local_world(str(data)) as world:
        for i in range(200):
            lw.run_workflow(flows.w, {"i": i}, world=world, run_id=f"run_{i:03d}")
    db = data / "events" / "events.db"
    c = sqlite3.connect(db)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    size = os.path.getsize(db)
    with open(db, "r+b") as f:
        f.seek(size // 2 // 4096 * 4096)
        f.write(bytes(range(256)) * 32)
    return tmp_path, flows


def test_a_new_run_is_refused_and_nothing_is_written(damaged):
    tmp_path, flows = damaged
    db = tmp_path / "data" / "events" / "events.db"
    before = db.read_bytes()
    with pytest.raises(lw.StorageError) as caught:
        lw.run_workflow(flows.w, {"i": 999}, world=lw.local_world(str(tmp_path / "data")),
                        run_id="run_new")
    assert "events.db" in str(caught.value) and "little verify" in str(caught.value)
    assert db.read_bytes() == before
    r = little("--data-dir", "data", "run", "flows:w", "--input", '{"i": 999}', "--run-id", "run_new2",
               cwd=tmp_path)
    assert r.returncode == 1 and "events.db" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert db.read_bytes() == before


def test_little_verify_reports_what_it_can_read(damaged):
    tmp_path, _ = damaged
    r = little("--data-dir", "data", "verify", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "events.db is damaged" in r.stdout, r.stdout
    readable = [line for line in r.stdout.splitlines() if line.startswith("readable:")]
    unreadable = [line for line in r.stdout.splitlines() if line.startswith("unreadable:")]
    assert readable and unreadable, r.stdout
    n_ok = int(readable[0].split()[1])
    assert 0 < n_ok < 200, r.stdout
    r = little("--data-dir", "data", "verify", "--json", cwd=tmp_path)
    report = json.loads(r.stdout)
    assert report["ok"] is False and report["damaged"]
    assert len(report["readableRuns"]) == n_ok
    assert len(report["readableRuns"]) + len(report["unreadableRuns"]) == 200
    assert all(v > 0 for v in report["readableRuns"].values())  # events read per run
