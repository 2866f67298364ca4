"""What the inspector and `little ui` drew wrong (issue 32): overlapping time-axis labels,
0 ms steps drawn as wide bars, the runs list and the run page disagreeing on start and
duration, a cancelled run's reason shown as raw JSON, tracebacks that start in library
frames. Pages are drawn by headless Chromium and measured there."""

from __future__ import annotations

import itertools
import json
import threading
import urllib.request

import pytest
from browser import Page, dump_dom, file_url

import little_workflow as lw
from little_workflow.ops.inspect import render_run_html, run_page_data
from little_workflow.ops.ui import make_server
from little_workflow.testing import FakeClock


def crafted_run(world, clock, run_id: str, plan: list[tuple[str, float, float]], *,
                end: float, queued: float = 0.006, outcome: str = "completed") -> None:
    """A run's log at exact times: `plan` is (step path, start, duration) in seconds after
    run.created; the run ends `end` seconds after it."""
    t0 = clock.now()
    at = lambda s: clock.set(t0 + s)  # noqa: E731
    world.append_event(run_id, "run.created", {"workflowId": "crafted", "input": {}})
    at(queued)
    world.append_event(run_id, "run.started", {"start": 1})
    for path, start, took in plan:
        at(start)
        world.append_event(run_id, "step.started", {"stepPath": path, "attempt": 1})
        at(start + took)
        world.append_event(run_id, "step.succeeded", {"stepPath": path, "attempt": 1, "output": 1})
    at(end)
    if outcome == "completed":
        world.append_event(run_id, "run.completed", {"output": 1})


def write_page(world, tmp_path, run_id: str) -> str:
    path = tmp_path / f"{run_id}.html"
    path.write_text(render_run_html(world, run_id))
    return file_url(str(path))


AXIS_LABELS_JS = """
[...document.querySelectorAll('.axis .track > *')]
  .filter(n => n.textContent.trim() && getComputedStyle(n).visibility !== 'hidden')
  .map(n => { const r = n.getBoundingClientRect(); return [n.className, n.textContent, r.left, r.right]; })
"""
TRACK_JS = "(() => { const r = document.querySelector('.axis .track').getBoundingClientRect(); return [r.left, r.right]; })()"


@pytest.mark.parametrize("shape", ["milliseconds with short gaps", "a sleep after a burst"])
def test_time_axis_labels_do_not_overlap_and_stay_on_the_axis(tmp_path, shape):
    clock = FakeClock()
    world = lw.local_world(str(tmp_path / "data"), clock=clock)
    if shape == "milliseconds with short gaps":  # issue 32's run: ≈ 5 ms over +16 ms
        crafted_run(world, clock, "run_axis", [("ok", 0.007, 0.0003), ("boom", 0.010, 0.0002)], end=0.016)
    else:  # +0 ms under "≈ 1.50 s"
        crafted_run(world, clock, "run_axis", [(f"quick{i}", 0.014 + 0.002 * i, 0.0005) for i in range(5)]
                    + [("slow", 1.53, 0.34)] + [(f"q{i}", 1.9 + 0.002 * i, 0.0004) for i in range(3)]
                    + [("slow2", 2.68, 0.3)], end=2.98)
    with Page() as page:
        page.open(write_page(world, tmp_path, "run_axis"))
        labels = page.eval(AXIS_LABELS_JS)
        left, right = page.eval(TRACK_JS)
    assert labels, labels
    labels.sort(key=lambda lab: lab[2])
    for a, b in itertools.pairwise(labels):
        assert a[3] <= b[2] + 0.5, f"{a[1]!r} overlaps {b[1]!r}: {labels}"
    for lab in labels:
        assert left - 0.5 <= lab[2] and lab[3] <= right + 0.5, f"{lab[1]!r} leaves the axis: {labels}"


BARS_JS = """
(() => { const t = document.querySelector('.axis .track').getBoundingClientRect().width;
  return [...document.querySelectorAll('[data-step-path]')].map(b =>
    [b.dataset.stepPath, b.getBoundingClientRect().width / t,
     b.closest('.row').querySelector('.meta').textContent]); })()
"""


def test_a_step_of_0_ms_is_a_thin_mark_and_a_millisecond_at_most_2_percent(tmp_path):
    clock = FakeClock()
    world = lw.local_world(str(tmp_path / "data"), clock=clock)
    plan = [("ok", 0.007, 0.0003), ("boom", 0.010, 0.0002), ("ms", 0.012, 0.001)]
    crafted_run(world, clock, "run_bars", plan, end=0.016)
    took = {path: d for path, _, d in plan}
    with Page() as page:
        page.open(write_page(world, tmp_path, "run_bars"))
        bars = page.eval(BARS_JS)
        track_px = page.eval("document.querySelector('.axis .track').getBoundingClientRect().width")
    assert {b[0] for b in bars} == set(took)
    for path, fraction, meta in bars:
        # 3 px is the bar's minimum width (a mark you can see and click).
        assert fraction <= max(took[path] / 0.05, 3.5 / track_px), (path, fraction, meta, bars)
    assert [b[2] for b in bars if b[0] == "boom"] == ["0 ms"]


