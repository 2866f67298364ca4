"""The run catalogue of file and object-store Worlds never lies for long (issue 27):
a process killed at any catalogue write of a change leaves nothing that the next
listing, sweep or repair does not put right; a summary only moves forward; `little
verify` names every disagreement with the logs and `--repair` mends them, also while
another process writes; gc drops summaries whose log is gone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from checkout import SRC
from conftest import ROOT, private_memory
from fsspec.implementations.local import LocalFileSystem

import little_workflow as lw
from little_workflow.runtime.state import RunLog
from little_workflow.world.verify import rebuild_catalogue

TESTS = os.path.join(ROOT, "tests")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, TESTS])}
STATUSES = ("created", "running", "waiting", "completed", "failed", "cancelled")


def add_run(world, run_id: str, status: str, *, workflow: str = "wf") -> None:
    world.append_event(run_id, "run.created", {"workflowId": workflow, "input": None})
    if status == "created":
        return
    world.append_event(run_id, "run.started", {"start": 1})
    world.append_event(run_id, "step.started", {"stepPath": "s", "attempt": 1})
    world.append_event(run_id, "step.succeeded", {"stepPath": "s", "output": 1})
    if status == "waiting":
        world.append_event(run_id, "timer.scheduled",
                           {"stepPath": "nap", "wakeAt": "2030-01-01T00:00:00.000000Z"})
    elif status == "completed":
        world.append_event(run_id, "run.completed", {"output": 1})


def log_status(world, run_id: str) -> str | None:
    events = world.list_events(run_id)
    return RunLog.fold(run_id, events).status if events else None


def listed(world, **filters) -> dict[str, str]:
    out, cursor = {}, None
    while True:
        page = lw.list_runs(world, cursor=cursor, limit=100, **filters)
        out.update({r.run_id: r.status for r in page.runs})
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


def disagreements(world) -> dict[str, list[str]]:
    report = lw.verify_world(world)
    found = {"stale": report.catalogue_stale, "missing": report.catalogue_missing,
             "ghosts": report.catalogue_ghosts, "entries": report.catalogue_wrong_entries}
    return {k: v for k, v in found.items() if v}


def assert_catalogue_tells_the_log(world, where: str) -> None:
    """What every listing shows agrees with the logs, whatever listing comes first."""
    runs = [r for r in world.list_runs() if world.list_events(r)]
    truth = {r: log_status(world, r) for r in runs}
    assert listed(world) == truth, where
    for status in STATUSES:
        assert listed(world, status=status) == {r: s for r, s in truth.items() if s == status}, \
            (where, status)
        assert listed(world, status=status, workflow_id="wf") == {
            r: s for r, s in truth.items() if s == status}, (where, status, "wf")
    assert listed(world, workflow_id="wf") == truth, where
    assert listed(world, parent_run_id="run_x") == {
        r: s for r, s in truth.items() if r == "run_new"}, where
    finished = {r for r, s in truth.items() if s in ("completed", "failed", "cancelled")}
    assert set(lw.gc(world, older_than=0, dry_run=True).run_ids) == finished, where
    assert disagreements(world) == {}, where


ACTIONS = ["create", "start", "wait", "resume", "complete", "fail", "cancel"]


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("catalogue-cuts") / "template")
    world = lw.virtual_world("file://" + path)
    add_run(world, "run_x", "running")
    add_run(world, "run_w", "waiting")
    add_run(world, "run_c", "created")
    add_run(world, "run_done", "completed")
    world.close()
    return path


@pytest.mark.parametrize("action", ACTIONS)
def test_a_kill_at_any_catalogue_write_of_a_change_is_healed_by_the_next_listing(
        template, action, tmp_path):
    """SIGKILL at each catalogue write of one change (the summary document, every index
    entry, every removal): the next listing — whichever comes first, unfiltered, by
    status, by workflow — shows every run with its log's status, gc finds every finished
    one, and afterwards `verify` finds nothing wrong."""
    out = str(tmp_path / "cuts")
    done = subprocess.run([sys.executable, os.path.join(TESTS, "catalogue_cut_child.py"),
                           template, out, action], env=ENV, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(os.path.join(out, "result.json")) as f:
        result = json.load(f)
    assert result["writes"] >= 3 and result["killed"] == list(range(1, result["writes"] + 1)), result
    for k in result["killed"]:
        world = lw.virtual_world(LocalFileSystem(skip_instance_cache=True), os.path.join(out, str(k)))
        assert_catalogue_tells_the_log(world, f"{action}: killed at catalogue write {k}")
        world.close()


def test_a_late_summary_never_overwrites_a_newer_one(tmp_path):
    """A summary waiting for its event to be durable (local disk) is written after
    another process cancelled the run and wrote the newer summary: it moves nothing back."""
    path = str(tmp_path / "wf")
    first = lw.virtual_world(LocalFileSystem(skip_instance_cache=True), path)
    add_run(first, "run_x", "running")
    first.append_event("run_x", "timer.scheduled",
                       {"stepPath": "nap", "wakeAt": "2030-01-01T00:00:00.000000Z"}, durable=False)
    other = lw.virtual_world(LocalFileSystem(skip_instance_cache=True), path)
    other.append_event("run_x", "run.cancelled", {"reason": "stop"})
    assert listed(other) == {"run_x": "cancelled"}
    first.sync()  # the late write of the waiting summary
    fresh = lw.virtual_world(LocalFileSystem(skip_instance_cache=True), path)
    assert listed(fresh) == {"run_x": "cancelled"}
    assert listed(fresh, status="waiting") == {} and listed(fresh, status="cancelled") == {
        "run_x": "cancelled"}
    assert disagreements(fresh) == {}


def test_the_sweep_settles_a_run_whose_end_lost_its_summary(tmp_path):
    """A run ended by a process killed before the end reached the catalogue: the
    worker that finds it still in `active/` settles its summary."""
    url = f"file://{tmp_path}/wf"
    world = lw.virtual_world(url)

    @lw.workflow(id="wf", version="1")  # the child defines it anew: same version
    async def wf(ctx, input):
        return await ctx.step("one", lambda: 1)

    lw.start_workflow(wf, None, world=world, run_id="run_a")
    script = f"""
