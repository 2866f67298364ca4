"""The pytest plugin shipped with little-workflow (entry point `pytest11`, so pytest loads
it wherever the package is installed). Fixtures:

- `lw_world`: a fresh in-memory `virtual_world` for each test, over its own private
  `MemoryFileSystem` (not fsspec's process-wide memory store, so tests never see each
  other's runs), with `lw_clock` as its clock; closed after the test.
- `lw_clock`: that World's `FakeClock`: time moves only when the test says
  (`lw_clock.advance(seconds)`), so durable sleeps and timeouts run at once.

Nothing is imported until a test asks for a fixture: the plugin costs other test
suites nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


def _fake_clock_class() -> Any:
    from . import testing

    return getattr(testing, "FakeClock", None)


@pytest.fixture
def lw_clock() -> Any:
    """The FakeClock of this test's `lw_world` (`.now()`, `.advance(seconds)`)."""
    fake_clock = _fake_clock_class()
    if fake_clock is None:  # a little-workflow without durable time: no clock to fake
        return None
    return fake_clock()


@pytest.fixture
def lw_world(lw_clock: Any) -> Iterator[Any]:
    """A fresh in-memory World for this test (a `virtual_world` over a private
    `MemoryFileSystem`, data dir "/workflows"), closed afterwards."""
    from fsspec.implementations.memory import MemoryFileSystem

    from .world import virtual_world

    fs = MemoryFileSystem(skip_instance_cache=True, global_store=False)
    options = {} if lw_clock is None else {"clock": lw_clock}
    with virtual_world(fs, "/workflows", **options) as world:
        yield world
