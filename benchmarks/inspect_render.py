"""How long the inspector page of a 10,000-step run takes to render in headless Chromium.

    python benchmarks/inspect_render.py [--steps 10000]

Runs a real workflow of N steps (a parallel group of N/2 and N/2 sequential steps) on a
local_world, writes its page with `render_run_html`, loads it in Debian's `chromium
--headless` and reads two figures the page records on <body>: `data-render-ms` (from
navigation start until the page's DOM is built: HTML parsed, JSON read, timeline and
first rows of the event table made) and `data-paint-ms` (until the frame after that was
laid out). A figure, never a timed assertion.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import little_workflow as lw  # noqa: E402
from little_workflow.ops import render_run_html  # noqa: E402


def square(i: int) -> int:
    return i * i


def build_run(data_dir: str, steps: int) -> lw.World:
    world = lw.local_world(data_dir)

    @lw.workflow(id="bench-10k")
    async def many(ctx: lw.RunContext, input: dict) -> dict:
        half = input["steps"] // 2
        parts = await ctx.parallel("items", [partial(square, i) for i in range(half)])
        total = sum(parts)
        for i in range(input["steps"] - half):
            total += await ctx.step(f"seq-{i}", square, i)
        return {"total": total}

    lw.run_workflow(many, {"steps": steps}, world=world, run_id="run_bench")
    return world


def chromium_load(path: str) -> tuple[float, dict[str, int]]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        sys.exit("needs headless Chromium: apt-get install -y chromium")
    with tempfile.TemporaryDirectory() as profile:
        start = time.perf_counter()
        out = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
             "--window-size=1400,1000", "--virtual-time-budget=20000", "--dump-dom",
             "file://" + os.path.abspath(path)], capture_output=True, text=True, timeout=300).stdout
        wall = time.perf_counter() - start
    figures = {k: int(v) for k, v in re.findall(r'data-(render|paint)-ms="(\d+)"', out)}
    return wall, figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        world = build_run(os.path.join(tmp, "data"), args.steps)
        run_s = time.perf_counter() - t
        t = time.perf_counter()
        page = os.path.join(tmp, "page.html")
        with open(page, "w", encoding="utf-8") as f:
            f.write(render_run_html(world, "run_bench"))
        write_s = time.perf_counter() - t
        events = len(world.list_events("run_bench"))
        size_mb = os.path.getsize(page) / 1e6
        empty = os.path.join(tmp, "empty.html")
        with open(empty, "w") as f:
            f.write("<!doctype html><html><body></body></html>")
        base_wall, _ = chromium_load(empty)
        wall, figures = chromium_load(page)
    print(f"inspect page, {args.steps} steps / {events} events: run {run_s:.1f} s, "
          f"page written in {write_s:.2f} s ({size_mb:.1f} MB); headless Chromium: DOM built "
          f"{figures.get('render', -1)} ms, painted {figures.get('paint', -1)} ms after navigation "
          f"start; whole chromium --dump-dom {wall:.1f} s (an empty page: {base_wall:.1f} s)")


if __name__ == "__main__":
    main()
