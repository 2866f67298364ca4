"""little-workflow vs DBOS 3.x and LangGraph, side by side in one run.

    pip install -e ".[bench]" && python benchmarks/run.py

Prints one table of ratios (medians of REPS repetitions), writes benchmarks/RESULTS.md
and benchmarks/per_step_cost.png (per-step cost against step number, vs DBOS).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import little_workflow as lw  # noqa: E402
from benchmarks.common import (  # noqa: E402
    CHILD_PYTHONPATH,
    bare_sqlite_commit_us,
    make_world,
    median,
    per_step_us,
    run_us,
    step_timestamps,
)
from benchmarks.langgraph_side import loop_per_step_us, per_node_us  # noqa: E402
from benchmarks.wake import (  # noqa: E402
    event_other_process,
    event_same_process,
    timer_overshoot,
    worker_throughput,
)

REPS = int(os.environ.get("LW_BENCH_REPS", "3"))
#: Every row, in the order RESULTS.md lists them.
ROWS = ("P1", "P2", "P3", "P4", "P5", "P6", "P9", "P10", "P7", "P8", "Q", "P11", "P12",
        "P13", "M1", "M2")
#: LW_BENCH_ONLY=P7,P8 runs only those rows (and leaves RESULTS.md alone).
ONLY = {x.strip().upper() for x in os.environ.get("LW_BENCH_ONLY", "").split(",") if x.strip()}
P7_REPS = max(REPS, 7)  # the wake-ups are short: more samples
P8_RUNS = 1000
P1_STEPS = 1000
P2_STEPS = 1000
LONG_RUN = 10_000
ENV = {**os.environ, "PYTHONPATH": CHILD_PYTHONPATH}


def sub(script: str, *args: Any, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(HERE, script), *map(str, args)],
                          env=ENV, capture_output=True, text=True, check=check, timeout=1800)


def dbos_steps(mode: str, n: int) -> dict:
    out = tempfile.mktemp(suffix=".json")
    sub("dbos_side.py", "steps", mode, n, out)
    with open(out) as f:
        return json.load(f)


def dbos_stamps(mode: str, n: int) -> list[float]:
    return dbos_steps(mode, n)["stamps"]


def dbos_run_us(mode: str, n: int) -> float:
    """DBOS per step, timed from the workflow call to its return."""
    return dbos_steps(mode, n)["run_seconds"] / n * 1e6


def lw_step_us(kind: str, n: int) -> float:
    """Per step, timed from the run_workflow call to its return (World made before)."""
    return run_us(make_world(kind), n)


def recovery_per_step_us(side: str, mode: str, n: int) -> float:
    """(time to resume a run with n completed steps − time with 0) / n, from copies of one
    prepared data dir per size, REPS recoveries each."""
    def prepare(steps: int) -> str:
        d = tempfile.mkdtemp(prefix=f"lwb-rec-{side}-")
        if side == "dbos":
            sub("dbos_side.py", "prepare", mode, steps, d, check=False)  # ends by SIGKILL
        else:
            sub("lw_side.py", "prepare", steps, os.path.join(d, "data"), check=False)
        return d

    def recover(prepared: str, steps: int) -> float:
        times = []
        for _ in range(REPS):
            d = tempfile.mkdtemp(prefix="lwb-copy-")
            shutil.rmtree(d)
            shutil.copytree(prepared, d)
            out = os.path.join(d, "out.json")
            if side == "dbos":
                sub("dbos_side.py", "recover", mode, d, out)
            else:
                sub("lw_side.py", "recover", steps, os.path.join(d, "data"), out)
            with open(out) as f:
                times.append(json.load(f)["seconds"])
        return median(times)

    full, empty = prepare(n), prepare(0)
    return (recover(full, n) - recover(empty, 0)) / n * 1e6


def parallel_rate(kind: str, cap: int, n: int = 1000, io_seconds: float = 0.0) -> float:
    """Steps/s of one parallel group of n steps at max_concurrency=cap, timed from the
    run_workflow call to its return. Every cap has the same fsync policy: each child's
    success is committed (not synced on its own), the group syncs once at its end."""
    world = make_world(kind)

    async def noop() -> int:
        await asyncio.sleep(io_seconds)  # 0: no-op; > 0: a step waiting on I/O
        return 1

    @lw.workflow(id="bench-parallel")
    async def wf(ctx: lw.RunContext, input: Any) -> int:
        return sum(await ctx.parallel("g", [noop] * n, max_concurrency=cap))

    t = time.perf_counter()
    lw.run_workflow(wf, {}, world=world)
    return n / (time.perf_counter() - t)


def artifact_vs_hash(kind: str, size: int = 64 * 2**20) -> tuple[float, float]:
    import hashlib

    data = os.urandom(size)
    world = make_world(kind)
    hash_s = median([_time(lambda: hashlib.sha256(data).hexdigest()) for _ in range(REPS)])
    times = []
    for i in range(REPS):
        def write_read(i: int = i) -> None:
            m = world.write_artifact("run_bench_art", f"s{i}", "blob", data,
                                     content_type="application/octet-stream", encoding="binary")
            assert len(world.read_artifact(m.artifact_ref)) == size

        times.append(_time(write_read))
    return hash_s, median(times)


def plain_file_round_trip(size: int = 64 * 2**20) -> float:
    """What any durable, verified local artifact must cost at least: write + fsync + read
    of the bytes, plus hashing them on write and again on read."""
    import hashlib

    data = os.urandom(size)
    path = os.path.join(tempfile.mkdtemp(prefix="lwb-floor-"), "blob")
    t = time.perf_counter()
    hashlib.sha256(data).hexdigest()
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    with open(path, "rb") as f:
        hashlib.sha256(f.read()).hexdigest()
    return time.perf_counter() - t


def wanted(row: str) -> bool:
    if ONLY and row not in ONLY:
        return False
    # How long each row takes, so that the cost of the whole run stays known.
    print(f"[{time.time() - STARTED:.0f} s] {row}", flush=True)
    return True


def dbos_json(*args: Any) -> dict:
    out = tempfile.mktemp(suffix=".json")
    sub("dbos_side.py", *args, out)
    with open(out) as f:
        return json.load(f)


def _time(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


LOAD_AT_START = os.getloadavg()[0]
STARTED = time.time()


def main() -> None:
    unknown = ONLY - set(ROWS)
    if unknown:
        sys.exit(f"LW_BENCH_ONLY: no row {', '.join(sorted(unknown))}; the rows are "
                 f"{', '.join(ROWS)}")
    started = time.time()
    rows: list[tuple[str, str, str, str]] = []

    def row(name: str, measured: str, ratio: float | None, goal: str) -> None:
        verdict = "" if ratio is None else f"{ratio:.2f}×"
        rows.append((name, measured, verdict, goal))
        print(f"  {name}: {measured} {verdict} (goal {goal})", flush=True)

    curves: dict[str, list[float]] = {}
    if wanted("P1"):
        print("P1 per durable step, run start -> run end, local_world vs DBOS, LangGraph, bare commit")
        lw_local, dbos_wal, dbos_rb, lg_sqlite, bare = [], [], [], [], []
        for _ in range(REPS):  # interleaved, so load changes hit every side alike
            lw_local.append(lw_step_us("local_world", P1_STEPS))
            dbos_wal.append(dbos_run_us("wal", P1_STEPS))
            dbos_rb.append(dbos_run_us("rollback", P1_STEPS))
            lg_sqlite.append(per_node_us("sqlite", P1_STEPS))
            bare.append(bare_sqlite_commit_us(P1_STEPS))
        lw1, dw, dr, lg, fl = map(median, (lw_local, dbos_wal, dbos_rb, lg_sqlite, bare))
        row("P1 local_world / DBOS (SQLite WAL, synchronous=FULL)",
            f"{lw1:.0f} µs vs {dw:.0f} µs", lw1 / dw, "≤ 0.25×")
        row("P1 local_world / DBOS (SQLite as shipped, rollback journal)",
            f"{lw1:.0f} µs vs {dr:.0f} µs", lw1 / dr, "—")
        row("P1 local_world / LangGraph SqliteSaver (per node)",
            f"{lw1:.0f} µs vs {lg:.0f} µs", lw1 / lg, "—")
        row("P1 local_world / honest floor: one bare INSERT + COMMIT, WAL, synchronous=FULL, "
            "WAL prefilled as local_world's", f"{lw1:.0f} µs vs {fl:.0f} µs", lw1 / fl, "≤ 2×")

    if wanted("P2"):
        print("P2 per step in memory, run start -> run end, same N on both sides")
        lw_mem, lg_mem, lg_loop = [], [], []
        for _ in range(REPS):
            lw_mem.append(lw_step_us("memory", P2_STEPS))
            lg_mem.append(per_node_us("memory", P2_STEPS))
            lg_loop.append(loop_per_step_us(P2_STEPS))
        m, g, gl = median(lw_mem), median(lg_mem), median(lg_loop)
        row(f"P2 memory virtual_world / LangGraph InMemorySaver ({P2_STEPS:,} steps / nodes)",
            f"{m:.0f} µs vs {g:.0f} µs", m / g, "≤ 0.1×")
        row(f"P2 memory virtual_world / LangGraph InMemorySaver, one node looping "
            f"{P2_STEPS:,} times", f"{m:.0f} µs vs {gl:.0f} µs", m / gl, "—")

    if wanted("P3"):
        print(f"P3 history independence: steps 9,901–10,000 / steps 1–100 ({LONG_RUN:,}-step runs)")
        for kind in ("memory", "local-file", "local_world"):
            ratios, firsts, lasts = [], [], []
            for _ in range(REPS):
                stamps = step_timestamps(make_world(kind), LONG_RUN)
                first, last = per_step_us(stamps, 1, 100), per_step_us(stamps, LONG_RUN - 99, LONG_RUN)
                firsts.append(first)
                lasts.append(last)
                ratios.append(last / first)
                if kind == "local_world":
                    curves["little-workflow local_world"] = stamps
            row(f"P3 {kind}", f"{median(firsts):.0f} → {median(lasts):.0f} µs", median(ratios), "≤ 1.2×")
        curves["DBOS (SQLite WAL)"] = dbos_stamps("wal", LONG_RUN)

    if wanted("P4"):
        print(f"P4 resume: replay cost per completed step ({LONG_RUN:,}-step run) vs DBOS recovery")
        lw_rec = recovery_per_step_us("lw", "", LONG_RUN)
        dbos_rec_wal = recovery_per_step_us("dbos", "wal", LONG_RUN)
        row("P4 local_world resume / DBOS recovery (WAL)",
            f"{lw_rec:.1f} µs vs {dbos_rec_wal:.1f} µs per step", lw_rec / dbos_rec_wal, "≤ 0.2×")
        dbos_rec_rb = recovery_per_step_us("dbos", "rollback", LONG_RUN)
        row("P4 local_world resume / DBOS recovery (rollback journal)",
            f"{lw_rec:.1f} µs vs {dbos_rec_rb:.1f} µs per step", lw_rec / dbos_rec_rb, "≤ 0.2×")

    if wanted("P5"):
        print("P5 64 MiB artifact write + read vs hashlib.sha256 over the same bytes")
        for kind in ("memory", "local_world"):
            hash_s, art_s = artifact_vs_hash(kind)
            row(f"P5 {kind} (hash rate / artifact rate)",
                f"sha256 {64 / hash_s:.0f} MiB/s, write+read {64 / art_s:.0f} MiB/s", hash_s / art_s, "≥ 0.4×")

        floor_s = median([plain_file_round_trip() for _ in range(REPS)])
        hash_s, _ = artifact_vs_hash("memory")
        row("P5 floor on this disk: plain write+fsync+read + the two hashes a verified artifact needs",
            f"{64 / floor_s:.0f} MiB/s", hash_s / floor_s, "(best reachable on local disk)")

    if wanted("P6"):
        print("P6 a parallel group of 1,000 durable no-op steps: max_concurrency 8 vs 1")
        for kind, goal in (("local_world", "≥ 3×"), ("memory", "≥ 1×")):
            par, ser = [], []
            for _ in range(REPS):
                par.append(parallel_rate(kind, 8))
                ser.append(parallel_rate(kind, 1))
            row(f"P6 {kind} (steps/s at max_concurrency 8 / at 1)",
                f"{median(par):.0f} vs {median(ser):.0f} steps/s", median(par) / median(ser), goal)
        print("Parallel groups of steps that wait 1 ms on I/O (1,000 steps, max_concurrency 8 vs 1)")
        for kind in ("memory", "local_world"):
            io_par = median([parallel_rate(kind, 8, io_seconds=0.001) for _ in range(REPS)])
            io_ser = median([parallel_rate(kind, 1, io_seconds=0.001) for _ in range(REPS)])
            row(f"P6 {kind}, 1 ms I/O steps (steps/s at max_concurrency 8 / at 1)",
                f"{io_par:.0f} vs {io_ser:.0f} steps/s", io_par / io_ser, "—")

    if wanted("P9"):
        p9(row)
    if wanted("P10"):
        p10(row)

    if wanted("P7"):
        p7(row)
    if wanted("P8"):
        p8(row)
    if wanted("Q"):
        queue_rows(row)
    if wanted("P11"):
        p11(row)
    if wanted("P12"):
        p12(row)
    if wanted("P13"):
        p13(row)
    if wanted("M1"):
        m1(row)
    if wanted("M2"):
        m2(row)

    if ONLY:
        print(f"LW_BENCH_ONLY={','.join(sorted(ONLY))}: RESULTS.md left as it was")
        return
    write_results(rows, started)
    chart(curves)


P9_TURNS = 10
P9_RUNS = int(os.environ.get("LW_BENCH_P9_RUNS", "15"))


def p9_samples(sides: tuple[str, ...], turns: int, runs: int) -> dict[str, list[dict]]:
    """One fresh process per side (agents_side.py p9-serve), each warmed by one untimed
    agent run, then `runs` timed agent runs per side, interleaved: each round asks every
    side for one run, in an order rotated round by round."""
    procs = {side: subprocess.Popen(
        [sys.executable, os.path.join(HERE, "agents_side.py"), "p9-serve", side, str(turns)],
        env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for side in sides}

    def one(side: str) -> dict:
        proc = procs[side]
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("run\n")
        proc.stdin.flush()
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"P9 side {side} ended (exit {proc.wait()})")
        return json.loads(line)

    try:
        for side in sides:
            one(side)  # warm-up: imports, schema set-up, first-run caches; not timed
        got: dict[str, list[dict]] = {side: [] for side in sides}
        for r in range(runs):
            order = sides[r % len(sides):] + sides[:r % len(sides)]
            for side in order:
                got[side].append(one(side))
        return got
    finally:
        for proc in procs.values():
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(60)


def p9(row: Any) -> None:
    """Pydantic AI durability: what a capability adds to one agent run, per agent run and
    per durable step each engine actually records (BENCHMARKS.md P9)."""
    from benchmarks.agents_side import P9_SIDES

    turns, runs = P9_TURNS, max(P9_RUNS, 10)
    print(f"P9 Pydantic AI: one agent run of {turns} model requests calling a tool, then an "
          f"answer (FunctionModel); each side in a fresh process, 1 warm-up run, {runs} timed "
          "runs interleaved; added = median run - median plain run")
    got = p9_samples(P9_SIDES, turns, runs)
    wall = {side: median([s["seconds"] for s in xs]) for side, xs in got.items()}
    cpu = {side: median([s["cpu"] for s in xs]) for side, xs in got.items()}
    steps = {side: xs[-1]["steps"] for side, xs in got.items()}
    names = {side: xs[-1]["names"] for side, xs in got.items()}
    added = {side: wall[side] - wall["plain"] for side in got}
    added_cpu = {side: cpu[side] - cpu["plain"] for side in got}
    print(f"  plain agent run (baseline): {wall['plain'] * 1e3:.1f} ms wall, "
          f"{cpu['plain'] * 1e3:.1f} ms CPU")
    for side in P9_SIDES[1:]:
        print(f"  {side}: +{added[side] * 1e3:.1f} ms wall, +{added_cpu[side] * 1e3:.1f} ms CPU "
              f"per agent run; {steps[side]} durable steps {names[side]}")
    print(f"  of which Pydantic AI's own durable machinery (the floor side, no engine): "
          f"{added['floor'] / added['local_world']:.0%} of local_world's added time, "
          f"{added['floor'] / added['dbos-wal']:.2f}x DBOS WAL+FULL's")
    peer = "dbos-wal"
    for ours, label, goal in (
            ("local_world", "local_world", "≤ 0.5×"),
            ("memory", "memory", "—"),
            ("local_world-inline", "local_world, tools inline (as DBOS)", "—")):
        per_run = added[ours] / added[peer]
        row(f"P9 LittleWorkflowDurability on {label} / DBOSDurability (SQLite WAL+FULL), "
            "added per agent run",
            f"{added[ours] * 1e3:.1f} ms vs {added[peer] * 1e3:.1f} ms "
            f"(CPU {added_cpu[ours] / added_cpu[peer]:.2f}×)", per_run, goal)
        ours_step = added[ours] / steps[ours] * 1e6
        peer_step = added[peer] / steps[peer] * 1e6
        row(f"P9 {label} / DBOS WAL+FULL, added per actual durable step "
            f"({steps[ours]} vs {steps[peer]} steps)",
            f"{ours_step:.0f} µs vs {peer_step:.0f} µs", ours_step / peer_step, "—")
    row("P9 LittleWorkflowDurability on local_world / DBOSDurability as shipped "
        "(SQLite rollback journal), added per agent run",
        f"{added['local_world'] * 1e3:.1f} ms vs {added['dbos-rollback'] * 1e3:.1f} ms",
        added["local_world"] / added["dbos-rollback"], "—")
    syncs_lw, syncs_inline, syncs_dbos = (p9_fsyncs_per_run(side, turns) for side in
                                          ("local_world", "local_world-inline", "dbos-wal"))
    if syncs_lw is not None and syncs_inline is not None and syncs_dbos is not None:
        row("P9 fsyncs per agent run (strace): local_world, tools inline / DBOS WAL+FULL",
            f"{syncs_lw:g}, {syncs_inline:g} vs {syncs_dbos:g}", syncs_lw / syncs_dbos, "—")


def p9_fsyncs_per_run(side: str, turns: int) -> float | None:
    """fsync + fdatasync calls per agent run of one P9 side, counted by strace (None
    without it): a process making 1 run and one making 4, the difference over 3, so the
    World's or DBOS's set-up is not counted. A count, not a time: load does not move it."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    counts = []
    for runs in (1, 4):
        with tempfile.TemporaryDirectory(prefix="lwb-p9-strace-") as d:
            out = os.path.join(d, "summary.txt")
            subprocess.run([strace, "-f", "-qq", "-c", "-o", out, "-e", "trace=fsync,fdatasync",
                            sys.executable, os.path.join(HERE, "agents_side.py"), "p9-serve",
                            side, str(turns)],
                           input="run\n" * runs, env=ENV, capture_output=True, text=True,
                           check=True, timeout=600)
            with open(out) as f:
                counts.append(sum(int(line.split()[3]) for line in f
                                  if line.split()[-1:] in (["fsync"], ["fdatasync"])))
    return (counts[1] - counts[0]) / 3


