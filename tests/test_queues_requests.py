"""An idle worker's S3 requests per sweep with queued runs it cannot start (DESIGN §17):
within a stated budget, counted against a real moto server as tests/test_sweep_index.py
counts them. The budget per sweep: one listing of the index of unfinished runs, one
listing per unfinished run (its log, as for any run; a worker's first sweep reads each
log in full, up to 4 requests a run, as tests/test_sweep_index.py allows), and 4 per queue
with waiting runs (its limits, then the rate window read, or a try of a place: a
conditional write refused and the read of the holder's lease). A full rate window is
read, not written: no run lock is taken and no log read again for first starts it holds
back (before that, 17 requests a sweep instead of 8 with 3 runs waiting)."""

from __future__ import annotations

from s3_server import RequestCounter

import little_workflow as lw
from little_workflow.runtime.queue_layout import slot_name

QUEUED = 3
BUDGET_QUEUE = 4


@lw.workflow(id="qr-work")
async def work(ctx: lw.RunContext, input: dict) -> dict:
    return {"n": await ctx.step("one", lambda: input["n"] + 1)}


def idle_sweeps(moto_s3, block: str) -> tuple[int, int, dict]:
    bucket = moto_s3.new_bucket()
    maker = lw.virtual_world(moto_s3.filesystem(), f"{bucket}/wf")
    if block == "slot":
        lw.declare_queue(maker, "q", concurrency=1)
        held = maker.take_slot(slot_name("q", 0), "another worker")  # its one place is taken
        assert held is not None
    else:
        lw.declare_queue(maker, "q", rate_limit=lw.RateLimit(limit=1, period=3600))
        lw.enqueue(maker, work, {"n": 0}, queue="q")
        first = lw.Worker(maker, workflows=[work])
        first.run_until_idle()  # one start: the window is full for an hour
        first.close()
    handles = [lw.enqueue(maker, work, {"n": n}, queue="q") for n in range(QUEUED)]
    fs = moto_s3.filesystem()  # a worker on another host: its own client and caches
    counter = RequestCounter(fs)
    world = lw.virtual_world(fs, f"{bucket}/wf")
    worker = lw.Worker(world, workflows=[work])
    try:
        counter.reset()
        assert worker.sweep() == 0
        first_sweep, detail = counter.total, dict(counter.by_method)
        counter.reset()
        assert worker.sweep() == 0
        second_sweep = counter.total
    finally:
        worker.close()
    assert all(h.status() == "created" for h in handles)
    return first_sweep, second_sweep, detail


def test_an_idle_sweep_with_runs_waiting_for_a_place_stays_within_its_budget(moto_s3):
    first, second, detail = idle_sweeps(moto_s3, "slot")
    print(f"\nS3 requests per idle sweep, {QUEUED} runs waiting for a place: first {first} "
          f"{detail}, next {second}")
    assert first <= 1 + 4 * QUEUED + BUDGET_QUEUE and second <= 1 + QUEUED + BUDGET_QUEUE


def test_an_idle_sweep_with_runs_waiting_for_the_rate_window_stays_within_its_budget(moto_s3):
    first, second, detail = idle_sweeps(moto_s3, "rate")
    print(f"\nS3 requests per idle sweep, {QUEUED} runs waiting for the rate window: first "
          f"{first} {detail}, next {second}")
    assert first <= 1 + 4 * QUEUED + BUDGET_QUEUE and second <= 1 + QUEUED + BUDGET_QUEUE
