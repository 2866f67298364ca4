"""Storage faults reach the user as one typed error naming the file: a disk that fills up,
a read-only data dir, an events.db that is not (or no longer) a SQLite database. The CLI
prints one line for each; one damaged run does not break `little runs` for the others."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest
from checkout import SRC

import little_workflow as lw
from little_workflow.testing import FaultPlan, faulty_local_world

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A child that runs `tests.test_storage_faults:faults_wf` imports this module, which
# imports tests/checkout.py by its own name.
CHILD_PYTHONPATH = os.pathsep.join([SRC, os.path.join(ROOT, "tests")])
CALLS: list[str] = []


def double(x: int) -> int:
    CALLS.append(f"double{x}")
    return 2 * x


def big(n: int) -> str:
    CALLS.append("big")
    return "y" * n


@lw.workflow(id="faults")
async def faults_wf(ctx: lw.RunContext, input: dict) -> dict:
    a = await ctx.step("a", double, input["x"])
    b = await ctx.step("b", double, a)
    text = await ctx.step("big", big, 70_000)  # an artifact, not an inline output
    return {"b": b, "big": len(text)}


EXPECTED = {"b": 4, "big": 70_000}


def little(*args: str, cwd: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": CHILD_PYTHONPATH}
    return subprocess.run([sys.executable, "-m", "little_workflow.cli", *args], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=120)


def one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    assert r.returncode != 0, r.stdout
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def committed_steps(world) -> set[str]:
    return {e.payload["stepPath"] for run_id in world.list_runs()
            for e in world.list_events(run_id) if e.type == "step.succeeded"}


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_a_write_failing_anywhere_is_one_storage_error_and_the_run_resumes(tmp_path, code):
    plan = FaultPlan()
    assert lw.run_workflow(faults_wf, {"x": 1}, world=faulty_local_world(
        str(tmp_path / "count"), plan), run_id="run_f").output == EXPECTED
    total = plan.count
    failed_at = 0
    for k in range(1, total + 1):
        data_dir = str(tmp_path / f"d{k}")
        plan = FaultPlan(crash_at=k, error=code)
        try:
            out = lw.run_workflow(faults_wf, {"x": 1}, world=faulty_local_world(data_dir, plan),
                                  run_id="run_f").output
        except lw.StorageError as e:
            failed_at += 1
            assert e.path.startswith(data_dir), e.path  # names the file
            assert os.strerror(code) in str(e)
            assert not isinstance(e, lw.WorkflowFailedError)
            # Typed where it is made, at every fault point: isinstance, not the message.
            assert isinstance(e, {errno.ENOSPC: lw.StorageFullError,
                                  errno.EROFS: lw.StorageReadOnlyError}[code]), repr(e)
        else:  # the writes from k on were all reads' neighbours: nothing failed
            assert plan.failed == 0 and out == EXPECTED
            continue
        fresh = lw.local_world(data_dir)
        assert lw.verify_world(fresh).ok, (k, lw.verify_world(fresh).problems)
        # Nothing half-written: the run is not marked failed, and it resumes on the
        # same data dir once there is space, without re-running a committed step.
        if "run_f" in fresh.list_runs():
            assert lw.materialize_run_state(fresh, "run_f").status != "failed"
        done = committed_steps(fresh)
        CALLS.clear()
        assert lw.run_workflow(faults_wf, {"x": 1}, world=fresh, run_id="run_f").output == EXPECTED
        step_of = {"double1": "a", "double2": "b", "big": "big"}
        rerun = {step_of[c] for c in CALLS} & done
        assert not rerun, (k, done, CALLS)
        assert lw.verify_world(fresh).ok
    print(f"\n{os.strerror(code)}: {total} fault points (disk fails from operation k on), {failed_at} raised StorageError,"
          f" all resumed")
    assert failed_at > 0


def test_garbage_events_db_is_a_storage_error_naming_it(tmp_path):
    data_dir = tmp_path / "d"
    (data_dir / "events").mkdir(parents=True)
    db = data_dir / "events" / "events.db"
    db.write_bytes(b"this is not a database, just bytes " * 200)
    with pytest.raises(lw.StorageError) as info:
        lw.local_world(str(data_dir))
    assert info.value.path == str(db) and "not a database" in str(info.value)
    one_line_error(little("--data-dir", str(data_dir), "runs", cwd=str(tmp_path)),
                   str(db), "not a database")
    one_line_error(little("--data-dir", str(data_dir), "verify", cwd=str(tmp_path)), str(db))


def test_damaged_pages_in_events_db_are_a_storage_error_on_use(tmp_path):
    data_dir = str(tmp_path / "d")
    world = lw.local_world(data_dir)
    for i in range(300):
        world.append_event(f"run_{i % 3}", "x", {"i": i, "pad": "p" * 500})
    world.events.close()
    db = os.path.join(data_dir, "events", "events.db")
    with open(db, "r+b") as f:  # keep the header page, smash the b-tree pages after it
        f.seek(4096)
        f.write(os.urandom(os.path.getsize(db) - 4096))
    with pytest.raises(lw.StorageError) as info:
        w = lw.local_world(data_dir)
        for run_id in w.list_runs():
            w.list_events(run_id)
    assert info.value.path == db and "malformed" in str(info.value)
    one_line_error(little("--data-dir", data_dir, "runs", cwd=str(tmp_path)), db)


READ_ONLY_CHILD = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, os.getcwd())
    # Everything is imported as root first: this Python lives under /root.
    import encodings.idna, rich.console, rich.table, rich.status
    import fsspec.implementations.local, tests.test_storage_faults
    from little_workflow.cli import main
    os.setgid(65534)
    os.setuid(65534)
    main(sys.argv[1:])
""")