def p10(row: Any) -> None:
    """LangGraph: per super-step cost of WorldCheckpointSaver vs LangGraph's own savers."""
    from benchmarks.agents_side import checkpointer_per_superstep_us

    k = 200
    print(f"P10 LangGraph per super-step, one node looping {k} times, durability='sync'")
    kinds = ("local_world", "memory", "SqliteSaver", "InMemorySaver")
    got: dict[str, list[float]] = {kind: [] for kind in kinds}
    for _ in range(REPS):
        for kind in kinds:
            got[kind].append(checkpointer_per_superstep_us(kind, k))
    us = {kind: median(xs) for kind, xs in got.items()}
    row("P10 WorldCheckpointSaver on local_world / SqliteSaver (file, synchronous=FULL)",
        f"{us['local_world']:.0f} µs vs {us['SqliteSaver']:.0f} µs",
        us["local_world"] / us["SqliteSaver"], "≤ 1×")
    row("P10 WorldCheckpointSaver on memory / InMemorySaver",
        f"{us['memory']:.0f} µs vs {us['InMemorySaver']:.0f} µs",
        us["memory"] / us["InMemorySaver"], "≤ 1×")

    p10_storage(row)


def p10_storage(row: Any) -> None:
    """LangGraph checkpoint storage against SqliteSaver (benchmarks/langgraph_storage.py)."""
    from benchmarks.langgraph_storage import build_long_thread, chat_bytes, cold_get_tuple_ms

    turns, steps = P10_CHAT_TURNS, P10_LONG_THREAD
    print(f"P10 bytes on disk after {turns} chat turns; cold get_tuple of a {steps:,}-checkpoint "
          "thread (fresh process each)")
    sides = ("local_world", "local-file", "SqliteSaver")
    size = {kind: chat_bytes(kind, turns) for kind in sides}
    threads = {kind: build_long_thread(kind, steps) for kind in sides}
    cold: dict[str, list[float]] = {kind: [] for kind in sides}
    cold_cpu: dict[str, list[float]] = {kind: [] for kind in sides}
    for _ in range(max(REPS, 7)):  # one fresh process per sample, sides interleaved
        for kind in sides:
            wall, cpu = cold_get_tuple_ms(kind, threads[kind])
            cold[kind].append(wall)
            cold_cpu[kind].append(cpu)
    for path in threads.values():
        shutil.rmtree(path, ignore_errors=True)
    peer_bytes, peer_ms = size["SqliteSaver"], median(cold["SqliteSaver"])
    peer_cpu = median(cold_cpu["SqliteSaver"])
    for kind in sides[:2]:
        row(f"P10 bytes on disk after {turns} turns of a growing chat thread: "
            f"WorldCheckpointSaver on {kind} / SqliteSaver",
            f"{size[kind] / 1e6:.2f} MB vs {peer_bytes / 1e6:.2f} MB", size[kind] / peer_bytes,
            "≤ 0.1×")
        ms = median(cold[kind])
        row(f"P10 cold get_tuple of a {steps:,}-checkpoint thread's head: WorldCheckpointSaver "
            f"on {kind} / SqliteSaver", f"{ms:.2f} ms vs {peer_ms:.2f} ms "
            f"(CPU {median(cold_cpu[kind]) / peer_cpu:.2f}×)", ms / peer_ms, "≤ 1×")


