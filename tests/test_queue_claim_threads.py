"""A worker's pool threads do not queue behind one another's claim of queued runs (issue 30):
a thread whose run ended while another thread's pass is under way leaves its turn to that
thread, which makes one more pass when its own ends and takes the freed place then — so
places freed during a pass are claimed in one batch, and no pool thread idles waiting."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import little_workflow as lw
from little_workflow.testing import FakeClock
from little_workflow.world.tracing import tracing_world

GATE = threading.Event()  # the runs end only once the test has counted them


@lw.workflow(id="claim-threads-gated")
async def gated(ctx: lw.RunContext, input: int) -> int:
    await asyncio.to_thread(GATE.wait, 60)
    return input


def test_a_thread_that_frees_during_a_pass_does_not_wait_and_its_place_is_taken(tmp_path):
    GATE.clear()
    base = lw.local_world(str(tmp_path / "data"))
    lw.declare_queue(base, "q", concurrency=2)
    handles = [lw.enqueue(base, gated, i, queue="q") for i in range(3)]
    inside, go_on = threading.Event(), threading.Event()
    passer: list[threading.Thread] = []

    def on_call(name: str, args: tuple, kwargs: dict) -> None:
        # The first pass of the passing thread stops where it reads the queue's limits.
        if (name == "read_document" and str(args[0]).endswith("/queue.json")
                and passer and threading.current_thread() is passer[0] and not inside.is_set()):
            inside.set()
            go_on.wait()

    world = tracing_world(base, on_call)
    worker = lw.Worker(world, workflows=[gated], concurrency=2)
    try:
        worker._start_due()  # the sweep's reading part: the queued runs become candidates
        # Both threads of the pool are busy with runs of their own (not queued ones).
        worker._in_flight["run_first"] = concurrent.futures.Future()
        worker._in_flight["run_second"] = concurrent.futures.Future()
        passer.append(threading.Thread(target=worker._done, args=("run_first",)))
        passer[0].start()  # the first run ended: its thread's pass has one place
        assert inside.wait(30)
        freed = threading.Thread(target=worker._done, args=("run_second",))
        freed.start()  # the second ended while that pass is under way
        freed.join(30)  # not a speed figure: a thread waiting for the pass never returns
        returned_during_the_pass = not freed.is_alive()
        go_on.set()
        passer[0].join()
        freed.join()
        assert returned_during_the_pass, "a pool thread waited for another thread's pass"
        started = [h.run_id for h in handles if h.run_id in worker._in_flight]
        assert len(started) == 2  # both freed places taken, the second by a pass made for it
        GATE.set()
        assert sorted(h.result(timeout=60) for h in handles) == [0, 1, 2]
    finally:
        go_on.set()
        GATE.set()
        worker.close()
        base.close()


@lw.workflow(id="claim-threads-quick")
async def quick(ctx: lw.RunContext, input: int) -> int:
    return input


def test_starts_on_a_queue_with_no_rate_limit_are_written_a_second_at_a_time(tmp_path):
    """`starts.json` of a queue with no rate limit only feeds `little queues`' rate: a
    worker writes it once per STATS_SECONDS of the World's clock and when it goes idle, not
    once per claim pass; every start is in it once the worker is idle."""
    clock = FakeClock(start=1_800_000_000.0)  # never moves: one second never passes
    base = lw.local_world(str(tmp_path / "data"), clock=clock)
    lw.declare_queue(base, "q", concurrency=2)
    handles = [lw.enqueue(base, quick, i, queue="q") for i in range(12)]
    writes: list[str] = []

    def on_call(name: str, args: tuple, kwargs: dict) -> None:
        if name == "update_document" and str(args[0]).endswith("/starts.json"):
            writes.append(str(args[0]))

    worker = lw.Worker(tracing_world(base, on_call), workflows=[quick], concurrency=2)
    try:
        worker.run_until_idle()
    finally:
        worker.close()
    assert sorted(h.result(timeout=60) for h in handles) == list(range(12))
    assert writes == ["queues/q/starts.json"] * 2  # the first pass, then going idle
    assert base.read_document("queues/q/starts.json")["total"] == 12
    (q,) = lw.list_queues(base)
    assert q.recent_rate == 12
    base.close()
