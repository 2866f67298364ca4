"""Per-append cost at event 10 vs event 10,000 (history independence of append_event).

    python benchmarks/append_cost.py
"""

from __future__ import annotations

import time

if __package__ in (None, ""):
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import bare_sqlite_commit_us, make_world, median

N = 10_000


def append_costs(kind: str) -> tuple[float, float]:
    world = make_world(kind)
    stamps = [time.perf_counter()]
    for i in range(N):
        world.append_event("run_append", "step.succeeded", {"stepPath": f"s{i}", "output": i})
        stamps.append(time.perf_counter())
    first = (stamps[100] - stamps[0]) / 100 * 1e6
    last = (stamps[N] - stamps[N - 100]) / 100 * 1e6
    return first, last


def main(reps: int = 3) -> list[dict]:
    rows = []
    for kind in ("memory", "local-file", "local_world"):
        runs = [append_costs(kind) for _ in range(reps)]
        first, last = median([r[0] for r in runs]), median([r[1] for r in runs])
        rows.append({"world": kind, "first100_us": first, "last100_us": last, "ratio": last / first})
    bare = median([bare_sqlite_commit_us() for _ in range(reps)])
    print(f"{'world':<12} {'events 1-100 µs':>16} {'9,901-10,000 µs':>16} {'ratio':>7}")
    for r in rows:
        print(f"{r['world']:<12} {r['first100_us']:>16.1f} {r['last100_us']:>16.1f} {r['ratio']:>7.2f}")
    lw_row = next(r for r in rows if r["world"] == "local_world")
    print(f"bare SQLite WAL commit (synchronous=FULL): {bare:.1f} µs; "
          f"local_world append / bare commit = {lw_row['last100_us'] / bare:.2f}")
    return rows


if __name__ == "__main__":
    main()