def p7(row: Any) -> None:
    import random

    print(f"P7 wake latency: event sent / timer due -> the next step starts ({P7_REPS} samples each)")
    rng = random.Random(7)
    timer = timer_overshoot(P7_REPS)
    same = event_same_process(P7_REPS, rng)
    other = event_other_process(P7_REPS, rng)
    dbos = dbos_json("wake", "wal", P7_REPS)
    ms = lambda xs: median(xs) * 1e3  # noqa: E731
    row("P7 timer due -> next step, in-process (local_world / DBOS.sleep)",
        f"{ms(timer['vs_committed']):.1f} ms after the committed wakeAt "
        f"({ms(timer['vs_call']):.1f} ms after call + {timer_sleep():g} s) vs "
        f"{ms(dbos['sleep']):.1f} ms after call + {timer_sleep():g} s",
        median(timer["vs_call"]) / median(dbos["sleep"]), "≤ 20 ms")
    row("P7 send_event -> next step of a waiter in the same process / DBOS send -> recv",
        f"{ms(same):.1f} ms vs {ms(dbos['recv_same']):.0f} ms", median(same) / median(dbos["recv_same"]),
        "≤ 20 ms, < DBOS")
    row("P7 send_event from another process -> a Worker process's next step (1 s sweep; logs of "
        "runs waiting for an event read every 0.25 s) / "
        "DBOSClient.send from another process -> recv",
        f"{ms(other):.0f} ms (max {max(other) * 1e3:.0f}) vs {ms(dbos['recv_other']):.0f} ms",
        median(other) / median(dbos["recv_other"]), "≤ 1.1 s")


