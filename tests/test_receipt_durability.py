"""A durable append that finds its idempotency key taken returns the event stored under it,
and must return it durable: that event may be a `durable=False` append not yet synced (an
unsynced write retried as a durable one, LangGraph task writes that ride the next
checkpoint's sync). It returned with no fsync at all — a power cut after the return lost an
event the caller was told is durable.

Traced with strace in a child on local_world (SQLite WAL): between the durable append's
start and its return there is a sync of the events.db WAL."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

from checkout import SRC
from external_tools import require_tool

CHILD = textwrap.dedent("""
    import os, sys
    import little_workflow as lw
    w = lw.local_world(sys.argv[1])
    w.append_event("run_r", "x.warm", {}, durable=True)
    w.append_event("run_r", "x.a", {"v": 1}, idempotency_key="k", durable=False)
    os.write(1, b"DURABLE-APPEND-BEGINS\\n")
    event = w.append_event("run_r", "x.a", {"v": 1}, idempotency_key="k", durable=True)
    os.write(1, b"DURABLE-APPEND-RETURNED %d\\n" % event.sequence)
    os._exit(0)
""")


def test_a_durable_append_that_finds_its_key_taken_returns_only_once_the_event_is_synced(tmp_path: Any) -> None:
    strace = require_tool("strace")
    where = str(tmp_path / "w")
    trace = str(tmp_path / "trace")
    proc = subprocess.run(
        [strace, "-f", "-qq", "-o", trace, "-e", "trace=openat,write,fsync,fdatasync",
         sys.executable, "-c", CHILD, where],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": SRC})
    assert proc.returncode == 0, proc.stderr
    assert "DURABLE-APPEND-RETURNED 2" in proc.stdout, proc.stdout  # the receipt, not a new event
    lines = open(trace).read().splitlines()
    wal_fds: set[str] = set()
    between: list[str] = []
    inside = False
    for line in lines:
        call = line.split(None, 1)[1] if line[:1].isdigit() else line
        if call.startswith("openat(") and "events.db-wal" in call and "= " in call:
            wal_fds.add(call.rsplit("= ", 1)[1].split()[0])
        if "DURABLE-APPEND-BEGINS" in call:
            inside = True
        elif "DURABLE-APPEND-RETURNED" in call:
            inside = False
        elif inside and call.startswith(("fsync(", "fdatasync(")):
            between.append(call)
    synced_wal = [c for c in between if c.split("(", 1)[1].split(")", 1)[0] in wal_fds]
    assert synced_wal, (f"the durable append returned with no fsync of the WAL "
                        f"(WAL fds {sorted(wal_fds)}; syncs meanwhile: {between})")
