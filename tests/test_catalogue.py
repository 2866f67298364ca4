"""The run catalogue (DESIGN §14): `lw.list_runs` on every World, kept by appends, the
log staying the truth through crashes, built for Worlds written before it existed."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest
from checkout import SRC
from conftest import private_memory

import little_workflow as lw
from little_workflow.runtime.state import RunLog
from little_workflow.testing import FaultPlan, FaultyFileSystem, SimulatedCrash
from little_workflow.world.posix import Posix

T0 = 1_800_000_000.0


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(T0 + seconds, timezone.utc)


def add_run(world, run_id: str, status: str, *, workflow: str = "wf", parent: str | None = None,
            steps: int = 1) -> None:
    """A run whose log ends in `status`, written through the World's own appends."""
    created = {"workflowId": workflow, "input": None}
    if parent:
        created["parentRunId"] = parent
    world.append_event(run_id, "run.created", created)
    if status == "created":
        return
    world.append_event(run_id, "run.started", {"start": 1}, durable=False)
    for i in range(steps):
        world.append_event(run_id, "step.started", {"stepPath": f"s{i}", "attempt": 1}, durable=False)
        world.append_event(run_id, "step.succeeded", {"stepPath": f"s{i}", "output": i})
    if status == "waiting":
        world.append_event(run_id, "timer.scheduled", {"stepPath": "nap", "wakeAt": "2030-01-01T00:00:00.000000Z"})
    elif status == "completed":
        world.append_event(run_id, "run.completed", {"output": 1})
    elif status == "failed":
        world.append_event(run_id, "run.failed", {"error": {"type": "ValueError", "message": "boom"}})
    elif status == "cancelled":
        world.append_event(run_id, "run.cancelled", {"reason": "stop"})


def ids(page) -> list[str]:
    return [r.run_id for r in page.runs]


def every_page(world, **filters) -> list[str]:
    out, cursor = [], None
    while True:
        page = lw.list_runs(world, cursor=cursor, **filters)
        out += ids(page)
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


class SetClock:
    """A clock a test may also move backwards (a run created "earlier" than the last)."""

    def __init__(self, start: float):
        self.t = start

    def now(self) -> float:
        return self.t

    def set(self, when: float) -> None:
        self.t = when

    async def sleep_until(self, when: float) -> None:
        raise AssertionError("not used")


@pytest.fixture
def clocked(make_world):
    clock = SetClock(T0)
    return make_world(clock=clock), clock


def test_newest_first_pages_filters_and_fields(clocked):
    world, clock = clocked
    plan = [("run_a", "completed", "wf"), ("run_b", "failed", "wf"), ("run_c", "running", "other"),
            ("run_d", "waiting", "wf"), ("run_e", "cancelled", "other"), ("run_f", "created", "wf")]
    for i, (run_id, status, workflow) in enumerate(plan):
        clock.set(T0 + 10 * i)
        add_run(world, run_id, status, workflow=workflow, steps=2)
    clock.set(T0 + 10 * 2)  # a tie on created_at with run_c: ordered by run id
    add_run(world, "run_c2", "completed", parent="run_a")

    assert every_page(world, limit=2) == ["run_f", "run_e", "run_d", "run_c", "run_c2", "run_b", "run_a"]
    first = lw.list_runs(world, limit=50)
    assert first.next_cursor is None and len(first.runs) == 7
    by_id = {r.run_id: r for r in first.runs}
    for run_id, status, workflow in plan:
        assert (by_id[run_id].status, by_id[run_id].workflow_id) == (status, workflow)
    d = by_id["run_d"]
    assert d.created_at == at(30) and d.created_at.tzinfo is not None
    assert d.steps == 2 and d.waiting == {"kind": "sleep", "stepPath": "nap",
                                           "wakeAt": "2030-01-01T00:00:00.000000Z"}
    assert by_id["run_b"].error == {"type": "ValueError", "message": "boom"}
    assert by_id["run_f"].steps == 0 and by_id["run_c2"].parent_run_id == "run_a"
    assert by_id["run_a"].updated_at >= by_id["run_a"].created_at

    assert ids(lw.list_runs(world, status="failed")) == ["run_b"]
    assert every_page(world, status=["completed", "cancelled"], limit=1) == ["run_e", "run_c2", "run_a"]
    assert ids(lw.list_runs(world, workflow_id="other")) == ["run_e", "run_c"]
    assert ids(lw.list_runs(world, workflow_id="wf", status="completed")) == ["run_c2", "run_a"]
    assert ids(lw.list_runs(world, parent_run_id="run_a")) == ["run_c2"]
    assert ids(lw.list_runs(world, created_after=at(20), created_before=at(40))) == ["run_d", "run_c", "run_c2"]
    assert every_page(world, created_after=at(20), status="completed", limit=1) == ["run_c2"]
    assert ids(lw.list_runs(world, status="running", workflow_id="wf")) == []