def timer_sleep() -> float:
    from benchmarks.wake import SLEEP_SECONDS

    return SLEEP_SECONDS


def p8(row: Any) -> None:
    print(f"P8 worker throughput: {P8_RUNS:,} started runs of 3 durable steps, concurrency 8")
    ours, fast, slow = [], [], []
    for _ in range(REPS):  # interleaved
        ours.append(worker_throughput(P8_RUNS, 8))
        fast.append(P8_RUNS / dbos_json("queue", "wal", P8_RUNS, 0.05)["seconds"])
        slow.append(P8_RUNS / dbos_json("queue", "wal", P8_RUNS, 1.0)["seconds"])
    rate = median([o["runs_per_s"] for o in ours])
    starts = median([o["start_per_s"] for o in ours])
    drain = median([o["drain_per_s"] for o in ours])
    f, sl = median(fast), median(slow)
    best = max(f, sl)
    faster, other = ("0.05", "1.0") if f >= sl else ("1.0", "0.05")
    row(f"P8 {P8_RUNS:,} runs: Worker(concurrency=8) on local_world / DBOS Queue("
        f"worker_concurrency=8), polling_interval_sec={faster} (the faster DBOS)",
        f"{rate:.0f} vs {best:.0f} runs/s (ours: starts alone {starts:.0f}/s, drain alone "
        f"{drain:.0f}/s)", rate / best, "≥ 3×")
    row(f"P8 same, DBOS polling_interval_sec={other}", f"{rate:.0f} vs {min(f, sl):.0f} runs/s",
        rate / min(f, sl), "—")


