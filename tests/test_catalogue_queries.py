"""`lw.list_runs` answers every question in O(page) and every bad question with
`lw.CatalogueQueryError` (issue 27): status and workflow together read one index,
dates before 1970 and after 2286 work on file Worlds as on local_world, a parent run id
is a run id before it is a path, crafted cursors and filters are typed errors, and
`little ui` answers them (and a run whose log is damaged) with a message, never a
closed connection."""

from __future__ import annotations

import base64
import json
import os
import threading
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone, tzinfo

import pytest
from conftest import WorldMaker

import little_workflow as lw
from little_workflow.world.posix import Posix

UTC = timezone.utc
T0 = 1_800_000_000.0


class SetClock:
    def __init__(self, start: float):
        self.t = start

    def now(self) -> float:
        return self.t

    async def sleep_until(self, when: float) -> None:
        raise AssertionError("not used")


def finished_run(world, run_id: str, workflow: str, *, status: str = "completed",
                 parent: str | None = None, durable: bool = True) -> None:
    created = {"workflowId": workflow, "input": None}
    if parent is not None:
        created["parentRunId"] = parent
    world.append_event(run_id, "run.created", created, durable=durable)
    world.append_event(run_id, "run.started", {"start": 1}, durable=durable)
    if status == "completed":
        world.append_event(run_id, "run.completed", {"output": 1}, durable=durable)
    elif status == "failed":
        world.append_event(run_id, "run.failed", {"error": {"type": "E", "message": "x"}},
                           durable=durable)


def ids(page) -> list[str]:
    return [r.run_id for r in page.runs]


# --- status and workflow together cost a page ------------------------------------------------

class CountingPosix(Posix):
    """The real system calls, counting the summary documents read."""

    def __init__(self) -> None:
        self.summaries_read = 0

    def read(self, path: str) -> bytes:
        if "/catalogue/runs/" in path:
            self.summaries_read += 1
        return super().read(path)


def test_status_and_workflow_together_read_a_page_not_every_run_of_the_status(tmp_path):
    """270 completed runs of one workflow, then 30 older ones of another: the first
    page of the older workflow's completed runs reads about a page of summaries."""
    from fsspec.implementations.local import LocalFileSystem

    fs = LocalFileSystem(skip_instance_cache=True)
    fs.posix = counter = CountingPosix()
    clock = SetClock(T0)
    world = lw.virtual_world(fs, str(tmp_path / "wf"), clock=clock)
    for i in range(300):
        clock.t = T0 + i
        finished_run(world, f"run_{i:04d}", "rare" if i < 30 else "common", durable=False,
                     status="failed" if i % 7 == 0 else "completed")
    world.sync()

    counter.summaries_read = 0
    page = lw.list_runs(world, status="completed", workflow_id="rare", limit=10)
    assert ids(page) == [f"run_{i:04d}" for i in range(29, -1, -1) if i % 7][:10]
    assert counter.summaries_read <= 12, counter.summaries_read
    counter.summaries_read = 0
    page = lw.list_runs(world, status=["failed", "completed"], workflow_id="rare", limit=10,
                        cursor=page.next_cursor)
    assert ids(page)[0] == "run_0017" and len(page.runs) == 10
    assert counter.summaries_read <= 12, counter.summaries_read


def test_status_and_workflow_together_on_every_world(make_world):
    clock = SetClock(T0)
    world = make_world(clock=clock)
    for i, (workflow, status) in enumerate([("a", "completed"), ("b", "completed"),
                                            ("a", "failed"), ("a", "completed"), ("b", "failed")]):
        clock.t = T0 + i
        finished_run(world, f"run_{i}", workflow, status=status)
    assert ids(lw.list_runs(world, status="completed", workflow_id="a")) == ["run_3", "run_0"]
    assert ids(lw.list_runs(world, status=["failed", "completed"], workflow_id="b")) == [
        "run_4", "run_1"]
    assert ids(lw.list_runs(world, status="running", workflow_id="a")) == []
    assert ids(lw.list_runs(world, status="failed", workflow_id="nope")) == []


# --- dates outside 1970..2286, parent run ids ----------------------------------------------

QUICK_KINDS = ["memory", "local-file", "local_world"]


@pytest.fixture(params=QUICK_KINDS)
def quick_world(request, tmp_path):
    clock = SetClock(T0)
    world = WorldMaker(request.param, tmp_path, request)(clock=clock)
    for i in range(3):
        clock.t = T0 + i
        finished_run(world, f"run_{i}", "wf", parent="run_0" if i else None)
    return world