import os, little_workflow as lw
w = lw.virtual_world({url!r})
pub = w.events.publisher
armed = []
def hooked(name):
    real = getattr(pub, name)
    def write(path, data=b"", *a, **k):
        if armed and "/catalogue/" in path:
            os.kill(os.getpid(), 9)  # the end is published, its summary not written
        done = real(path, data, *a, **k)
        if "/events/run_a/" in path and b'"run.completed"' in bytes(data):
            armed.append(path)
        return done
    setattr(pub, name, write)
for name in ("replace", "publish_if_absent"):
    hooked(name)
@lw.workflow(id="wf", version="1")
async def wf(ctx, input):
    return await ctx.step("one", lambda: 1)
lw.run_workflow(wf, None, world=w, run_id="run_a")
"""
    done = subprocess.run([sys.executable, "-c", script], env=ENV, capture_output=True, text=True)
    assert done.returncode == -9, done.stderr
    fresh = lw.virtual_world(LocalFileSystem(skip_instance_cache=True), f"{tmp_path}/wf")
    assert log_status(fresh, "run_a") == "completed"
    worker = lw.Worker(fresh, workflows=[wf])
    try:
        worker.run_until_idle()
    finally:
        worker.close()
    assert log_status(fresh, "run_a") == "completed"
    assert disagreements(fresh) == {}
    assert listed(fresh) == {"run_a": "completed"}


# --- verify, repair, gc -------------------------------------------------------------------

def file_world(tmp_path):
    fs = private_memory()
    world = lw.virtual_world(fs, "/wf")
    for run_id, status in [("run_a", "completed"), ("run_b", "waiting"), ("run_c", "running"),
                           ("run_d", "completed"), ("run_e", "completed")]:
        add_run(world, run_id, status)
    return fs, world


def test_verify_names_every_disagreement_and_repair_mends_them(tmp_path):
    fs, world = file_world(tmp_path)
    store = fs.store
    docs = "/wf/catalogue/runs"
    # missing: a run with a log and no summary
    del store[f"{docs}/run_a.json"]
    # stale: a summary behind its log
    doc = json.loads(store[f"{docs}/run_b.json"].getvalue())
    store[f"{docs}/run_b.json"].seek(0)
    store[f"{docs}/run_b.json"].truncate()
    store[f"{docs}/run_b.json"].write(json.dumps({**doc, "status": "running"}).encode())
    # ghost: a summary whose log is gone
    for key in [k for k in store if k.startswith("/wf/events/run_d/")]:
        del store[key]
    # wrong index entries: one missing, one under a status the run does not have
    entry = next(k for k in store if k.startswith("/wf/catalogue/by-status/running/"))
    del store[entry]
    done_entry = next(k for k in store if k.startswith("/wf/catalogue/by-status/completed/")
                      and k.endswith("_run_e"))
    store[done_entry.replace("/completed/", "/failed/")] = store[done_entry]

    found = disagreements(world)
    assert found["missing"] == ["run_a"] and found["stale"] == ["run_b"]
    assert found["ghosts"] == ["run_d"]
    assert any("run_c" in e and "running" in e for e in found["entries"]), found
    assert any("run_e" in e and "failed" in e for e in found["entries"]), found
    report = lw.verify_world(world)
    assert report.ok  # the logs are whole: the catalogue is derived from them

    rebuild_catalogue(world)
    assert disagreements(world) == {}
    assert listed(world) == {"run_a": "completed", "run_b": "waiting", "run_c": "running",
                             "run_e": "completed"}
    assert listed(world, status="failed") == {} and listed(world, status="running") == {
        "run_c": "running"}


def test_cli_verify_prints_each_kind_of_disagreement(tmp_path):
    path = str(tmp_path / "wf")
    world = lw.virtual_world("file://" + path)
    add_run(world, "run_a", "completed")
    add_run(world, "run_g", "completed")
    os.remove(os.path.join(path, "catalogue", "runs", "run_a.json"))
    shutil.rmtree(os.path.join(path, "events", "run_g"))
    little = [sys.executable, "-m", "little_workflow.cli", "verify", "--world", "file://" + path]
    out = subprocess.run(little, env=ENV, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "catalogue: 1 runs have no summary: run_a" in out.stdout, out.stdout
    assert "catalogue: 1 summaries name a run whose log is gone: run_g" in out.stdout, out.stdout
    out = subprocess.run(little + ["--json"], env=ENV, capture_output=True, text=True)
    report = json.loads(out.stdout)
    assert report["catalogueMissing"] == ["run_a"] and report["catalogueGhosts"] == ["run_g"]
    out = subprocess.run(little + ["--repair"], env=ENV, capture_output=True, text=True)
    assert out.returncode == 0 and "no summary" not in out.stdout and "gone" not in out.stdout, \
        out.stdout


def test_gc_drops_a_summary_whose_log_is_gone(memory_world):
    add_run(memory_world, "run_a", "completed")
    add_run(memory_world, "run_b", "waiting")
    memory_world.events.delete_run("run_a")  # the log gone, its summary left behind
    assert set(listed(memory_world)) == {"run_a", "run_b"}
    assert lw.gc(memory_world, older_than=0, dry_run=True).catalogue_ghosts == ["run_a"]
    assert set(listed(memory_world)) == {"run_a", "run_b"}  # a dry run changes nothing
    report = lw.gc(memory_world, older_than=0)
    assert report.catalogue_ghosts == ["run_a"] and report.run_ids == []
    assert listed(memory_world) == {"run_b": "waiting"}
    assert disagreements(memory_world) == {}


# --- repair while another process writes ---------------------------------------------------

WRITER = """
import sys, little_workflow as lw
w = lw.virtual_world(sys.argv[1])
runs, cycles = int(sys.argv[2]), int(sys.argv[3])
ids = [f"run_{i:03d}" for i in range(runs)]
for i, r in enumerate(ids):
    w.append_event(r, "run.created", {"workflowId": "wf" if i % 2 else "other", "input": None})