def test_runs_list_and_run_page_agree_on_start_and_duration(tmp_path):
    clock = FakeClock()
    world = lw.local_world(str(tmp_path / "data"), clock=clock)
    # Queued for 5 s before it started: the list counts from run.created.
    clock_start = {"run_queued": clock.now()}
    crafted_run(world, clock, "run_queued", [("a", 5.0, 1.25)], end=7.5, queued=5.0)
    clock.advance(60)
    clock_start["run_open"] = clock.now()
    crafted_run(world, clock, "run_open", [("a", 0.5, 0.1)], end=0.8, queued=0.4, outcome="waiting")
    server = make_server(world, port=0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        with urllib.request.urlopen(base + "api/runs", timeout=10) as resp:
            rows = {r["runId"]: r for r in json.loads(resp.read())["data"]["runs"]}
        for rid in ("run_queued", "run_open"):
            page = run_page_data(world, rid)
            assert page["startedAt"] == rows[rid]["startedAt"] == pytest.approx(clock_start[rid]), rid
            assert page["startedAt"] == pytest.approx(rows[rid]["startedAt"], abs=1e-6), rid
        queued = run_page_data(world, "run_queued")["durationSeconds"]
        assert queued == pytest.approx(rows["run_queued"]["durationSeconds"], abs=1e-6) == 7.5
        # Unfinished: both say "so far", counted from the same start by the page's clock.
        assert run_page_data(world, "run_open")["durationSeconds"] is rows["run_open"]["durationSeconds"] is None
        listed = dump_dom(base)
        shown = dump_dom(base + "runs/run_queued")
    finally:
        server.shutdown()
        server.server_close()
    row = listed.find_all(data_run_id="run_queued")[0]
    cells = [td.text() for td in row.find_all(lambda n: n.tag == "td")]
    facts = {dt.text(): dd.text() for dt, dd in zip(shown.find_all(lambda n: n.tag == "dt"),
                                                    shown.find_all(lambda n: n.tag == "dd"), strict=True)}
    assert (cells[3], cells[4]) == (facts["started"], facts["duration"]) == (cells[3], "7.50 s")


def test_a_cancelled_runs_reason_reads_as_text_on_the_page_and_in_the_list(tmp_path):
    world = lw.local_world(str(tmp_path / "data"))

    @lw.workflow(id="waits")
    async def waits(ctx: lw.RunContext, input: dict) -> dict:
        await ctx.wait_for_event("w", "go")
        return {}

    lw.run_workflow(waits, {}, world=world, run_id="run_cancelled", suspend=True)
    lw.cancel_run(world, "run_cancelled", reason="changed my mind")
    lw.run_workflow(waits, {}, world=world, run_id="run_silent", suspend=True)
    lw.cancel_run(world, "run_silent")
    dom = dump_dom(write_page(world, tmp_path, "run_cancelled"))
    [box] = dom.find_all(data_field="error")
    assert box.text() == "cancelled: changed my mind"
    dom = dump_dom(write_page(world, tmp_path, "run_silent"))
    assert dom.find_all(data_field="error")[0].text() == "cancelled (no reason given)"
    server = make_server(world, port=0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        listed = dump_dom(f"http://127.0.0.1:{server.server_address[1]}/")
    finally:
        server.shutdown()
        server.server_close()
    row = listed.find_all(data_run_id="run_cancelled")[0]
    assert "cancelled: changed my mind" in row.text() and "{" not in row.text()


def user_step_that_breaks(x: int) -> int:
    numbers = {"one": 1}
    return numbers["two"] + x


def test_a_traceback_shows_the_users_frame_first(tmp_path):
    world = lw.local_world(str(tmp_path / "data"))

    @lw.workflow(id="breaks")
    async def breaks(ctx: lw.RunContext, input: dict) -> dict:
        await ctx.step("lookup", user_step_that_breaks, 1)
        return {}

    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(breaks, {}, world=world, run_id="run_breaks")
    dom = dump_dom(write_page(world, tmp_path, "run_breaks"))
    [box] = dom.find_all(data_field="traceback")
    lines = box.text().strip().splitlines()
    assert lines[0].strip().startswith(f'File "{__file__}"') and "in user_step_that_breaks" in lines[0], lines[:4]
    assert 'numbers["two"]' in lines[1]
    assert any(line.startswith("KeyError: 'two'") for line in lines[:6]), lines[:6]
    # The whole traceback is still there, after it.
    assert "little_workflow" in box.text() and "Traceback (most recent call last)" in box.text()