@pytest.mark.parametrize("after, before, expected", [
    (datetime(1960, 1, 1, tzinfo=UTC), None, ["run_2", "run_1", "run_0"]),
    (datetime(1, 1, 1, tzinfo=UTC), None, ["run_2", "run_1", "run_0"]),
    (None, datetime(1960, 1, 1, tzinfo=UTC), []),
    (None, datetime(1, 1, 1, tzinfo=UTC), []),
    (datetime(2400, 1, 1, tzinfo=UTC), None, []),
    (None, datetime(2400, 1, 1, tzinfo=UTC), ["run_2", "run_1", "run_0"]),
    (datetime.max.replace(tzinfo=UTC), None, []),
    (None, datetime.max.replace(tzinfo=UTC), ["run_2", "run_1", "run_0"]),
    (datetime(1960, 1, 1, tzinfo=UTC), datetime(2400, 1, 1, tzinfo=UTC), ["run_2", "run_1", "run_0"]),
])
def test_dates_far_before_and_after_the_runs(quick_world, after, before, expected):
    assert ids(lw.list_runs(quick_world, created_after=after, created_before=before)) == expected
    every, cursor = [], None
    while True:
        page = lw.list_runs(quick_world, created_after=after, created_before=before, limit=1,
                            cursor=cursor)
        every += ids(page)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert every == expected


@pytest.mark.parametrize("parent", ["../../events", "run_0/../run_1", "..", "", "run_ä",
                                    "events", "run_0\x00"])
def test_a_parent_run_id_is_a_run_id_before_it_is_a_path(quick_world, parent):
    with pytest.raises(lw.CatalogueQueryError, match="list_runs parent_run_id") as e:
        lw.list_runs(quick_world, parent_run_id=parent)
    assert e.value.argument == "parent_run_id"
    assert ids(lw.list_runs(quick_world, parent_run_id="run_0")) == ["run_2", "run_1"]


def test_a_crafted_parent_in_a_log_names_no_folder(tmp_path):
    path = str(tmp_path / "wf")
    world = lw.virtual_world("file://" + path)
    world.append_event("run_a", "run.created", {"workflowId": "wf", "parentRunId": "../../events"})
    world.append_event("run_a", "run.started", {"start": 1})
    assert [r.parent_run_id for r in lw.list_runs(world).runs] == ["../../events"]
    made = [os.path.relpath(os.path.join(d, n), path) for d, dirs, files in os.walk(path)
            for n in dirs + files]
    assert not any(".." in m.split(os.sep) for m in made)
    assert not os.path.exists(os.path.join(path, "catalogue", "by-parent"))
    assert lw.verify_world(world).catalogue_wrong_entries == []


# --- crafted cursors and filters -----------------------------------------------------------

def cursor_of(value) -> str:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


class NoOffset(tzinfo):
    """An 'aware' datetime whose offset is unknown."""

    def utcoffset(self, dt):
        return None


class BrokenOffset(tzinfo):
    def utcoffset(self, dt):
        raise ArithmeticError("no offset today")


CRAFTED = [
    ({"cursor": cursor_of(b"[" * 100_000)}, "cursor"),  # RecursionError in json
    ({"cursor": cursor_of(b"[" * 740)}, "cursor"),  # as deep as fits in a short cursor
    ({"cursor": cursor_of([1, 10**30, "run_a"])}, "cursor"),  # OverflowError in SQLite
    ({"cursor": cursor_of([1, -(10**30), "run_a"])}, "cursor"),
    ({"cursor": cursor_of([1, 5, 7])}, "cursor"),
    ({"cursor": cursor_of({"a": 1, "b": 2, "c": 3})}, "cursor"),
    ({"cursor": cursor_of([1, 5.5, "run_a"])}, "cursor"),
    ({"cursor": cursor_of([1, True, "run_a"])}, "cursor"),
    ({"cursor": cursor_of(b"1e999")}, "cursor"),
    ({"cursor": cursor_of(b"\xff\xfe")}, "cursor"),
    ({"cursor": "é"}, "cursor"),
    ({"cursor": "A" * 100_001}, "cursor"),
    ({"cursor": cursor_of([1, 5, "../../x"])}, "cursor"),
    ({"status": 5}, "status"),
    ({"status": [["completed"]]}, "status"),
    ({"status": b"completed"}, "status"),
    ({"status": {"completed": 1}.values()}, "status"),
    ({"workflow_id": "\ud800"}, "workflow_id"),
    ({"workflow_id": b"wf"}, "workflow_id"),
    ({"parent_run_id": "run_\ud800"}, "parent_run_id"),
    ({"created_after": datetime(2026, 1, 1, tzinfo=NoOffset())}, "created_after"),
    ({"created_before": datetime(2026, 1, 1, tzinfo=BrokenOffset())}, "created_before"),
    ({"created_after": 1_800_000_000}, "created_after"),
    ({"limit": 10**30}, "limit"),
    ({"limit": 100_001}, "limit"),
    ({"limit": True}, "limit"),
    ({"limit": -1}, "limit"),
]