for r in ids:
    w.append_event(r, "run.started", {"start": 1})
for cycle in range(cycles):  # running -> waiting -> running, every run in turn
    for r in ids:
        w.append_event(r, "timer.scheduled", {"stepPath": f"nap{cycle}", "wakeAt": "2030-01-01T00:00:00Z"})
    for r in ids:
        w.append_event(r, "timer.fired", {"stepPath": f"nap{cycle}"})
for i, r in enumerate(ids):
    w.append_event(r, ["run.completed", "run.failed", "run.cancelled"][i % 3],
                   {"output": 1} if i % 3 == 0 else {"reason": "x"})
print("done", flush=True)
"""


def test_repair_while_another_process_changes_runs_loses_nothing(tmp_path):
    """The repair of `little verify --repair` racing a process that changes the status of
    a few runs again and again, and stopping the moment that process is done (no quiet
    pass after it): the catalogue agrees with every log — no status lost, none left."""
    url = f"file://{tmp_path}/wf"
    lw.virtual_world(url).close()
    writer = subprocess.Popen([sys.executable, "-c", WRITER, url, "8", "25"], env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    world = lw.virtual_world(LocalFileSystem(skip_instance_cache=True), f"{tmp_path}/wf")
    publisher = world.events.publisher
    real_replace = publisher.replace

    def slow_replace(path, *args, **kwargs):
        if "/catalogue/runs/" in path:
            time.sleep(0.02)  # the repair's fold is older by then: the race made likely
        return real_replace(path, *args, **kwargs)

    publisher.replace = slow_replace
    repairs = 0
    while writer.poll() is None:
        for run_id in world.list_runs():
            if writer.poll() is not None:
                break
            world.catalogue.rebuild([run_id], progress=lambda n: None)
            repairs += 1
    out, err = writer.communicate()
    assert writer.returncode == 0 and "done" in out, err
    fresh = lw.virtual_world(LocalFileSystem(skip_instance_cache=True), f"{tmp_path}/wf")
    assert disagreements(fresh) == {}, repairs
    truth = {r: log_status(fresh, r) for r in fresh.list_runs()}
    for status in ("completed", "failed", "cancelled", "running", "waiting"):
        assert listed(fresh, status=status) == {r: s for r, s in truth.items() if s == status}
    assert repairs > 20


ENDER = """
import sys, little_workflow as lw
w = lw.virtual_world(sys.argv[1])
for line in sys.stdin:
    run_id = line.split()[1]
    w.append_event(run_id, "run.completed" if run_id != "run_b" else "run.cancelled",
                   {"output": 1} if run_id != "run_b" else {"reason": "x"})
    print("ok", flush=True)