def test_a_page_sees_runs_created_since_and_never_repeats_one(clocked):
    world, clock = clocked
    for i in range(5):
        clock.set(T0 + i)
        add_run(world, f"run_{i}", "completed")
    page = lw.list_runs(world, limit=2)
    assert ids(page) == ["run_4", "run_3"]
    clock.set(T0 + 100)
    add_run(world, "run_new", "completed")  # newer than the cursor: the next listing's
    clock.set(T0 + 2)
    add_run(world, "run_2b", "completed")  # a tie with run_2, after the cursor
    cursor, seen = page.next_cursor, ids(page)
    while cursor:
        page = lw.list_runs(world, limit=2, cursor=cursor)
        seen += ids(page)
        cursor = page.next_cursor
    assert seen == ["run_4", "run_3", "run_2", "run_2b", "run_1", "run_0"]
    assert ids(lw.list_runs(world, limit=1)) == ["run_new"]


def test_status_follows_the_log_and_summaries_agree_with_it(make_world):
    world = make_world()
    clock_world = world

    @lw.workflow(id="napper")
    async def napper(ctx, input):
        await ctx.step("one", lambda: 1)
        if input == "fail":
            raise ValueError("no")
        if input == "nap":
            await ctx.sleep("nap", 3600)
        return 1

    lw.run_workflow(napper, "ok", world=world, run_id="run_ok")
    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(napper, "fail", world=world, run_id="run_bad")
    result = lw.run_workflow(napper, "nap", world=world, run_id="run_nap", suspend=True)
    assert result.status == "waiting"
    lw.start_workflow(napper, "ok", world=world, run_id="run_new")
    lw.cancel_run(world, "run_new")
    statuses = {r.run_id: r.status for r in lw.list_runs(clock_world).runs}
    assert statuses == {"run_ok": "completed", "run_bad": "failed", "run_nap": "waiting",
                        "run_new": "cancelled"}
    assert_agrees_with_logs(world)


def assert_agrees_with_logs(world) -> None:
    listed = {r.run_id: r for r in all_summaries(world)}
    assert sorted(listed) == sorted(world.list_runs())
    for run_id, summary in listed.items():
        state = lw.materialize_run_state(world, run_id)
        assert (summary.status, summary.steps, summary.waiting) == (
            state.status, len(state.steps), state.waiting), run_id


def all_summaries(world):
    out, cursor = [], None
    while True:
        page = lw.list_runs(world, limit=1000, cursor=cursor)
        out += page.runs
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


@pytest.mark.parametrize("kwargs, argument", [
    ({"status": "done"}, "status"), ({"status": ["failed", "nope"]}, "status"),
    ({"status": []}, "status"), ({"limit": 0}, "limit"), ({"limit": "5"}, "limit"),
    ({"cursor": "not-a-cursor"}, "cursor"), ({"cursor": "WzEsMiwiMyJd"}, "cursor"),
    ({"created_after": datetime(2026, 1, 1)}, "created_after"),
    ({"created_before": "2026-01-01"}, "created_before"), ({"workflow_id": 3}, "workflow_id"),
])
def test_bad_arguments_are_typed_errors(memory_world, kwargs, argument):
    with pytest.raises(lw.CatalogueQueryError, match=f"list_runs {argument}") as e:
        lw.list_runs(memory_world, **kwargs)
    assert e.value.argument == argument and isinstance(e.value, ValueError)