@pytest.mark.parametrize("kwargs, argument", CRAFTED,
                         ids=[f"{a}-{i}" for i, (_, a) in enumerate(CRAFTED)])
def test_crafted_cursors_and_filters_are_typed_errors(quick_world, kwargs, argument):
    with pytest.raises(lw.CatalogueQueryError) as e:
        lw.list_runs(quick_world, **kwargs)
    assert e.value.argument == argument and f"list_runs {argument}" in str(e.value)


def test_a_cursor_from_the_future_or_the_past_pages_sensibly(quick_world):
    """Well-formed cursors at any position: a page after 'the year 2400' starts at the
    newest run, one after 'the year 1' is empty."""
    assert ids(lw.list_runs(quick_world, cursor=cursor_of([1, 2**62, "run_z"]))) == [
        "run_2", "run_1", "run_0"]
    assert ids(lw.list_runs(quick_world, cursor=cursor_of([1, -(2**62), "run_z"]))) == []


# --- little ui ---------------------------------------------------------------------------------

@pytest.fixture
def ui(tmp_path):
    from little_workflow.ops.ui import make_server

    world = lw.virtual_world(f"file://{tmp_path}/wf")
    for i in range(3):
        finished_run(world, f"run_{i}", "wf")
    finished_run(world, "run_bad", "wf")
    # A hole in run_bad's log: reading it raises EventLogCorruptError.
    os.remove(os.path.join(str(tmp_path), "wf", "events", "run_bad", "0000000002.json"))
    server = make_server(world, port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=20) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.parametrize("query, needle", [
    ("cursor=" + cursor_of(b"[" * 3000), "list_runs cursor"),
    ("cursor=" + cursor_of([1, 10**30, "run_a"]), "list_runs cursor"),
    ("status=nope", "list_runs status"),
    ("cursor=%FF", "list_runs cursor"),
], ids=["deep-cursor", "huge-cursor", "status", "bad-bytes-cursor"])
def test_ui_answers_a_bad_query_with_400_and_the_message(ui, query, needle):
    for path in ("/api/runs?", "/?"):
        status, body = fetch(ui + path + query)
        assert status == 400 and needle in body, (path, status, body[:300])


def test_ui_caps_the_page_size(ui):
    from little_workflow.ops.ui import MAX_PAGE_SIZE

    status, body = fetch(ui + f"/api/runs?limit={10**40}")
    assert status == 200, body[:300]
    assert len(json.loads(body)["data"]["runs"]) == 4 and MAX_PAGE_SIZE <= 1000


def test_ui_shows_the_error_of_a_run_whose_log_is_damaged(ui):
    for path in ("/runs/run_bad", "/api/runs/run_bad"):
        status, body = fetch(ui + path)
        assert status == 500 and "run_bad" in body and "EventLogCorruptError" in body, (path, body)
    status, _ = fetch(ui + "/runs/run_1")
    assert status == 200


def test_list_runs_limit_cap_is_documented_in_the_error():
    world = lw.virtual_world("memory://caps")
    with pytest.raises(lw.CatalogueQueryError, match="at most 10000"):
        lw.list_runs(world, limit=10_001)
    assert lw.list_runs(world, limit=10_000).runs == []


def test_listing_tolerates_a_timedelta_since_on_every_world(quick_world):
    """`little runs --since` far back: every run (the CLI passes such dates through)."""
    from little_workflow.ops.cli_support import run_rows

    rows, _ = run_rows(quick_world, since=timedelta(days=365 * 80).total_seconds())
    assert [r["runId"] for r in rows] == ["run_2", "run_1", "run_0"]