"""


def test_a_repair_that_folded_before_another_process_ended_the_run_moves_nothing_back(tmp_path):
    """The interleaving a live repair meets: it folds a run's log, another process ends
    the run (its event, its summary, its entries), then the repair writes what it folded.
    The ending stays: in the document, in the status index, and verify agrees."""
    url = f"file://{tmp_path}/wf"
    setup = lw.virtual_world(url)
    for run_id in ("run_a", "run_b", "run_c"):
        add_run(setup, run_id, "waiting")
    setup.close()
    ender = subprocess.Popen([sys.executable, "-c", ENDER, url], env=ENV, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    world = lw.virtual_world(LocalFileSystem(skip_instance_cache=True), f"{tmp_path}/wf")
    publisher = world.events.publisher
    real_replace = publisher.replace
    ended: set[str] = set()

    def replace_after_the_end(path, *args, **kwargs):
        run_id = path.rsplit("/", 1)[-1][:-5]
        if "/catalogue/runs/" in path and run_id not in ended:
            ended.add(run_id)
            ender.stdin.write(f"end {run_id}\n")
            ender.stdin.flush()
            assert ender.stdout.readline().strip() == "ok"
        return real_replace(path, *args, **kwargs)

    try:
        for run_id in ("run_a", "run_b", "run_c"):  # a repair that finds each one lagging
            doc = world.catalogue.read_doc(run_id)
            real_replace(world.catalogue.doc_path(run_id),
                         json.dumps({**doc, "status": "running", "waiting": None}).encode(),
                         durable=False)
        publisher.replace = replace_after_the_end
        rebuild_catalogue(world)
    finally:
        ender.stdin.close()
        ender.wait(timeout=60)
    assert ended == {"run_a", "run_b", "run_c"}
    fresh = lw.virtual_world(LocalFileSystem(skip_instance_cache=True), f"{tmp_path}/wf")
    assert disagreements(fresh) == {}
    assert listed(fresh, status="completed") == {"run_a": "completed", "run_c": "completed"}
    assert listed(fresh, status="cancelled") == {"run_b": "cancelled"}
    assert listed(fresh, status="waiting") == {}


def test_a_summary_write_that_fails_leaves_the_append_done_and_is_recorded(tmp_path, caplog):
    """The summary write after an event is published: a storage failure there leaves the
    append done and the summary lagging, logged and kept on the catalogue; any other
    exception (a bug) is not swallowed."""
    fs = private_memory()
    world = lw.virtual_world(fs, "/wf")
    add_run(world, "run_a", "running")
    publisher = world.events.publisher
    real = publisher.replace

    def failing(path, data, *args, **kwargs):
        if "/catalogue/runs/" in path and b'"pending"' not in data:  # the write after the event
            raise lw.StorageError(path, "the store refused the write")
        return real(path, data, *args, **kwargs)

    publisher.replace = failing
    with caplog.at_level("WARNING", logger="little_workflow.catalogue"):
        world.append_event("run_a", "run.completed", {"output": 1})
    assert log_status(world, "run_a") == "completed"
    assert any("run_a" in r.getMessage() and "refused" in r.getMessage()
               and "after the event" in r.getMessage() for r in caplog.records)
    assert any("refused" in str(e) for e in world.catalogue.write_errors)
    publisher.replace = real
    assert listed(world) == {"run_a": "completed"}  # healed by the next listing

    def buggy(path, *args, **kwargs):
        if "/catalogue/runs/" in path:
            raise KeyError("a bug")
        return real(path, *args, **kwargs)

    add_run(world, "run_b", "running")
    publisher.replace = buggy
    with pytest.raises(KeyError):
        world.append_event("run_b", "run.completed", {"output": 1})


def test_rebuild_on_a_world_left_by_a_cut_creation_keeps_young_entries(tmp_path):
    """An index entry naming no run yet may be a creation on its way (its entries are
    written before its first event): repair leaves young ones, and removes old ones."""
    from little_workflow.testing import FakeClock

    clock = FakeClock(start=1_800_000_000)
    fs = private_memory()
    world = lw.virtual_world(fs, "/wf", clock=clock)
    add_run(world, "run_a", "completed")
    for key in [k for k in fs.store if k.startswith("/wf/events/run_a/")]:
        del fs.store[key]
    del fs.store["/wf/catalogue/runs/run_a.json"]  # entries left: a creation cut before its event
    entries = lambda: sorted(k for k in fs.store if k.startswith("/wf/catalogue/by-"))  # noqa: E731
    left = entries()
    assert left and listed(world) == {}
    rebuild_catalogue(world)
    assert entries() == left and disagreements(world) == {}
    clock.advance(2 * 3600)
    assert disagreements(world)["entries"]
    rebuild_catalogue(world)
    assert entries() == [] and disagreements(world) == {}


def test_repair_is_quiet_on_a_healthy_world(tmp_path):
    """A rebuild of a catalogue that agrees with the logs writes nothing."""
    fs, world = file_world(tmp_path)
    before = {k: bytes(v.getvalue()) for k, v in fs.store.items()}
    time.sleep(0.01)
    rebuild_catalogue(world)
    after = {k: bytes(v.getvalue()) for k, v in fs.store.items()}
    assert after == before
