"""A 0-byte events.db is not an empty World (issue 32): local_world never leaves one — a
new events.db is made whole under a temporary name and linked into place — so a 0-byte
one was cut short by something (a copy, a full disk) and is refused, by the API and by
every `little` command, with nothing written into it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from checkout import SRC

import little_workflow as lw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLOWS = textwrap.dedent('''
    import little_workflow as lw


    @lw.workflow(id="w")
    async def w(ctx, input):
        return await ctx.step("s", lambda: 1)
''')


def little(*args: str, cwd: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "little_workflow.cli", *args], cwd=str(cwd),
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": SRC})


@pytest.fixture
def empty_db(tmp_path):
    data = tmp_path / "data"
    lw.local_world(str(data)).close()
    db = data / "events" / "events.db"
    for leftover in ("events.db-wal", "events.db-shm"):
        if (data / "events" / leftover).exists():
            (data / "events" / leftover).unlink()
    db.write_bytes(b"")
    (tmp_path / "flows.py").write_text(FLOWS)
    return tmp_path, str(data), db


def test_the_api_refuses_it_naming_the_file(empty_db):
    _, data, db = empty_db
    for read_only in (False, True):
        with pytest.raises(lw.StorageError) as e:
            lw.local_world(data, read_only=read_only)
        assert e.value.path == str(db) and "0 bytes" in str(e.value), e.value
    assert db.stat().st_size == 0


@pytest.mark.parametrize("command", [["verify"], ["runs"], ["run", "flows:w", "--input", "{}"]])
def test_every_command_refuses_it(empty_db, command):
    proj, data, db = empty_db
    r = little(*command, "--data-dir", data, cwd=proj)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and str(db) in r.stdout + r.stderr, r.stderr
    assert "0 bytes" in r.stdout + r.stderr
    assert db.stat().st_size == 0  # nothing written into it


KILL_AT = {
    # Just after the new file got its final name.
    "link": ("os", "link", lambda args: os.path.basename(args[1]) == "events.db"),
    # Just after the first connection to the final name (nothing written through it).
    "connect": ("sqlite3", "connect", lambda args: os.path.basename(str(args[0])) == "events.db"),
}


@pytest.mark.parametrize("moment", sorted(KILL_AT))
def test_killed_while_creating_events_db_leaves_no_empty_file(tmp_path, moment):
    """SIGKILL at a known moment of making a new data dir's events.db: afterwards there is
    no events.db or a whole one (never a 0-byte file), and the next open gives a World
    that runs."""
    data = str(tmp_path / "data")
    module, name, _ = KILL_AT[moment]
    child = textwrap.dedent(f'''
        import os, signal, sqlite3, sys
        sys.path.insert(0, {os.path.join(ROOT, "tests")!r})
        from test_empty_events_db import KILL_AT
        import {module}
        real = {module}.{name}
        hit = KILL_AT[{moment!r}][2]

        def patched(*args, **kwargs):
            out = real(*args, **kwargs)
            if hit(args):  # just after the call: its effect on disk is there
                os.kill(os.getpid(), signal.SIGKILL)
            return out

        {module}.{name} = patched
        import little_workflow as lw
        lw.local_world({data!r})
    ''')
    r = subprocess.run([sys.executable, "-c", child], capture_output=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": SRC})
    assert r.returncode == -9, r.stderr
    db = os.path.join(data, "events", "events.db")
    assert not os.path.exists(db) or os.path.getsize(db) > 0
    with lw.local_world(data) as world:
        lw.run_workflow(lw.workflow(id="w")(_one_step), {}, world=world, run_id="run_after")
        assert lw.materialize_run_state(world, "run_after").status == "completed"


async def _one_step(ctx: lw.RunContext, input: dict) -> int:
    return await ctx.step("s", lambda: 1)
