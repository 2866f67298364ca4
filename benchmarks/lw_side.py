"""little-workflow side of the resume benchmark, in its own process like DBOS's.

    python benchmarks/lw_side.py prepare N DIR          N steps, then SIGKILL itself
    python benchmarks/lw_side.py recover N DIR OUT.json resume the run, time it
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import little_workflow as lw

RUN_ID = "run_bench_recovery"
KILL_AT = int(os.environ.get("LW_BENCH_KILL_AT", "-1"))


def noop(i: int) -> int:
    if i == KILL_AT:
        os.kill(os.getpid(), signal.SIGKILL)
    return i


@lw.workflow(id="bench-recovery")
async def steps(ctx: lw.RunContext, input: dict) -> int:
    for i in range(input["n"]):
        await ctx.step(f"s{i}", noop, i)
    return input["n"]


def main() -> None:
    action = sys.argv[1]
    if action == "prepare":
        n, directory = int(sys.argv[2]), sys.argv[3]
        os.environ["LW_BENCH_KILL_AT"] = str(n)
        global KILL_AT
        KILL_AT = n
        lw.run_workflow(steps, {"n": n + 1}, world=lw.local_world(directory), run_id=RUN_ID)
    elif action == "recover":
        n, directory, out = int(sys.argv[2]), sys.argv[3], sys.argv[4]
        t0 = time.perf_counter()
        result = lw.run_workflow(steps, {"n": n + 1}, world=lw.local_world(directory), run_id=RUN_ID)
        elapsed = time.perf_counter() - t0
        with open(out, "w") as f:
            json.dump({"seconds": elapsed, "result": result.output}, f)


if __name__ == "__main__":
    main()
