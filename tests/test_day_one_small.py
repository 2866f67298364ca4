"""Smaller day-one papercuts: `little cancel` says what happened, not the old status; a
user file named like one of the CLI's own modules (rich.py) does not break the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from checkout import SRC

import little_workflow as lw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLOWS = '''
import time

import little_workflow as lw


@lw.workflow(id="slow")
async def slow(ctx, input):
    await ctx.step("long", time.sleep, 5)
    await ctx.step("after", lambda: 1)
    return "done"


@lw.workflow(id="quick")
async def quick(ctx, input):
    return await ctx.step("one", lambda: 1)
'''

# The `little` console script, as pip writes it: run from its own folder, so sys.path[0]
# is not the user's project (unlike `python -m`).
ENTRY = "import sys\nfrom little_workflow.cli import main\nsys.exit(main())\n"


def little(*args: str, cwd, entry: str | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, entry] if entry else [sys.executable, "-m", "little_workflow.cli"]
    return subprocess.run([*command, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": SRC})


def test_cancel_of_a_running_run_says_the_request_not_the_old_status(tmp_path):
    (tmp_path / "flows.py").write_text(FLOWS)
    env = {**os.environ, "PYTHONPATH": SRC}
    runner = subprocess.Popen([sys.executable, "-m", "little_workflow.cli", "run", "flows:slow",
                               "--run-id", "run_slow"], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        world = lw.local_world(str(tmp_path / ".little-workflow"))
        deadline = time.monotonic() + 60
        while not any(e.type == "step.started" for e in world.list_events("run_slow")):
            assert time.monotonic() < deadline and runner.poll() is None
            time.sleep(0.05)
        r = little("cancel", "run_slow", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == ("run_slow: cancel requested; it is running elsewhere and "
                                    "stops at its next step, sleep or wait"), r.stdout
        runner.wait(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert lw.materialize_run_state(lw.local_world(str(tmp_path / ".little-workflow")),
                                    "run_slow").status == "cancelled"


def test_a_user_file_named_rich_does_not_break_the_cli(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "flows.py").write_text(FLOWS)
    (project / "rich.py").write_text("raise ImportError('this is the user\\'s own rich.py')\n")
    entry = tmp_path / "bin" / "little"
    entry.parent.mkdir()
    entry.write_text(ENTRY)
    r = little("run", "flows:quick", "--run-id", "run_q", cwd=project, entry=str(entry))
    assert r.returncode == 0 and "run_q completed" in r.stdout, r.stderr
    r = little("worker", "flows", "--until-idle", cwd=project, entry=str(entry))
    assert r.returncode == 0, r.stderr


def test_little_artifacts_shows_an_artifacts_content(tmp_path):
    (tmp_path / "flows.py").write_text(FLOWS)
    world = lw.local_world(str(tmp_path / ".little-workflow"))
    sys.path.insert(0, str(tmp_path))
    sys.modules.pop("flows", None)
    try:
        import flows
    finally:
        sys.path.remove(str(tmp_path))
    lw.run_workflow(flows.quick, {}, world=world, run_id="run_art")
    big = world.write_artifact("run_art", "one", "report", {"rows": list(range(5))})
    world.write_artifact("run_art", "one", "photo", b"\x89PNG\r\n\x00\xff",
                         content_type="image/png", encoding="binary")
    r = little("artifacts", "run_art", "--show", "report", cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip().startswith("{"), r.stderr
    assert json_loads(r.stdout) == {"rows": [0, 1, 2, 3, 4]}
    r = little("artifacts", "run_art", "--show", big.artifact_ref, cwd=tmp_path)
    assert json_loads(r.stdout) == {"rows": [0, 1, 2, 3, 4]}
    raw = subprocess.run([sys.executable, "-m", "little_workflow.cli", "artifacts", "run_art",
                          "--show", "photo"], cwd=tmp_path, capture_output=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": SRC})
    assert raw.returncode == 0 and raw.stdout == b"\x89PNG\r\n\x00\xff"
    r = little("artifacts", "run_art", "--show", "nope", cwd=tmp_path)
    assert r.returncode == 1 and "no artifact 'nope'" in r.stderr and "photo" in r.stderr, r.stderr


def json_loads(text: str):
    import json

    return json.loads(text)


V1 = '''
import little_workflow as lw


@lw.workflow(id="pipeline")
async def pipeline(ctx, input):
    a = await ctx.step("fetch", lambda: 1)
    return await ctx.step("store", lambda: a + 1)
'''

V2 = V1.replace('"fetch"', '"download"')  # a renamed step: old logs no longer fit


def test_little_replay_check_checks_code_against_stored_runs(tmp_path):
    (tmp_path / "flows.py").write_text(V1)
    for run_id in ("run_a", "run_b"):
        assert little("run", "flows:pipeline", "--run-id", run_id, cwd=tmp_path).returncode == 0
    r = little("replay-check", "flows:pipeline", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "run_a: ok (completed)" in r.stdout and "run_b: ok (completed)" in r.stdout, r.stdout
    (tmp_path / "flows.py").write_text(V2)
    r = little("replay-check", "flows:pipeline", "run_a", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "run_a: diverges" in r.stdout and "download" in r.stdout and "run_b" not in r.stdout, r.stdout


def test_parallel_takes_retry_and_timeout_for_each_child(tmp_path):
    attempts: dict[int, int] = {}

    def flaky(i: int) -> int:
        attempts[i] = attempts.get(i, 0) + 1
        if attempts[i] < 2:
            raise RuntimeError(f"child {i}: first try fails")
        return i * 10

    @lw.workflow(id="fan")
    async def fan(ctx, input):
        from functools import partial

        return await ctx.parallel("items", [partial(flaky, i) for i in range(3)],
                                  retry=lw.Retry(max_attempts=3, backoff=0.01), timeout=30)

    world = lw.virtual_world("memory://parallel-retry")
    assert lw.run_workflow(fan, {}, world=world, run_id="run_fan").output == [0, 10, 20]
    state = lw.materialize_run_state(world, "run_fan")
    assert [state.steps[f"items/{i}"].attempts for i in range(3)] == [2, 2, 2]


def test_no_two_examples_claim_the_same_demo_number():
    import re

    claims: dict[str, list[str]] = {}
    for name in sorted(os.listdir(os.path.join(ROOT, "examples"))):
        if name.endswith(".py"):
            with open(os.path.join(ROOT, "examples", name)) as f:
                m = re.match(r'"""(Demo \d+)', f.read())
            if m:
                claims.setdefault(m.group(1), []).append(name)
    assert claims and all(len(names) == 1 for names in claims.values()), claims


def test_the_demo_names_each_step_one_way(tmp_path):
    from little_workflow.demo import run_demo

    lines: list[str] = []
    report = run_demo(str(tmp_path / "demo"), say=lines.append)
    completed, called = report["completedBeforeKill"], report["calledAfterResume"]
    assert completed and called and report["recalled"] == []
    # The log's step paths and the calls the demo counts use the same names.
    assert all(name.startswith("square-") for name in completed + called), (completed, called)
    assert sorted(completed + called) == [f"square-{i}" for i in range(6)], (completed, called)
