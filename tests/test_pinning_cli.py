"""The newcomer's scenario (issue 26), with real processes: a run waits for an event; the
step `tool` is renamed `search_tool` in the code; `little send` + `little worker`. The tool
is not called again (a ledger file), the worker says so once and leaves the run alone, the
run stays resumable, and fixed code finishes it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
from checkout import SRC

import little_workflow as lw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

APP = '''
import os

import little_workflow as lw

LEDGER = os.environ["LEDGER"]


def tool() -> str:
    with open(LEDGER, "a") as f:
        f.write("tool\\n")
    return "found"


def finish() -> str:
    with open(LEDGER, "a") as f:
        f.write("finish\\n")
    return "done"


@lw.workflow(id="agent"{version})
async def agent(ctx, input):
{body}
    decision = await ctx.wait_for_event("decision", "approval")
    return [found, decision, await ctx.step("finish", finish)]
'''

CALLS_TOOL = '    found = await ctx.step("tool", tool)'
CALLS_SEARCH_TOOL = '    found = await ctx.step("search_tool", tool)'
PATCHED = '''    if ctx.patched("search-tool"):
        found = await ctx.step("search_tool", tool)
    else:
        found = await ctx.step("tool", tool)'''


class App:
    def __init__(self, tmp_path: Any, world_kind: str):
        self.dir = tmp_path / "app"
        self.dir.mkdir()
        self.ledger = tmp_path / "ledger.txt"
        self.ledger.write_text("")
        if world_kind == "data-dir":
            self.world_args = ["--data-dir", str(tmp_path / "data")]
        else:
            self.world_args = ["--world", f"file://{tmp_path / 'wf'}"]
        self.env = {**os.environ, "PYTHONPATH": SRC, "LEDGER": str(self.ledger),
                    "PYTHONDONTWRITEBYTECODE": "1"}

    def write(self, body: str, version: str | None) -> None:
        spelled = "" if version is None else f", version={version!r}"
        (self.dir / "app.py").write_text(APP.format(version=spelled, body=body))

    def little(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "little_workflow.cli", *args, *self.world_args],
                              cwd=self.dir, env=self.env, capture_output=True, text=True,
                              timeout=120)

    def start(self, run_id: str) -> None:
        world = self.world_args[1] if self.world_args[0] == "--world" else None
        make = (f"lw.virtual_world({world!r})" if world else
                f"lw.local_world({self.world_args[1]!r})")
        code = (f"import app, little_workflow as lw\n"
                f"with {make} as w:\n"
                f"    lw.start_workflow(app.agent, {{}}, world=w, run_id={run_id!r})\n")
        subprocess.run([sys.executable, "-c", code], cwd=self.dir, env=self.env, check=True,
                       timeout=120)

    def calls(self) -> list[str]:
        return self.ledger.read_text().split()

    def worker_until(self, needle: str, then_seconds: float) -> str:
        """`little worker app` (sweeping until stopped): once `needle` is printed, let it
        sweep `then_seconds` more, then Ctrl-C. Returns what it printed."""
        proc = subprocess.Popen([sys.executable, "-m", "little_workflow.cli", "worker", "app",
                                 *self.world_args], cwd=self.dir, env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        lines: list[str] = []
        seen = threading.Event()

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if needle in line:
                    seen.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            assert seen.wait(60), "".join(lines)
            time.sleep(then_seconds)  # a few sweeps (one a second): no second report
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
            reader.join(10)
        return "".join(lines)


def waiting_for_approval(app: App, run_id: str) -> None:
    app.start(run_id)
    r = app.little("worker", "app", "--until-idle")
    assert r.returncode == 0, r.stderr
    assert f"{run_id} waiting at decision" in r.stderr, r.stderr
    assert app.calls() == ["tool"]


@pytest.mark.parametrize("world_kind", ["data-dir", "file"])
def test_renamed_step_without_a_version_the_run_is_pinned_and_left_alone(tmp_path, world_kind):
    app = App(tmp_path, world_kind)
    app.write(CALLS_TOOL, version=None)
    waiting_for_approval(app, "run_x")
    app.write(CALLS_SEARCH_TOOL, version=None)
    assert app.little("send", "run_x", "approval", "--payload", '"ok"').returncode == 0
    out = app.worker_until("run_x left alone", then_seconds=3.0)
    assert out.count("run_x left alone") == 1, out
    assert "version" in out and "fork" in out
    assert "Traceback" not in out
    assert app.calls() == ["tool"]
    # `little run` says the same in one line.
    r = app.little("run", "app:agent", "--run-id", "run_x", "--input", "{}")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "version=" in r.stderr, r.stderr
    # `little runs` shows what the run needs.
    rows = json.loads(app.little("runs", "--json").stdout)
    row = next(r for r in rows if r["runId"] == "run_x")
    assert row["status"] == "waiting" and row["needsVersion"].startswith("sha256:")
    assert row["needsVersion"] in app.little("runs").stdout
    # `--json`: one object per run left alone, naming the error.
    r = app.little("worker", "app", "--until-idle", "--json")
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(x["runId"], x["event"], x["error"]["type"]) for x in lines] == [
        ("run_x", "refused", "WorkflowVersionError")], r.stdout
    assert app.calls() == ["tool"]
    # The code it was created with finishes it, without calling the tool again.
    app.write(CALLS_TOOL, version=None)
    r = app.little("worker", "app", "--until-idle")
    assert r.returncode == 0 and "run_x completed" in r.stderr, r.stderr
    assert app.calls() == ["tool", "finish"]
    rows = json.loads(app.little("runs", "--json").stdout)
    assert next(r for r in rows if r["runId"] == "run_x")["needsVersion"] is None
    assert app.little("verify").returncode == 0


@pytest.mark.parametrize("world_kind", ["data-dir", "file"])
def test_renamed_step_under_one_version_is_a_divergence_and_calls_nothing(tmp_path, world_kind):
    app = App(tmp_path, world_kind)
    app.write(CALLS_TOOL, version="1")
    waiting_for_approval(app, "run_y")
    app.write(CALLS_SEARCH_TOOL, version="1")
    assert app.little("send", "run_y", "approval", "--payload", '"ok"').returncode == 0
    out = app.worker_until("run_y left alone", then_seconds=3.0)
    assert out.count("run_y left alone") == 1, out
    assert "'tool'" in out and "'search_tool'" in out and "Traceback" not in out
    assert app.calls() == ["tool"]
    world = (lw.local_world(app.world_args[1]) if world_kind == "data-dir"
             else lw.virtual_world(app.world_args[1]))
    with world:
        assert lw.materialize_run_state(world, "run_y").status == "waiting"
        assert [e.type for e in world.list_events("run_y")][-2:] == ["signal.received",
                                                                    "run.started"]
    # A body that serves old runs and new ones (same version) finishes it.
    app.write(PATCHED, version="1")
    r = app.little("worker", "app", "--until-idle")
    assert r.returncode == 0 and "run_y completed" in r.stderr, r.stderr
    assert app.calls() == ["tool", "finish"]
    assert app.little("verify").returncode == 0