def run_as_nobody(*args: str, cwd: str) -> subprocess.CompletedProcess:
    """The CLI in a process without root's power to ignore file permissions."""
    env = {**os.environ, "PYTHONPATH": CHILD_PYTHONPATH}
    if os.geteuid() != 0:
        return little(*args, cwd=cwd)
    return subprocess.run([sys.executable, "-c", READ_ONLY_CHILD, *args], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=120)


def test_read_only_data_dir_is_one_line_naming_the_file(tmp_path):
    base = tempfile.mkdtemp(prefix="lw-readonly-")  # /tmp/pytest-of-root is 0700
    try:
        os.chmod(base, 0o755)
        existing = os.path.join(base, "existing")
        world = lw.local_world(existing)
        world.append_event("run_ro", "x", {})
        world.events.close()
        for path, dirs, files in os.walk(existing):
            for name in dirs:
                os.chmod(os.path.join(path, name), 0o555)
            for name in files:
                os.chmod(os.path.join(path, name), 0o444)
        os.chmod(existing, 0o555)
        db = os.path.join(existing, "events", "events.db")
        r = run_as_nobody("--data-dir", existing, "run", "tests.test_storage_faults:faults_wf",
                          "--input", '{"x": 1}', cwd=ROOT)
        line = one_line_error(r, existing)
        assert db in line or os.path.join(existing, "events") in line, line
        # A data dir that cannot even be created names the directory it needed (`run`
        # creates one; read-only commands such as `runs` never do).
        os.chmod(base, 0o555)
        fresh = os.path.join(base, "fresh")
        line = one_line_error(run_as_nobody("--data-dir", fresh, "run", "tests.test_storage_faults:faults_wf",
                                            "--input", '{"x": 1}', cwd=ROOT), fresh)
        assert "Permission denied" in line
    finally:
        for path, _dirs, _ in os.walk(base):
            os.chmod(path, 0o755)
        import shutil

        shutil.rmtree(base)