def queue_rows(row: Any) -> None:
    """Queues (DESIGN §17), rows Q: P8 through a queue, rate-limit accuracy, S3 requests."""
    from benchmarks.queue_bench import queue_throughput, rate_accuracy, s3_requests

    print(f"P8 with queues: {P8_RUNS:,} enqueued runs of 3 durable steps, queue concurrency 8")
    ours, fast = [], []
    for _ in range(REPS):  # interleaved
        ours.append(queue_throughput(P8_RUNS, 8))
        fast.append(P8_RUNS / dbos_json("queue", "wal", P8_RUNS, 0.05)["seconds"])
    rate, f = median([o["runs_per_s"] for o in ours]), median(fast)
    row(f"P8 with queues, {P8_RUNS:,} runs: lw.enqueue on a queue of concurrency 8 + "
        "Worker(concurrency=8) on local_world / DBOS Queue(worker_concurrency=8), polling 0.05 s",
        f"{rate:.0f} vs {f:.0f} runs/s (ours: enqueue alone "
        f"{median([o['enqueue_per_s'] for o in ours]):.0f}/s, drain alone "
        f"{median([o['drain_per_s'] for o in ours]):.0f}/s)", rate / f, "≥ 3×")
    for limit in (5, 20):  # 20/s is near one worker's admission rate on 2 loaded cores
        acc = [rate_accuracy(limit, 1.0) for _ in range(REPS)]
        worst = max(a["most_in_window"] for a in acc)
        share = median([a["achieved_share"] for a in acc])
        row(f"Rate limit {limit}/1 s, {5 * limit} runs, one Worker(concurrency=8): most starts "
            "in any 1 s window (≤ limit) and achieved rate / limit",
            f"{worst} in a window; {share * 100:.0f} % of the limit", share, "≥ 0.9, none above")
    s3 = s3_requests()
    row("Queue S3 requests (moto): per enqueue; per queued run drained beyond a plain run's",
        f"{s3['per_enqueue']:.1f} per enqueue (start_workflow: {s3['per_start_workflow']:.1f}); "
        f"{s3['per_queued_run_drained']:.1f} vs "
        f"{s3['per_plain_run_drained']:.1f} per run drained (+{s3['per_start_extra']:.1f} per start)",
        None, "—")


