"""WorldCheckpointSaver passes LangGraph's own checkpointer conformance suite
(`langgraph-checkpoint-conformance`: every base capability and the extended
copy_thread, prune and delete_for_runs) on every kind of World."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from conftest import WorldMaker  # noqa: E402
from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.checkpoint.conformance.capabilities import Capability  # noqa: E402

from little_workflow.ext.langgraph import WorldCheckpointSaver  # noqa: E402

KINDS = ["local_world", "memory", "local-file", "s3"]


@pytest.mark.parametrize("kind", KINDS)
def test_conformance_suite_passes_every_capability(kind: str, tmp_path: Any, request: Any) -> None:
    maker = WorldMaker(kind, tmp_path, request)
    world = maker()

    @checkpointer_test(name=f"WorldCheckpointSaver[{kind}]")
    async def saver_factory() -> Any:
        yield WorldCheckpointSaver(world)

    try:
        report = asyncio.run(validate(saver_factory))
    finally:
        world.close()
    failures = {cap: r.failures for cap, r in report.results.items() if not r.passed}
    assert failures == {}, failures
    # Every capability, base and extended, was detected and run (none skipped).
    assert set(report.results) == {c.value for c in Capability}
    assert all(r.detected and r.tests_failed == 0 and r.tests_passed > 0
               for r in report.results.values())
    passed = sum(r.tests_passed for r in report.results.values())
    assert passed == 81, passed  # the suite's every test, base and extended