def test_gc_removes_summaries_and_finds_candidates_oldest_first(tmp_path):
    clock = SetClock(T0)
    world = lw.local_world(str(tmp_path / "d"), clock=clock)
    for i in range(6):
        clock.set(T0 + i * 86400)
        add_run(world, f"run_{i}", "completed" if i != 4 else "running")
    clock.set(T0 + 10 * 86400)
    report = lw.gc(world, older_than=timedelta(days=7), dry_run=True)
    assert report.run_ids == ["run_0", "run_1", "run_2", "run_3"]
    lw.gc(world, older_than=timedelta(days=7))
    assert ids(lw.list_runs(world)) == ["run_5", "run_4"]
    add_run(world, "run_0", "failed")  # a reused id is a new run
    assert {r.run_id: r.status for r in lw.list_runs(world).runs}["run_0"] == "failed"


# --- the log stays the truth ---------------------------------------------------------------

def statuses_in_log(world, run_id: str) -> set[str]:
    """Every status the run's log has passed through."""
    log = RunLog(run_id=run_id)
    seen = set()
    for e in world.list_events(run_id):
        log.apply(e)
        seen.add(log.status)
    return seen


@lw.workflow(id="crashy")
async def crashy(ctx, input):
    await ctx.step("a", lambda: 1)
    await ctx.step("b", lambda: 2)
    if input.get("fail"):
        raise ValueError("boom")
    return 3


def run_both(world) -> None:
    lw.run_workflow(crashy, {}, world=world, run_id="run_ok")
    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(crashy, {"fail": True}, world=world, run_id="run_bad")


@pytest.mark.parametrize("kind", ["virtual", "local_world"])
def test_crash_at_every_operation_never_shows_a_status_the_log_lacks(kind, tmp_path):
    from little_workflow.testing import faulty_local_world

    places: list = []

    def faulty(plan):
        if kind == "virtual":
            places.append(private_memory())
            return lw.virtual_world(FaultyFileSystem(places[-1], plan), "/wf")
        places.append(str(tmp_path / f"d{len(places)}"))
        return faulty_local_world(places[-1], plan)

    def fresh_world():
        if kind == "virtual":
            return lw.virtual_world(places[-1], "/wf")
        return lw.local_world(places[-1])

    plan = FaultPlan(crash_at=None)
    run_both(faulty(plan))
    total = plan.count
    assert total > 10
    for index in range(1, total + 1):
        plan = FaultPlan(crash_at=index, partial=index % 2 == 0)
        with pytest.raises(SimulatedCrash):
            run_both(faulty(plan))
        fresh = fresh_world()
        for summary in all_summaries(fresh):
            assert summary.status in statuses_in_log(fresh, summary.run_id), (index, summary)
        lw.run_workflow(crashy, {}, world=fresh, run_id="run_ok")
        with pytest.raises(lw.WorkflowFailedError):
            lw.run_workflow(crashy, {"fail": True}, world=fresh, run_id="run_bad")
        for summary in all_summaries(fresh):
            assert summary.status in statuses_in_log(fresh, summary.run_id), (index, summary)
        # A run that ended before the crash gets no further append: a rebuild (what
        # `little verify --repair` runs) folds its log.
        fresh.catalogue.rebuild()
        assert_agrees_with_logs(fresh)
        fresh.close()


def test_a_summary_left_behind_by_a_crash_is_caught_up_by_the_next_append(tmp_path):
    """A process killed (SIGKILL) right after an event, before its summary: the next
    status change of that run, or a rebuild, folds what the log has."""
    world = lw.virtual_world(f"file://{tmp_path}/wf")
    add_run(world, "run_x", "running")
    script = f"""
import os, little_workflow as lw
w = lw.virtual_world("file://{tmp_path}/wf")
w.events.catalogue.note = lambda *a, **k: os.kill(os.getpid(), 9)
w.append_event("run_x", "timer.scheduled", {{"stepPath": "nap", "wakeAt": "2030-01-01T00:00:00Z"}})
"""
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": SRC})
    assert done.returncode == -9
    fresh = lw.virtual_world(f"file://{tmp_path}/wf")
    assert fresh.catalogue.summary("run_x")["status"] == "running"  # lags, never ahead
    fresh.append_event("run_x", "run.failed", {"error": {"type": "X", "message": "y"}})
    assert [(r.status, r.steps) for r in lw.list_runs(fresh).runs] == [("failed", 1)]


# --- Worlds written before the catalogue, and repair ---------------------------------------