#: World sizes for P11 (LW_P11_SIZES=1000,10000 for a shorter run).
P11_SIZES = [int(x) for x in os.environ.get("LW_P11_SIZES", "1000,10000,100000").split(",") if x]


def p11(row: Any) -> None:
    from benchmarks.catalogue_bench import build_world, measure

    print("P11 finding runs among N finished ones (1 % failed; 50 older than 30 days)")
    for kind in ("local_world", "local-file"):
        first_sizes: dict[str, float] = {}
        for n in P11_SIZES:
            path, now = build_world(kind, n)
            figures = measure(kind, path, now)
            shutil.rmtree(path, ignore_errors=True)
            for name, ms in figures.items():
                base = first_sizes.setdefault(name, ms)
                growth = ms / base if base else None
                goal = "≤ 100 ms, ≤ 1.5× growth" if "process" not in name else "—"
                row(f"P11 {kind} N={n:,}: {name} (growth since N={P11_SIZES[0]:,})",
                    f"{ms:.1f} ms", growth, goal)


#: Turns of the chat thread whose stored bytes P10 compares (issue 29: 200).
P10_CHAT_TURNS = 200
P10_LONG_THREAD = 1000
P13_STEPS = 50
#: Steps of the M1 / M2 runs (BENCHMARKS.md: 20,000; LW_BENCH_M_STEPS for a quick check).
M_STEPS = int(os.environ.get("LW_BENCH_M_STEPS", "20000"))


def p13(row: Any) -> None:
    """Storage requests of an S3 World (object_store_cost.py, moto on 127.0.0.1)."""
    print(f"P13 S3 World against moto on 127.0.0.1: requests per step ({P13_STEPS}-step run) "
          "and per run")
    out = tempfile.mktemp(suffix=".json")
    sub("object_store_cost.py", P13_STEPS, "--store=s3", f"--json={out}")
    with open(out) as f:
        s3 = json.load(f)["s3"]
    by_method = ", ".join(f"{m} {c}" for m, c in sorted(s3["by_method"].items()))
    row(f"P13 S3 World: requests per durable step ({P13_STEPS}-step run, run overhead "
        "subtracted)", f"{s3['requests_per_step']:.1f} requests, {s3['ms_per_step']:.1f} ms "
        f"per step (the whole {P13_STEPS}-step run by method: {by_method})", None, "—")
    row("P13 S3 World: requests per run (start, lock, index, end: a 0-step run)",
        f"{s3['run_overhead_requests']} requests, {s3['run_overhead_ms']:.0f} ms", None, "—")
    row("P13 S3 World: a worker's sweeps with nothing to do (the first looks at the schedules)",
        f"first {s3['sweep_requests_idle']}, next {s3['sweep_requests_next']} requests", None, "—")
    row("P13 S3 World: a held run lock's renewals",
        f"{s3['renewals_per_lease']:.1f} requests per lease", None, "—")