def test_one_corrupt_run_still_lists_and_verify_names_the_damage(tmp_path):
    """`little runs` reads the run catalogue a page at a time (DESIGN §14), never every
    log: a run whose event file is damaged later is listed as the catalogue knows it,
    the others list as usual, and `little verify` names the damaged event."""
    url = "file://" + str(tmp_path / "vw")
    world = lw.virtual_world(url)
    lw.run_workflow(faults_wf, {"x": 1}, world=world, run_id="run_good")
    lw.run_workflow(faults_wf, {"x": 1}, world=world, run_id="run_bad")
    bad = tmp_path / "vw" / "events" / "run_bad" / "0000000002.json"
    bad.write_bytes(b'{"not json')
    r = little("--world", url, "runs", "--json", cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    rows = {row["runId"]: row for row in json.loads(r.stdout)}
    assert rows["run_good"]["status"] == "completed" and "run_bad" in rows
    r = little("--world", url, "runs", cwd=str(tmp_path))
    assert r.returncode == 0 and "Traceback" not in r.stderr and "run_good" in r.stdout
    r = little("--world", url, "verify", cwd=str(tmp_path))
    assert r.returncode == 1 and "run_bad: event 2" in r.stdout, r.stdout


# ---- little verify: gaps, orphan artifacts, manifests of runs with no log -------------

@contextlib.contextmanager
def _sqlite(world):
    """A second connection to events.db (as another process would be), closed after."""
    import sqlite3

    conn = sqlite3.connect(os.path.join(world.data_dir, "events", "events.db"))
    try:
        with conn:
            yield conn
    finally:
        conn.close()


def test_verify_reports_a_gap_in_local_world(tmp_path):
    world = lw.local_world(str(tmp_path / "d"))
    lw.run_workflow(faults_wf, {"x": 1}, world=world, run_id="run_gap")
    assert lw.verify_world(world).ok
    with _sqlite(world) as conn:
        conn.execute("DELETE FROM events WHERE run_id = 'run_gap' AND sequence = 3")
    report = lw.verify_world(lw.local_world(world.data_dir))
    assert not report.ok
    assert any("missing [3]" in p for p in report.problems["run_gap"]), report.problems


def test_verify_reports_orphan_artifacts_and_a_wiped_events_db(tmp_path):
    data_dir = str(tmp_path / "d")
    world = lw.local_world(data_dir)
    lw.run_workflow(faults_wf, {"x": 1}, world=world, run_id="run_kept")
    lw.run_workflow(faults_wf, {"x": 2}, world=world, run_id="run_lost")
    with _sqlite(world) as conn:
        conn.execute("DELETE FROM events WHERE run_id = 'run_lost'")
    report = lw.verify_world(world)
    assert not report.ok
    orphans = [p for p in report.problems["artifacts"] if "orphan artifact" in p]
    assert len(orphans) == 1 and "run run_lost has no event log" in orphans[0]
    # Wiped: every row gone (and, below, the file emptied), the artifacts still there.
    with _sqlite(world) as conn:
        conn.execute("DELETE FROM events")
    report = lw.verify_world(world)
    assert not report.ok and report.runs_checked == 0
    assert len(report.problems["artifacts"]) == 2
    world.events.close()
    # Emptied file: a 0-byte events.db is damage, not an empty World (issue 32).
    open(os.path.join(data_dir, "events", "events.db"), "wb").close()
    r = little("--data-dir", data_dir, "verify", cwd=str(tmp_path))
    assert r.returncode == 1 and "0 bytes" in r.stdout and "ok\n" not in r.stdout, r.stdout


def supervise_done(cycle, history):
    return lw.Done(cycle["output"])


def test_verify_reports_an_outer_loop_manifest_naming_a_run_with_no_log(tmp_path):
    world = lw.local_world(str(tmp_path / "d"))
    out = lw.run_workflow(faults_wf, {"x": 1}, world=world, max_outer_cycles=2,
                          supervise=supervise_done, outer_loop_id="loop1")
    assert out.output == EXPECTED and lw.verify_world(world).ok
    manifest = world.read_document("outer-loops/loop1.json")
    cycle_run = manifest["cycles"][0]["runId"]
    with _sqlite(world) as conn:
        conn.execute("DELETE FROM events WHERE run_id = ?", (cycle_run,))
    report = lw.verify_world(world)
    assert any(f"names run {cycle_run}, which has no event log" in p
               for p in report.problems["outer-loops/loop1.json"]), report.problems