def test_a_local_world_from_before_the_catalogue_gets_one_on_open(tmp_path):
    d = str(tmp_path / "d")
    with lw.local_world(d) as world:
        add_run(world, "run_a", "completed")
        add_run(world, "run_b", "failed")
    db = sqlite3.connect(os.path.join(d, "events", "events.db"))
    db.execute("DROP TABLE runs")
    db.execute("DROP TABLE catalogue_meta")
    db.commit()
    db.close()
    with lw.local_world(d) as world:
        assert {r.run_id: r.status for r in lw.list_runs(world).runs} == {
            "run_a": "completed", "run_b": "failed"}


def test_a_file_world_from_before_the_catalogue_gets_one_on_open(tmp_path):
    fs = private_memory()
    world = lw.virtual_world(fs, "/wf")
    add_run(world, "run_a", "completed")
    add_run(world, "run_b", "waiting")
    for key in [k for k in fs.store if k.startswith("/wf/catalogue/")]:
        del fs.store[key]
    assert lw.list_runs(world).runs == []  # the old World's view: no catalogue
    reopened = lw.virtual_world(fs, "/wf")
    assert {r.run_id: r.status for r in lw.list_runs(reopened).runs} == {
        "run_a": "completed", "run_b": "waiting"}


def test_cli_verify_repair_rebuilds_a_damaged_catalogue(tmp_path):
    d = str(tmp_path / "d")
    with lw.local_world(d) as world:
        add_run(world, "run_a", "completed")
    db = sqlite3.connect(os.path.join(d, "events", "events.db"))
    db.execute("UPDATE runs SET status = 'running', doc = json_set(doc, '$.status', 'running')")
    db.commit()
    db.close()
    little = [sys.executable, "-m", "little_workflow.cli", "--data-dir", d]
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run([*little, "verify"], env=env, capture_output=True, text=True)
    # A lagging summary is not damage (the log is the truth): reported, exit 0.
    assert out.returncode == 0 and "catalogue: 1 run summaries lag" in out.stdout
    out = subprocess.run([*little, "verify", "--repair"], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and "rebuilt" in out.stdout and "lag" not in out.stdout, out.stdout
    with lw.local_world(d) as world:
        assert [r.status for r in lw.list_runs(world).runs] == ["completed"]


# --- the CLI ---------------------------------------------------------------------------------

def test_cli_runs_pages_and_filters(tmp_path):
    d = str(tmp_path / "d")
    clock = SetClock(T0)
    with lw.local_world(d, clock=clock) as world:
        for i in range(5):
            clock.set(T0 + i)
            add_run(world, f"run_{i}", "failed" if i % 2 else "completed",
                    workflow="even" if i % 2 == 0 else "odd")
    little = [sys.executable, "-m", "little_workflow.cli", "runs", "--data-dir", d]
    env = {**os.environ, "PYTHONPATH": SRC}

    def rows(*args: str) -> list[str]:
        out = subprocess.run([*little, "--json", *args], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return [r["runId"] for r in json.loads(out.stdout)]

    assert rows() == ["run_4", "run_3", "run_2", "run_1", "run_0"]
    assert rows("--limit", "2") == ["run_4", "run_3"]
    assert rows("--limit", "2", "--all") == ["run_4", "run_3", "run_2", "run_1", "run_0"]
    assert rows("--status", "failed") == ["run_3", "run_1"]
    assert rows("--workflow", "even", "--status", "completed") == ["run_4", "run_2", "run_0"]
    assert rows("--since", "1000000d") == ["run_4", "run_3", "run_2", "run_1", "run_0"]
    text = subprocess.run([*little, "--limit", "2"], env=env, capture_output=True, text=True)
    assert "run_4" in text.stdout and "run_2" not in text.stdout and "--all" in text.stdout
    bad = subprocess.run([*little, "--status", "nope"], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "nope" in bad.stderr and "Traceback" not in bad.stderr


def test_ui_lists_a_page_at_a_time_with_filters_and_a_next_page(tmp_path):
    import threading
    import urllib.request

    from little_workflow.ops.ui import make_server

    clock = SetClock(T0)
    world = lw.local_world(str(tmp_path / "d"), clock=clock)
    for i in range(5):
        clock.set(T0 + i)
        add_run(world, f"run_{i}", "failed" if i % 2 else "completed")
    server = make_server(world, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"

    def get(path: str) -> dict:
        with urllib.request.urlopen(base + path, timeout=10) as resp:
            return json.loads(resp.read())["data"]

    try:
        first = get("/api/runs?limit=2")
        assert [r["runId"] for r in first["runs"]] == ["run_4", "run_3"]
        second = get("/api/runs" + first["nextPage"][1:])
        assert [r["runId"] for r in second["runs"]] == ["run_2", "run_1"]
        failed = get("/api/runs?status=failed")
        assert [r["runId"] for r in failed["runs"]] == ["run_3", "run_1"] and failed["nextPage"] is None
        with urllib.request.urlopen(base + "/?limit=2", timeout=10) as resp:
            assert "nextPage" in resp.read().decode()
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + "/api/runs?status=nope", timeout=10)
        assert err.value.code == 400
    finally:
        server.shutdown()
        server.server_close()


def test_importing_the_package_and_listing_runs_load_only_what_they_need(tmp_path):
    """P12: `import little_workflow` and `little runs` import neither pydantic,
    jsonschema, rich nor the testing helpers (they cost most of a short command)."""
    heavy = ("pydantic", "jsonschema", "rich", "little_workflow.testing", "little_workflow.runtime")
    script = ("import sys, little_workflow\n"
              f"print([m for m in {heavy!r} if m in sys.modules])\n")
    out = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": SRC},
                         capture_output=True, text=True, cwd=str(tmp_path))
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
    with lw.local_world(str(tmp_path / "d")) as world:
        add_run(world, "run_a", "completed")
    script = ("import sys\nfrom little_workflow.cli import main\n"
              f"try:\n    main(['runs', '--data-dir', {str(tmp_path / 'd')!r}])\nexcept SystemExit:\n    pass\n"
              f"print([m for m in {heavy!r} if m in sys.modules], file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": SRC},
                         capture_output=True, text=True, cwd=str(tmp_path))
    assert "run_a" in out.stdout and out.stderr.strip().splitlines()[-1] == "[]", out.stdout + out.stderr


def test_power_cut_after_every_operation_never_leaves_a_summary_ahead_of_its_log(tmp_path):
    """local disk (virtual_world over LocalFileSystem, the power-cut model): whatever
    survives a cut, no summary shows a status its surviving log does not have."""
    from fsspec.implementations.local import LocalFileSystem

    from little_workflow.testing import PowerCutPosix, power_cut_filesystem

    counter = PowerCutPosix(None)
    run_both(lw.virtual_world(power_cut_filesystem(counter), str(tmp_path / "count")))
    total = counter.count
    assert total > 20
    for n in range(1, total + 1):
        cut_dir, resume_dir = str(tmp_path / f"cut-{n}"), str(tmp_path / f"resume-{n}")
        os.makedirs(cut_dir)
        posix = PowerCutPosix(n, torn=n % 2 == 0)
        try:
            run_both(lw.virtual_world(power_cut_filesystem(posix), cut_dir))
        except SimulatedCrash:
            pass
        os.rename(cut_dir, resume_dir)
        fresh = lw.virtual_world(LocalFileSystem(skip_instance_cache=True), resume_dir)
        for summary in all_summaries(fresh):
            assert summary.status in statuses_in_log(fresh, summary.run_id), (n, summary)
        fresh.close()


def test_sub_runs_of_a_pipeline_name_their_parent(memory_world):
    @lw.workflow(id="child")
    async def child(ctx, input):
        return input + 1

    async def orchestrate(ctx, input):
        return await ctx.call_workflow("child", 1) + await ctx.call_workflow("child", 2)

    lw.run_pipeline([child], None, orchestrator=orchestrate, world=memory_world, run_id="run_parent")
    subs = lw.list_runs(memory_world, parent_run_id="run_parent").runs
    assert len(subs) == 2 and {r.workflow_id for r in subs} == {"child"}
    assert all(r.status == "completed" and r.parent_run_id == "run_parent" for r in subs)
    assert lw.list_runs(memory_world, parent_run_id="run_other").runs == []


def test_an_s3_page_is_one_listing_from_a_start_key(request, tmp_path):
    from conftest import WorldMaker

    maker = WorldMaker("s3", tmp_path, request)
    clock = SetClock(T0)
    world = maker(clock=clock)
    for i in range(30):
        clock.set(T0 + i)
        add_run(world, f"run_{i:02d}", "completed")
    calls: list = []
    real_call, real_ls = maker.fs.call_s3, maker.fs.ls
    maker.fs.call_s3 = lambda method, **kw: calls.append((method, kw)) or real_call(method, **kw)
    maker.fs.ls = lambda *a, **kw: calls.append(("ls", a)) or real_ls(*a, **kw)
    try:
        first = lw.list_runs(world, limit=10)
        second = lw.list_runs(world, limit=10, cursor=first.next_cursor)
    finally:
        maker.fs.call_s3, maker.fs.ls = real_call, real_ls
    assert ids(second)[0] == "run_19"
    listings = [kw for method, kw in calls if method == "list_objects_v2"]
    assert [m for m, _ in calls if m == "ls"] == []  # never a whole-prefix listing
    assert len(listings) == 2 and all(kw["MaxKeys"] <= 16 for kw in listings)
    assert "StartAfter" not in listings[0] and listings[1]["StartAfter"].endswith("_run_20")


# --- a page on a file World reads a bounded part of its indexes ----------------------------

class CountingPosix(Posix):
    """The real system calls, counting what directory listings hand back."""

    def __init__(self) -> None:
        self.listings = 0
        self.names = 0

    def listdir(self, path: str) -> list[str]:
        names = super().listdir(path)
        self.listings += 1
        self.names += len(names)
        return names


def counting_filesystem(kind: str, tmp_path):
    """(fs, counter): a local or PyFilesystem one whose listings are counted."""
    if kind == "local-file":
        from fsspec.implementations.local import LocalFileSystem

        fs = LocalFileSystem(skip_instance_cache=True)
        fs.posix = CountingPosix()
        return fs, fs.posix
    from fs.memoryfs import MemoryFS

    from fs_adapters.pyfilesystem import PyFilesystemFS

    fs, counter = PyFilesystemFS(MemoryFS()), CountingPosix()
    real_ls = fs.ls

    def ls(path, detail=True, **kw):
        found = real_ls(path, detail=detail, **kw)
        counter.listings += 1
        counter.names += len(found)
        return found

    fs.ls = ls
    return fs, counter


@pytest.mark.parametrize("kind,n", [("local-file", 400), ("pyfs-memory", 1000)])
def test_a_page_on_a_file_world_lists_only_the_newest_buckets(kind, n, tmp_path):
    fs, counter = counting_filesystem(kind, tmp_path)
    clock = SetClock(T0)
    root = str(tmp_path / "wf") if kind == "local-file" else "/wf"
    world = lw.virtual_world(fs, root, clock=clock)
    for first in range(0, n, 100):  # ten runs a second, 1 % failed, a hundred at a time
        batch = range(first, first + 100)
        for i in batch:
            clock.set(T0 + i / 10)
            world.append_event(f"run_{i:05d}", "run.created", {"workflowId": "wf", "input": None},
                               durable=False)
            world.append_event(f"run_{i:05d}", "run.started", {"start": 1}, durable=False)
        world.sync()  # their summaries written: running
        for i in batch:
            end = ("run.failed", {"error": {"type": "E", "message": "x"}}) if i % 100 == 7 \
                else ("run.completed", {"output": i})
            world.append_event(f"run_{i:05d}", *end, durable=False)
        world.sync()

    def counted(**kwargs):
        counter.listings = counter.names = 0
        page = lw.list_runs(world, limit=50, **kwargs)
        # The newest buckets, never the whole index (by-created holds n names).
        assert counter.listings <= 16 and counter.names < n // 2, (counter.listings, counter.names)
        return page

    first = counted()
    assert ids(first) == [f"run_{i:05d}" for i in range(n - 1, n - 51, -1)]
    assert ids(counted(cursor=first.next_cursor))[0] == f"run_{n - 51:05d}"
    failed = counted(status="failed")
    assert len(failed.runs) == n // 100 and all(r.status == "failed" for r in failed.runs)
    assert ids(counted(created_before=at(20)))[0] == "run_00199"
    # Every run was listed as running: those buckets were removed once empty.
    assert fs.ls(f"{root}/catalogue/by-status/running", detail=False) == []