def memory_json(which: str, steps: int) -> dict:
    out = tempfile.mktemp(suffix=".json")
    sub("memory_cost.py", which, steps, out)
    with open(out) as f:
        return json.load(f)


def m1(row: Any) -> None:
    print(f"M1 memory virtual_world: bytes still allocated after a {M_STEPS:,}-step run "
          "(tracemalloc, fresh process)")
    got = memory_json("m1", M_STEPS)
    row(f"M1 memory virtual_world, {M_STEPS:,} steps: Python bytes still allocated after the "
        "run / bytes of its events as canonical JSON",
        f"{got['retained_bytes'] / 1e6:.1f} MB for {got['events_json_bytes'] / 1e6:.1f} MB of "
        f"JSON ({got['events']:,} events)", got["retained_bytes"] / got["events_json_bytes"],
        "≤ 1.5×")


def m2(row: Any) -> None:
    small = M_STEPS // 10
    print(f"M2 local_world: peak Python allocation during a {M_STEPS:,}-step run and a "
          f"{small:,}-step one (tracemalloc, fresh process each)")
    big, little = memory_json("m2", M_STEPS), memory_json("m2", small)
    row(f"M2 local_world: peak Python allocation during a run, {M_STEPS:,} steps / {small:,} "
        "steps", f"{big['peak_bytes'] / 1e6:.1f} MB vs {little['peak_bytes'] / 1e6:.1f} MB "
        f"peak ({big['retained_bytes'] / 1e6:.1f} MB still allocated after the "
        f"{M_STEPS:,}-step run)", big["peak_bytes"] / little["peak_bytes"],
        "≤ 10 MB, flat in the number of steps (≈ 1×)")


def p12(row: Any) -> None:
    from benchmarks.catalogue_bench import p12 as measure_p12

    print("P12 start-up of a short command (median of 5 processes)")
    for name, ms in measure_p12().items():
        goal = "≤ 200 ms" if "runs" in name else "≤ 120 ms"
        row(f"P12 {name}", f"{ms:.0f} ms", None, goal)


