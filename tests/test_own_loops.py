"""`may_block_loop()` (runtime/loops.py): a World call is made inline only on a loop this
library made, and only while the calling task is the only unfinished one there — the check
every durable append of a worker's run makes, so it counts only that loop's tasks."""

from __future__ import annotations

import asyncio

from little_workflow.runtime.loops import may_block_loop, own, run_on_own_loop


async def _alone_then_shared_then_alone() -> list[bool]:
    seen = [may_block_loop()]
    gate = asyncio.Event()
    other = asyncio.get_running_loop().create_task(gate.wait())
    await asyncio.sleep(0)
    seen.append(may_block_loop())
    gate.set()
    await other
    seen.append(may_block_loop())
    return seen


def test_only_the_calling_task_of_an_own_loop_may_block_it():
    assert run_on_own_loop(_alone_then_shared_then_alone) == [True, False, True]


def test_a_loop_kept_across_runs_counts_only_its_unfinished_tasks():
    loop = own(asyncio.new_event_loop())
    try:
        for _ in range(3):  # a worker thread's loop runs one run after another
            assert loop.run_until_complete(_alone_then_shared_then_alone()) == [True, False, True]
    finally:
        loop.close()


def test_a_loop_the_caller_owns_is_never_blocked():
    async def check() -> bool:
        return may_block_loop()

    assert asyncio.run(check()) is False


def test_tasks_of_other_loops_do_not_count():
    import threading

    started, finish = threading.Event(), threading.Event()

    def busy_loop() -> None:
        async def many() -> None:
            tasks = [asyncio.create_task(asyncio.sleep(30)) for _ in range(5)]
            started.set()
            await asyncio.get_running_loop().run_in_executor(None, finish.wait)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run(many())

    t = threading.Thread(target=busy_loop)
    t.start()
    try:
        assert started.wait(30)

        async def check() -> bool:
            return may_block_loop()

        assert run_on_own_loop(check) is True
    finally:
        finish.set()
        t.join()
