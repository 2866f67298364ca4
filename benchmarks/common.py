"""Shared helpers: medians, per-step timestamps, temporary worlds."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from typing import Any

import little_workflow as lw


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


def bare_sqlite_commit_us(n: int = 500) -> float:
    """One INSERT committed in SQLite WAL mode with synchronous=FULL, as our events table."""
    import sqlite3

    d = tempfile.mkdtemp(prefix="lwb-sqlite-")
    conn = sqlite3.connect(os.path.join(d, "bare.db"), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE events (run_id TEXT, sequence INTEGER, idempotency_key TEXT,"
                 " envelope TEXT, PRIMARY KEY (run_id, sequence)) WITHOUT ROWID")
    row = "x" * 300
    t = time.perf_counter()
    for i in range(n):
        conn.execute("INSERT INTO events VALUES (?, ?, NULL, ?)", ("run_bare", i, row))
    dt = time.perf_counter() - t
    conn.close()
    return dt / n * 1e6
