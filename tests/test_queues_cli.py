"""`little queues`, `little enqueue`, and a queued run's queue, key and priority on its
`little ui` page (DESIGN §17)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from checkout import SRC

import little_workflow as lw
from little_workflow.ops.inspect import run_page_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLOWS = '''
import little_workflow as lw


@lw.workflow(id="cli-add")
async def add(ctx, input):
    return await ctx.step("add", lambda: input["n"] + 1)
'''


def little(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{cwd}", "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "little_workflow.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def project(tmp_path):
    (tmp_path / "qflows.py").write_text(FLOWS)
    data_dir = str(tmp_path / ".little-workflow")
    world = lw.local_world(data_dir)
    lw.declare_queue(world, "llm", concurrency=2, per_key_concurrency=1,
                     rate_limit=lw.RateLimit(limit=50, period=60))
    world.close()
    return data_dir


def test_enqueue_prints_the_run_id_and_queues_shows_depth_then_running_and_rate(tmp_path):
    data_dir = project(tmp_path)
    out = little("enqueue", "qflows:add", "--input", '{"n": 41}', "--queue", "llm",
                 "--key", "user-1", "--priority", "3", "--data-dir", data_dir, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    run_id = out.stdout.strip()
    assert run_id.startswith("run_")
    again = little("enqueue", "qflows:add", "--input", '{"n": 1}', "--queue", "llm",
                   "--dedup-id", "d1", "--data-dir", data_dir, cwd=tmp_path)
    dup = little("enqueue", "qflows:add", "--input", '{"n": 2}', "--queue", "llm",
                 "--dedup-id", "d1", "--data-dir", data_dir, cwd=tmp_path)
    assert dup.stdout.strip() == again.stdout.strip()  # dedup: the same run

    table = little("queues", "--data-dir", data_dir, cwd=tmp_path)
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split() == ["QUEUE", "CONCURRENCY", "PER", "KEY", "RATE", "LIMIT", "DEPTH",
                              "RUNNING", "STARTS/MIN"]
    assert row.split() == ["llm", "2", "1", "50/60s", "2", "0", "0"]

    world = lw.local_world(data_dir)
    queued = run_page_data(world, run_id)  # what `little ui`'s run page draws
    assert queued["queue"] == {"name": "llm", "key": "user-1", "priority": 3, "order": 1}
    assert queued["status"] == "created"
    world.close()

    worker = little("worker", "qflows", "--until-idle", "--data-dir", data_dir, cwd=tmp_path)
    assert worker.returncode == 0, worker.stderr
    (doc,) = [json.loads(line) for line in
              little("queues", "--json", "--data-dir", data_dir, cwd=tmp_path).stdout.splitlines()]
    assert doc["name"] == "llm" and doc["depth"] == 0 and doc["running"] == 0
    assert doc["recent_rate"] > 0
    assert doc["rate_limit"] == {"limit": 50, "period": 60.0}
    world = lw.local_world(data_dir)
    assert lw.get_run(world, run_id).result(timeout=10) == 42
    world.close()


def test_enqueue_mistakes_are_one_line_and_a_non_zero_exit(tmp_path):
    data_dir = project(tmp_path)
    cases = [
        (["--queue", "nope"], "queue 'nope' is not declared"),
        (["--queue", "llm", "--input", "{bad"], "--input is not valid JSON"),
        (["--queue", "llm", "--input", '{"n": 1}', "--run-id", "bad id"], "bad id"),
    ]
    for args, message in cases:
        out = little("enqueue", "qflows:add", *args, "--data-dir", data_dir, cwd=tmp_path)
        assert out.returncode != 0
        assert "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr, out.stderr
    table = little("queues", "--json", "--data-dir", data_dir, cwd=tmp_path)
    assert json.loads(table.stdout)["depth"] == 0  # nothing was enqueued by a mistake


def test_queues_with_none_declared_says_so(tmp_path):
    lw.local_world(str(tmp_path / "w")).close()
    out = little("queues", "--data-dir", str(tmp_path / "w"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "no queues" in out.stdout


def test_start_with_a_queue_enqueues_and_wait_gives_the_result(tmp_path):
    data_dir = project(tmp_path)
    worker = subprocess.Popen(
        [sys.executable, "-m", "little_workflow.cli", "worker", "qflows", "--data-dir", data_dir],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{tmp_path}"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        out = little("start", "qflows:add", "--input", '{"n": 1}', "--queue", "llm", "--wait",
                     "--json", "--data-dir", data_dir, cwd=tmp_path)
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["output"] == 2
    world = lw.local_world(data_dir)
    created = world.list_events(doc["runId"])[0].payload
    assert created["queue"]["name"] == "llm"
    world.close()