SETTINGS = [
    "How each side is timed and how durable it is:",
    "",
    "- **P1, P2**: every side is timed from the run's start to its end — little-workflow "
    "from the `run_workflow` call to its return (the World is opened before), DBOS from "
    "the workflow call to its return (`DBOS.launch()` before), LangGraph from `invoke` "
    "to its return — with the same number of steps (1,000) on every side.",
    "- **local_world**: events in SQLite WAL; a step's `step.succeeded` is a "
    "`synchronous=FULL` commit (the WAL is fdatasynced before `ctx.step` returns); "
    "`step.started` is a `synchronous=NORMAL` commit (in the WAL, survives a process "
    "kill, synced by the next FULL commit). Two commits per step.",
    "- **DBOS WAL/FULL**: DBOS 3.x system database on SQLite, `journal_mode=WAL` and "
    "`synchronous=FULL` set by a SQLAlchemy `connect` listener. **DBOS as shipped**: "
    "SQLite rollback journal, `synchronous=FULL` (SQLite's default).",
    "- **LangGraph SqliteSaver**: `sqlite3` defaults (rollback journal, "
    "`synchronous=FULL`), one checkpoint per node. **InMemorySaver**: no storage.",
    "- **Honest floor**: one bare `INSERT` + `COMMIT` per step, WAL + `synchronous=FULL`, "
    "on a fresh events.db whose WAL is prefilled in the first write transaction exactly as "
    "local_world's (`_prefill_wal`), same N, timed from the first commit to the last.",
    "- **memory**: `virtual_world` over a private fsspec `MemoryFileSystem`; nothing "
    "is synced (there is no disk).",
    "- **local-file** (P3): `virtual_world` over `file://`: one file per event, written "
    "to a temp name, fsynced, linked into place; `step.succeeded` also fsyncs the "
    "directory entry (`step.started` leaves it to the next durable event).",
    "- **P6**: a group's children commit their events without a sync of their own "
    "(local_world: `synchronous=NORMAL` commits), the group syncs once at its end, "
    "before the workflow goes on; the same at both concurrencies.",
    "- **P7**: both sides stamp `time.time()` (one clock for every process) when the next "
    "step starts and subtract the moment the event was sent (stamped just before "
    "`send_event` / `DBOS.send` / `DBOSClient.send`) or the timer was due. The sender "
    "waits until the run is blocked, then 0.3 s + a seeded random 0–1 s (the same draws "
    "on both sides), so the send falls at a random phase of any polling. little-workflow: "
    "local_world; (a) `ctx.sleep(0.2)` in `run_workflow`, next step vs the committed "
    "`wakeAt` (and vs the time just before the sleep call + 0.2 s, as DBOS is measured); "
    "(b) the waiter blocked in `run_workflow` in a thread of the sending process; (c) the "
    "run suspended and continued by `lw.Worker(...).run()` in another process (a full "
    "sweep every 1 s; between sweeps it reads the logs of runs it knows wait for an event "
    "every 0.25 s), the event sent from the benchmark process. DBOS 3.x on SQLite (WAL, synchronous=FULL, "
    "its default 1 s notification polling): `DBOS.sleep(0.2)`, `DBOS.recv` in a workflow "
    "started with `DBOS.start_workflow`, `DBOS.send` from the same process, "
    "`DBOSClient.send` from a child process on the same SQLite file.",
    "- **P8**: 1,000 runs of 3 durable no-op steps, timed from the first start to the last "
    "completion. little-workflow: `lw.start_workflow` × 1,000 on local_world, then one "
    "`lw.Worker(concurrency=8).run_until_idle()` (returns once every run completed; "
    "durability as in P1). DBOS 3.x on SQLite (WAL, synchronous=FULL — its faster P1 "
    "setting): `DBOS.register_queue('q', worker_concurrency=8, polling_interval_sec=…)`, "
    "1,000 `enqueue` calls (the queue runs meanwhile), ended at the last workflow body's "
    "own stamp after its third step — a little before DBOS commits the workflow's status, "
    "in DBOS's favour. Twice: polling 1.0 s (default) and 0.05 s; the ratio is against the "
    "faster.",
    "- **P9**: one Pydantic AI agent run of 10 model requests that each call one function "
    "tool, then an answer (`FunctionModel`, no network). Every side in a fresh process of "
    "its own, warmed by one untimed agent run, then timed runs interleaved side by side, "
    "each from the outside (the awaited call that starts the run until it returns). "
    "*Added* = a side's median run minus the median run of the same agent without "
    "durability. `LittleWorkflowDurability` in a workflow on memory and local_world (every "
    "tool a durable step; `-inline`: tools marked not durable, as DBOS runs plain function "
    "tools); pydantic-ai's `DBOSDurability` in a `@DBOS.workflow` on SQLite WAL + "
    "synchronous=FULL and as shipped. Per actual durable step: each engine's own count of "
    "the steps it recorded.",
    "- **P10**: one LangGraph node looping 200 times, `durability=\"sync\"` (each "
    "checkpoint stored before the next super-step), sides interleaved. Bytes "
    "(`benchmarks/langgraph_storage.py`): one chat thread, 200 `invoke`s each adding a "
    "question and the node's answer to a message list (`operator.add`), every file of "
    "each side's directory once the side is closed (SqliteSaver: its database and "
    "journals). Cold `get_tuple`: the head of a 1,000-checkpoint thread, first call in a "
    "fresh process after the World (or connection) and saver are opened, untimed; median "
    "of 7 processes per side, interleaved.",
    "- **P11, P12**: `benchmarks/catalogue_bench.py` (N finished runs written through the "
    "World's own append path; P12: whole processes, median of 5).",
    "- **P13**: `benchmarks/object_store_cost.py --store=s3`: a `virtual_world` on S3 served "
    "by moto on 127.0.0.1, its requests counted at the client; a real store adds a network "
    "round trip to each request, so the request counts carry over and the times do not. "
    "Per step: (requests of a 50-step run − requests of a 0-step run) / 50, after one "
    "warm-up run.",
    "- **M1, M2**: tracemalloc in a fresh process, started after one untimed 1-step run on "
    "the same World (imports and first-use caches not counted); still allocated = after a "
    "full `gc.collect()`, the World kept alive; canonical JSON = "
    "`json.dumps(envelope, sort_keys=True, separators=(',', ':'))` of each of the run's "
    "events, the World's own encoding. One measurement each: allocation is not timing.",
]


def write_results(rows: list[tuple[str, str, str, str]], started: float) -> None:
    from importlib.metadata import version

    import dbos  # noqa: F401

    lines = [
        "# Benchmark results",
        "",
        f"Measured {datetime.date.today().isoformat()} by `python benchmarks/run.py` on "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"SQLite {__import__('sqlite3').sqlite_version}; DBOS {version('dbos')}, "
        f"LangGraph {version('langgraph')}, langgraph-checkpoint-sqlite "
        f"{version('langgraph-checkpoint-sqlite')}, pydantic-ai {version('pydantic-ai-slim')}, "
        f"moto {version('moto')}. Medians of {REPS} repetitions ({P7_REPS} for "
        f"P7), every ratio "
        f"measured side by side in the same run ({time.time() - started:.0f} s in all; "
        f"`uptime` load average {LOAD_AT_START:.1f} at the start and "
        f"{os.getloadavg()[0]:.1f} at the end on {os.cpu_count()} cores: the machine is "
        "shared with other work, so absolute figures move; ratios are measured interleaved).",
        "",
        *SETTINGS,
        "",
        "| measure | measured | ratio | goal |",
        "|---|---|---|---|",
        *[f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows],
        "",
        "![per-step cost against step number](per_step_cost.png)",
        "",
    ]
    with open(os.path.join(HERE, "RESULTS.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


def chart(curves: dict[str, list[float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    window = 100
    for label, stamps in curves.items():
        xs, ys = [], []
        for start in range(1, len(stamps) - window + 1, window):
            xs.append(start + window // 2)
            ys.append(per_step_us(stamps, start, start + window - 1))
        ax.plot(xs, ys, label=label)
    ax.set_xlabel("step number")
    ax.set_ylabel(f"µs per step (mean over {window} steps)")
    ax.set_title("Per-step durable cost against step number")
    ax.set_ylim(bottom=0)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "per_step_cost.png"), dpi=110)


if __name__ == "__main__":
    main()
