"""A local_world on a read-only mount (a snapshot, a volume shared read-only) can be read:
`little runs`, `events`, `replay`, `verify`, `inspect`, `artifacts`, and
`lw.local_world(dir, read_only=True)` — whether the last writer closed cleanly (no WAL
left) or died with its WAL still holding committed events."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from checkout import SRC
from read_only_mount import run_on_read_only

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLOWS = textwrap.dedent('''
    import os
    import time

    import little_workflow as lw


    @lw.workflow(id="notes")
    async def notes(ctx: lw.RunContext, input: dict) -> dict:
        first = await ctx.step("write", lambda: "x" * 70_000)  # > 64 KiB: an artifact
        if input.get("hang"):
            await ctx.step("mark", lambda: open(input["hang"], "w").close())
            await ctx.step("hang", time.sleep, 600)
        return {"length": len(first)}
''')


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": SRC}


def little(*args: str, cwd: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "little_workflow.cli", *args], cwd=str(cwd),
                          capture_output=True, text=True, env=env(), timeout=120)


def little_read_only(data_dir: str, *args: str, cwd: object) -> subprocess.CompletedProcess:
    return run_on_read_only(data_dir, [sys.executable, "-m", "little_workflow.cli", *args],
                            cwd=str(cwd), capture_output=True, text=True, env=env(), timeout=120)


def check_every_reader(data_dir: str, proj: object, run_id: str, status: str) -> None:
    r = little_read_only(data_dir, "runs", "--data-dir", data_dir, cwd=proj)
    assert r.returncode == 0 and run_id in r.stdout and status in r.stdout, r.stderr
    r = little_read_only(data_dir, "events", run_id, "--json", "--data-dir", data_dir, cwd=proj)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["type"] == "run.created"
    r = little_read_only(data_dir, "replay", run_id, "--json", "--data-dir", data_dir, cwd=proj)
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == status, r.stderr
    r = little_read_only(data_dir, "verify", "--data-dir", data_dir, cwd=proj)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
    page = os.path.join(str(proj), "page.html")
    r = little_read_only(data_dir, "inspect", run_id, "--html", page, "--data-dir", data_dir,
                         cwd=proj)
    assert r.returncode == 0 and run_id in open(page).read(), r.stderr
    r = little_read_only(data_dir, "artifacts", run_id, "--data-dir", data_dir, cwd=proj)
    assert r.returncode == 0 and "write" in r.stdout, r.stderr


def test_a_cleanly_closed_local_world_is_read_on_a_read_only_mount(tmp_path):
    (tmp_path / "flows.py").write_text(FLOWS)
    data_dir = str(tmp_path / "data")
    r = little("run", "flows:notes", "--input", "{}", "--run-id", "run_ro1",
               "--data-dir", data_dir, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(os.path.join(data_dir, "events", "events.db-wal"))
    before = sorted(os.listdir(data_dir))
    check_every_reader(data_dir, tmp_path, "run_ro1", "completed")
    probe = textwrap.dedent(f'''
        import little_workflow as lw
        with lw.local_world({data_dir!r}, read_only=True) as world:
            print(world.list_runs(), lw.materialize_run_state(world, "run_ro1").output)
            try:
                world.append_event("run_ro1", "x.noted", {{}})
            except lw.StorageError as e:
                print("refused:", e)
    ''')
    r = run_on_read_only(data_dir, [sys.executable, "-c", probe], capture_output=True,
                         text=True, env=env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "['run_ro1'] {'length': 70000}"
    assert r.stdout.splitlines()[1].startswith("refused: ") and "read-only" in r.stdout
    assert sorted(os.listdir(data_dir)) == before


def test_a_writers_wal_is_read_on_a_read_only_mount(tmp_path):
    """A snapshot taken while a process was running a run: its last events are still in
    the WAL (not checkpointed into events.db), and readers must see them."""
    (tmp_path / "flows.py").write_text(FLOWS)
    data_dir = str(tmp_path / "data")
    marker = str(tmp_path / "hanging")
    proc = subprocess.Popen(
        [sys.executable, "-m", "little_workflow.cli", "run", "flows:notes", "--input",
         json.dumps({"hang": marker}), "--run-id", "run_ro2", "--data-dir", data_dir],
        cwd=tmp_path, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(marker):
            assert proc.poll() is None and time.monotonic() < deadline, "the run never got going"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)  # its WAL and shared-memory file stay behind
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    wal = os.path.join(data_dir, "events", "events.db-wal")
    assert os.path.getsize(wal) > 0
    check_every_reader(data_dir, tmp_path, "run_ro2", "running")
    r = little_read_only(data_dir, "replay", "run_ro2", "--json", "--data-dir", data_dir,
                         cwd=tmp_path)
    assert json.loads(r.stdout)["steps"]["mark"]["status"] == "succeeded"


@pytest.mark.parametrize("command", [["run", "flows:notes", "--input", "{}"], ["cancel", "run_ro3"]])
def test_writing_to_a_read_only_mount_is_one_line_naming_it(tmp_path, command):
    (tmp_path / "flows.py").write_text(FLOWS)
    data_dir = str(tmp_path / "data")
    r = little("run", "flows:notes", "--input", "{}", "--run-id", "run_ro3",
               "--data-dir", data_dir, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = little_read_only(data_dir, *command, "--data-dir", data_dir, cwd=tmp_path)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and data_dir in lines[0] and "read-only" in lines[0], r.stderr
