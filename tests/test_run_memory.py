"""A run's memory does not grow with its number of steps (BENCHMARKS.md M2), and step paths
stay unique per run however the run keeps them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import private_memory

import little_workflow as lw

# Runs in a fresh process, so that the test process's own allocations do not count. The
# run measures itself: Python bytes allocated at step FIRST (after a full collection, peak
# reset) and the peak from there to step LAST.
GROWTH_CHILD = textwrap.dedent("""
    import gc, json, sys, tempfile, tracemalloc
    import little_workflow as lw

    FIRST, LAST = int(sys.argv[1]), int(sys.argv[2])
    marks = {}

    def noop(i):
        return i

    @lw.workflow(id="memory-growth")
    async def steps(ctx, input):
        for i in range(LAST + 1):
            if i in (FIRST, LAST):
                gc.collect()
                marks[i] = tracemalloc.get_traced_memory()
                tracemalloc.reset_peak()
            await ctx.step(f"s{i}", noop, i)
        return LAST

    world = lw.local_world(tempfile.mkdtemp(prefix="lw-mem-"))
    lw.run_workflow(steps, {}, world=world, run_id="run_warm")
    tracemalloc.start()
    lw.run_workflow(steps, {}, world=world, run_id="run_measured")
    print(json.dumps({"at_first": marks[FIRST][0], "peak_to_last": marks[LAST][1]}))
""")


def test_a_long_runs_peak_memory_does_not_grow_with_its_steps(tmp_path):
    """Before the fix the peak grew 1.74 MB from step 1,000 to 5,000 (every executed
    step's record and its path kept until the run's end, ~330 bytes a step; 2.67 MB
    from 2,000 to 10,000); after it 0.34 MB, most of it the path digests' table (16-32
    bytes a step) and a table being doubled. The bound is about half of before."""
    out = subprocess.run(
        [sys.executable, "-c", GROWTH_CHILD, "1000", "5000"],
        capture_output=True, text=True, timeout=280,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
    m = json.loads(out.stdout.strip().splitlines()[-1])
    growth = m["peak_to_last"] - m["at_first"]
    assert growth < 700_000, f"peak grew {growth / 1e6:.2f} MB over 4,000 steps"


def _run(wf, world):
    return lw.run_workflow(wf, {}, world=world)


@pytest.fixture(params=["memory", "local_world"])
def world(request, tmp_path):
    if request.param == "memory":
        return lw.virtual_world(private_memory(), "/wf")
    return lw.local_world(str(tmp_path / "lw"))


def test_a_step_path_used_again_long_after_is_refused(world):
    @lw.workflow(id="path-again")
    async def wf(ctx, input):
        for i in range(300):
            await ctx.step(f"s{i}", lambda: 1)
        await ctx.step("s7", lambda: 2)

    with pytest.raises(lw.WorkflowFailedError) as e:
        _run(wf, world)
    assert "s7" in str(e.value.error) and "already used" in str(e.value.error)


def test_a_sleep_and_a_group_cannot_take_a_steps_path(world):
    @lw.workflow(id="sleep-on-step")
    async def sleeps(ctx, input):
        await ctx.step("a", lambda: 1)
        await ctx.sleep("a", 0)

    @lw.workflow(id="group-on-group")
    async def groups(ctx, input):
        await ctx.parallel("g", [lambda: 1])
        await ctx.step("x", lambda: 1)
        await ctx.parallel("g", [lambda: 2])

    for wf, path in ((sleeps, "a"), (groups, "g")):
        with pytest.raises(lw.WorkflowFailedError) as e:
            _run(wf, world)
        assert "already used" in str(e.value.error), path


class SameDigest(str):
    """Distinct paths that hash alike: a run keeps its paths by digest, and a digest
    shared by two different paths must not refuse the second."""

    def __hash__(self) -> int:
        return 12345


def test_two_paths_with_one_digest_are_both_steps(world):
    @lw.workflow(id="same-digest")
    async def wf(ctx, input):
        a = await ctx.step(SameDigest("left"), lambda: 1)
        b = await ctx.step(SameDigest("right"), lambda: 2)
        return a + b

    assert _run(wf, world).output == 3


def test_a_path_reused_with_the_same_digest_is_still_refused(world):
    @lw.workflow(id="same-digest-again")
    async def wf(ctx, input):
        await ctx.step(SameDigest("left"), lambda: 1)
        await ctx.step(SameDigest("right"), lambda: 2)
        await ctx.step(SameDigest("left"), lambda: 3)

    with pytest.raises(lw.WorkflowFailedError) as e:
        _run(wf, world)
    assert "already used" in str(e.value.error)
