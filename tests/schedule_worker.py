"""A worker process for the schedule tests: `python schedule_worker.py DATA CLOCK_FILE
STOP_FILE` runs a Worker on `local_world(DATA)` whose clock is the time written in
CLOCK_FILE (one clock shared by every process), until STOP_FILE exists."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import little_workflow as lw  # noqa: E402


class FileClock:
    """The World's clock read from a file the test writes: every process sees one time."""

    def __init__(self, path: str):
        self.path = path

    def now(self) -> float:
        with open(self.path) as f:  # replaced whole by the test (os.replace)
            return float(f.read())

    async def sleep_until(self, when: float) -> None:
        while self.now() < when:
            await asyncio.sleep(0.01)


@lw.workflow(id="sched-tick")
async def tick(ctx: lw.RunContext, input: dict) -> str:
    return await ctx.step("say", lambda: f"tick {input['n']}")


def main(data: str, clock_file: str, stop_file: str) -> None:
    world = lw.local_world(data, clock=FileClock(clock_file))
    worker = lw.Worker(world, workflows=[tick], concurrency=2, sweep_seconds=0.05)
    threading.Thread(target=worker.run, daemon=True).start()
    while not os.path.exists(stop_file):
        time.sleep(0.05)
    worker.stop()
    worker.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])
