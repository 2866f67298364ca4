"""Parallel groups: `ctx.parallel` runs each child as the durable step `path/<index>`,
all in one asyncio TaskGroup (a failing child cancels its siblings), the children's
appends sharing commits, one sync for the whole group before the workflow goes on."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Iterable, TypeVar, overload

from ..errors import StepError
from .step_engine import StepEngine
from .steps import Group, Retry, enter_group, leave_group, release_enclosing_slot

T = TypeVar("T")


class ParallelGroups(StepEngine):
    """`parallel`, on top of the step engine (a base class of RunContext)."""

    # Typed for callers: a list of what the callables return (awaited when async).
    @overload
    async def parallel(self, path: str, callables: Iterable[Callable[[], Awaitable[T]]],  # type: ignore[overload-overlap]
                       max_concurrency: int | None = None, *, retry: Retry | None = None,
                       timeout: float | None = None) -> list[T]: ...

    @overload
    async def parallel(self, path: str, callables: Iterable[Callable[[], T]],
                       max_concurrency: int | None = None, *, retry: Retry | None = None,
                       timeout: float | None = None) -> list[T]: ...

    async def parallel(
        self,
        path: str,
        callables: Iterable[Callable[[], Any]],
        max_concurrency: int | None = None,
        *,
        retry: Retry | None = None,
        timeout: float | None = None,
    ) -> list[Any]:
        """Run each zero-argument callable as durable step `path/<index>`; results in
        input order. `retry` and `timeout` apply to each child as in `step`. A failing
        child (after its retries) cancels its siblings. The group takes no step slot."""
        self._claim(path)
        release_enclosing_slot()
        children = list(callables)
        if max_concurrency is not None and max_concurrency < 1:
            raise StepError(self.run_id, path, "max_concurrency must be at least 1")
        group_slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None
        results: list[Any] = [None] * len(children)
        if self.history is not None:
            # The group asks for all its children at once: they run in any order.
            logged = [rec.first_sequence for i in range(len(children))
                      if (rec := self.log.steps.get(f"{path}/{i}")) is not None]
            for i in range(len(children)):
                self.asked(("step", f"{path}/{i}"))
            if logged:
                self._check_order(("step", path), min(logged))

        async def child(i: int, fn: Callable[[], Any]) -> None:
            child_path = f"{path}/{i}"
            rec = self.log.steps.get(child_path)
            if group_slots is None or (rec is not None and rec.status != "running"):
                results[i] = await self._step(child_path, fn, (), retry, timeout, group_child=True)
                return
            async with group_slots:
                results[i] = await self._step(child_path, fn, (), retry, timeout, group_child=True)

        group = Group()
        token = enter_group(group)
        try:
            async with asyncio.TaskGroup() as tg:
                for i, fn in enumerate(children):
                    tg.create_task(child(i, fn))
        except BaseExceptionGroup as eg:
            raise first_leaf(eg) from None
        finally:
            leave_group(token)
            if self.mode == "execute":
                # One sync for the whole group: every child's success is durable before
                # the workflow goes on (one fsync instead of one per child).
                await self._blocking(self.world.sync)
        return results


def first_leaf(eg: BaseExceptionGroup) -> BaseException:
    exc: BaseException = eg
    while isinstance(exc, BaseExceptionGroup):
        non_cancel = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)]
        exc = (non_cancel or list(exc.exceptions))[0]
    return exc
