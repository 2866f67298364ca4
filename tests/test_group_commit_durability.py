"""Group commit on local_world keeps "acknowledged means durable" (DESIGN §10): appends of
one run that arrive together — a Pydantic AI turn's concurrent tool calls finishing at
once — share one SQLite transaction and one WAL fsync, and none of them returns before
that fsync.

Traced with strace in a child: threads append durable events to one run, each event
carrying a unique mark, and each thread writes "ACK <mark>" with a raw write as soon as
its append returned. For every mark the trace must show the WAL write that holds it,
then a WAL fsync, then its ACK. The same child with `durable=False` appends (acknowledged
with no fsync) must fail the same check: the check can see an early acknowledgement."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

from checkout import SRC
from external_tools import require_tool

THREADS = 6
APPENDS = 20  # per thread

CHILD = textwrap.dedent("""
    import os, sys, threading
    import little_workflow as lw
    world = lw.local_world(sys.argv[1])
    threads, appends, durable = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "durable"
    world.append_event("run_group", "run.created", {"workflowId": "group"})
    start = threading.Barrier(threads)

    def worker(t):
        start.wait()
        for i in range(appends):
            mark = f"EV-{t:02d}-{i:03d}"
            world.append_event("run_group", "step.succeeded", {"stepPath": mark, "output": 1},
                               durable=durable)
            os.write(1, f"ACK {mark}\\n".encode())

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    os.write(1, b"DONE\\n")
    os._exit(0)  # no close: its checkpoint would sync what the check must not see synced
""")

LINE_RE = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(\w+)\((\d+)<([^>]*)>(.*)")
MARK_RE = re.compile(r"EV-\d\d-\d\d\d")


def traced(tmp_path, mode: str) -> tuple[list[tuple[str, str, str]], str]:
    strace = require_tool("strace")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    data_dir = str(tmp_path / f"data-{mode}")
    trace = tmp_path / f"trace-{mode}.txt"
    r = subprocess.run(
        [strace, "-f", "-y", "-qq", "-s", "5000", "-o", str(trace),
         "-e", "trace=write,pwrite64,fsync,fdatasync",
         sys.executable, str(script), data_dir, str(THREADS), str(APPENDS), mode],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=SRC), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.endswith("DONE\n")
    return traced_calls(trace), os.path.join(data_dir, "events", "events.db-wal")


def traced_calls(trace) -> list[tuple[str, str, str]]:
    """(syscall, file — or "1" for stdout —, the rest of the line) of each traced write/sync."""
    calls = []
    for line in trace.read_text().splitlines():
        m = LINE_RE.match(line)
        if m:
            name, fd, path, rest = m.groups()
            calls.append((name, fd if fd == "1" else path, rest))
    return calls


def check_acks_follow_fsyncs(calls: list[tuple[str, str, str]], wal: str) -> dict[str, int]:
    """Raise unless every ACK comes after the WAL write of its mark and a WAL fsync after
    that write. Returns the counts seen."""
    written_at: dict[str, int] = {}  # mark -> index of the WAL write holding it
    last_sync = -1
    syncs = acks = 0
    for i, (name, where, rest) in enumerate(calls):
        if where == wal and name in ("write", "pwrite64"):
            for mark in MARK_RE.findall(rest):
                written_at.setdefault(mark, i)
        elif where == wal and name in ("fsync", "fdatasync"):
            last_sync = i
            syncs += 1
        elif where == "1" and name == "write" and '"ACK ' in rest:
            mark = MARK_RE.search(rest)
            assert mark is not None, rest
            at = written_at.get(mark.group(0))
            assert at is not None, f"{mark.group(0)} acknowledged before its commit was written"
            assert last_sync > at, f"{mark.group(0)} acknowledged before a WAL fsync after its commit"
            acks += 1
    return {"acks": acks, "syncs": syncs}


def test_appends_that_share_a_commit_are_each_acknowledged_after_its_fsync(tmp_path):
    calls, wal = traced(tmp_path, "durable")
    seen = check_acks_follow_fsyncs(calls, wal)
    assert seen["acks"] == THREADS * APPENDS
    # They did share: fewer fsyncs than appends (six threads appending at once).
    assert seen["syncs"] < seen["acks"], seen
    print(f"\n{seen['acks']} concurrent durable appends of one run, {seen['syncs']} WAL fsyncs")


def test_the_check_catches_an_acknowledgement_before_the_fsync(tmp_path):
    # durable=False: committed at synchronous=NORMAL and acknowledged with no fsync.
    calls, wal = traced(tmp_path, "not-durable")
    try:
        check_acks_follow_fsyncs(calls, wal)
    except AssertionError as e:
        assert "before a WAL fsync" in str(e)
    else:
        raise AssertionError("acknowledgements without an fsync passed the check")
