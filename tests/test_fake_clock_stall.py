"""A run sleeping on a FakeClock that nobody advances, without `suspend=True`, would block
forever: it raises an error naming `suspend=True` and `lw_clock.advance` instead, and the
run stays unfinished (not failed): run again with suspend=True it goes on."""

from __future__ import annotations

import threading
import time

import pytest

import little_workflow as lw
from little_workflow.testing import FakeClock

pytest_plugins = ["pytester"]


@lw.workflow(id="napper")
async def napper(ctx: lw.RunContext, input: dict) -> str:
    await ctx.sleep("nap", 3600)
    return "awake"


def test_a_sleep_nobody_advances_raises_naming_the_ways_out(memory_world_with_clock):
    world, clock = memory_world_with_clock
    t = time.monotonic()
    with pytest.raises(lw.ClockStalledError) as caught:
        lw.run_workflow(napper, {}, world=world, run_id="run_nap")
    assert time.monotonic() - t < 5
    message = str(caught.value)
    assert "suspend=True" in message and "lw_clock.advance" in message and "run_nap" in message, message
    assert "'nap'" in message
    # Not a failure of the run: it is unfinished, and suspend=True is the way on.
    assert lw.materialize_run_state(world, "run_nap").status != "failed"
    r = lw.run_workflow(napper, {}, world=world, run_id="run_nap", suspend=True)
    assert r.status == "waiting"
    clock.advance(3600)
    assert lw.run_workflow(napper, {}, world=world, run_id="run_nap", suspend=True).output == "awake"


def test_a_clock_advanced_by_another_thread_is_not_stalled(memory_world_with_clock):
    world, clock = memory_world_with_clock
    threading.Timer(0.4, clock.advance, args=(1800,)).start()  # halfway, after a while
    threading.Timer(0.8, clock.advance, args=(1800,)).start()
    assert lw.run_workflow(napper, {}, world=world, run_id="run_ok").output == "awake"


@pytest.fixture
def memory_world_with_clock():
    from fsspec.implementations.memory import MemoryFileSystem

    clock = FakeClock(stall_seconds=1.0)
    fs = MemoryFileSystem(skip_instance_cache=True, global_store=False)
    with lw.virtual_world(fs, "/wf", clock=clock) as world:
        yield world, clock


def test_the_plugins_clock_says_so_in_a_users_test(pytester):
    pytester.makepyfile(test_user='''
        import little_workflow as lw

        @lw.workflow(id="napper")
        async def napper(ctx, input):
            await ctx.sleep("nap", 3600)
            return "awake"

        def test_forgot_suspend(lw_world, lw_clock):
            lw.run_workflow(napper, {}, world=lw_world, run_id="run_user")
    ''')
    t = time.monotonic()
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert time.monotonic() - t < 60
    result.stdout.fnmatch_lines(["*ClockStalledError*suspend=True*lw_clock.advance*"])
