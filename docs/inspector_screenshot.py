"""Makes docs/inspector.png: a real run (retries, a parallel group, a sub-run) on a
local_world, its `little inspect` page, and a headless Chromium screenshot of it.

    python docs/inspector_screenshot.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

import little_workflow as lw  # noqa: E402
from little_workflow.ops import render_run_html  # noqa: E402

attempts = {"n": 0}


def fetch(url: str) -> str:
    time.sleep(0.08)
    return f"text of {url}"


def flaky_translate(text: str) -> str:
    attempts["n"] += 1
    time.sleep(0.05)
    if attempts["n"] < 3:
        raise ConnectionError(f"translation API timed out (attempt {attempts['n']})")
    return text.upper()


def summarize(part: int) -> str:
    time.sleep(0.03 + 0.02 * part)
    return f"summary {part}"


@lw.workflow(id="notify", version="1")
async def notify(ctx: lw.RunContext, input: dict) -> dict:
    await ctx.step("send", fetch, "mail://team")
    return {"sent": True}


@lw.workflow(id="weekly-report", version="4")
async def weekly_report(ctx: lw.RunContext, input: dict) -> dict:
    text = await ctx.step("fetch", fetch, input["url"])
    text = await ctx.step("translate", flaky_translate, text, retry=lw.Retry(max_attempts=4, backoff=0.05))
    parts = await ctx.parallel("summaries", [partial(summarize, i) for i in range(5)])
    await ctx.call_workflow("notify", {"parts": len(parts)})
    return {"summary": " / ".join(parts), "chars": len(text)}


def main() -> None:
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inspector.png")
    with tempfile.TemporaryDirectory() as tmp:
        world = lw.local_world(os.path.join(tmp, "data"))
        lw.run_pipeline([notify], {"url": "https://example.org/news"}, orchestrator=weekly_report,
                        world=world, run_id="run_weekly_2026_48")
        page = os.path.join(tmp, "page.html")
        with open(page, "w", encoding="utf-8") as f:
            f.write(render_run_html(world, "run_weekly_2026_48"))
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={tmp}/profile", "--window-size=1280,1040",
                        "--virtual-time-budget=3000", f"--screenshot={out}", "file://" + page],
                       check=True, capture_output=True)
    print("wrote", out)


if __name__ == "__main__":
    main()
