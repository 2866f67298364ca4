"""Shared helpers: medians, per-step timestamps, temporary worlds."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Any

import little_workflow as lw

#: A child process's PYTHONPATH: the folder holding the little_workflow this process
#: imported (src/ of whichever checkout the install or PYTHONPATH chose), so the child
#: measures the same copy, then this checkout's root for `benchmarks.*`.
CHILD_PYTHONPATH = os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(lw.__file__))),
                                    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))])


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def private_memory() -> Any:
    from fsspec.implementations.memory import MemoryFileSystem

    return MemoryFileSystem(skip_instance_cache=True, global_store=False)


def make_world(kind: str) -> Any:
    if kind == "memory":
        return lw.virtual_world(private_memory(), "/wf")
    if kind == "local-file":
        return lw.virtual_world("file://" + tempfile.mkdtemp(prefix="lwb-vw-"))
    if kind == "local_world":
        return lw.local_world(tempfile.mkdtemp(prefix="lwb-lw-"))
    raise ValueError(kind)


def noop(i: int) -> int:
    return i


def step_timestamps(world: Any, n: int, run_id: str | None = None) -> list[float]:
    """Run one workflow of n serial no-op steps; the perf_counter after each step
    (index 0 is the time just before the first step)."""
    stamps: list[float] = []

    @lw.workflow(id="bench-steps")
    async def steps(ctx: lw.RunContext, input: Any) -> int:
        stamps.append(time.perf_counter())
        for i in range(n):
            await ctx.step(f"s{i}", noop, i)
            stamps.append(time.perf_counter())
        return n

    lw.run_workflow(steps, {"n": n}, world=world, run_id=run_id)
    return stamps


def per_step_us(stamps: list[float], first: int, last: int) -> float:
    """Mean µs per step for steps first..last (1-based, inclusive)."""
    return (stamps[last] - stamps[first - 1]) / (last - first + 1) * 1e6


def run_us(world: Any, n: int) -> float:
    """µs per step of one workflow of n serial no-op steps, timed from the
    `run_workflow` call to its return (run creation, locking and the end included)."""

    @lw.workflow(id="bench-steps")
    async def steps(ctx: lw.RunContext, input: Any) -> int:
        for i in range(n):
            await ctx.step(f"s{i}", noop, i)
        return n

    t = time.perf_counter()
    lw.run_workflow(steps, {"n": n}, world=world)
    return (time.perf_counter() - t) / n * 1e6


def bare_sqlite_commit_us(n: int = 1000) -> float:
    """The honest floor of a durable step on local_world: one bare INSERT + COMMIT per
    step in SQLite WAL mode with synchronous=FULL (one fdatasync of the WAL per commit),
    on a fresh events.db whose WAL is prepared the way local_world prepares it
    (SqliteEventStore._prefill_wal: zeros up to one autocheckpoint's worth of frames,
    written and fsynced inside the first write transaction), timed from the first
    commit (the one that prefills) to the last, like a local_world run."""
    import sqlite3

    d = tempfile.mkdtemp(prefix="lwb-sqlite-")
    db = os.path.join(d, "events.db")
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE events (run_id TEXT NOT NULL, sequence INTEGER NOT NULL,"
                 " idempotency_key TEXT, envelope TEXT NOT NULL,"
                 " PRIMARY KEY (run_id, sequence)) WITHOUT ROWID")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    frames = max(conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0], 0)
    target = 32 + (frames + 16) * (24 + page_size)
    row = "x" * 300  # about a step.succeeded envelope
    t = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        if i == 0:
            fd = os.open(db + "-wal", os.O_WRONLY)
            size = os.fstat(fd).st_size
            chunk = bytes(1 << 20)
            while size < target:
                size += os.pwrite(fd, chunk[: min(len(chunk), target - size)], size)
            os.fsync(fd)
            os.close(fd)
        conn.execute("INSERT INTO events VALUES (?, ?, NULL, ?)", ("run_bare", i, row))
        conn.execute("COMMIT")
    dt = time.perf_counter() - t
    conn.close()
    return dt / n * 1e6
