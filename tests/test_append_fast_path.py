"""The per-append fast paths keep their meaning: a one-row commit of local_world is one
INSERT statement in autocommit mode (after the first commit, which prefills the WAL inside
BEGIN IMMEDIATE), and frozen_json's cheap path for flat dicts freezes, validates and
collects artifact references exactly like the general path."""

from __future__ import annotations

import math

import pytest

import little_workflow as lw
from little_workflow.world.core import frozen_json
from little_workflow.world.models import FrozenDict, FrozenList


def test_a_serial_append_is_one_statement_after_the_first(tmp_path):
    world = lw.local_world(str(tmp_path / "data"))
    statements: list[str] = []
    world.events._conn.set_trace_callback(statements.append)
    world.append_event("run_fast", "a", {"n": 0})
    first = list(statements)
    assert any(s.startswith("BEGIN IMMEDIATE") for s in first), first  # prefill inside it
    statements.clear()
    world.append_event("run_fast", "b", {"n": 1})
    world.append_event("run_fast", "c", {"n": 2})
    assert [s.split()[0] for s in statements] == ["INSERT", "INSERT"], statements
    statements.clear()
    world.append_event("run_fast", "d", {"n": 3}, durable=False)
    world.append_event("run_fast", "e", {"n": 4})
    assert statements == ["PRAGMA synchronous=NORMAL", statements[1],
                          "PRAGMA synchronous=FULL", statements[3]], statements
    assert [e.type for e in world.list_events("run_fast")] == ["a", "b", "c", "d", "e"]
    assert world.events._conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    world.close()


REF = "artifact://art_0123456789abcdef"


@pytest.mark.parametrize("value", [
    {"a": 1, "b": "x", "c": None, "d": True, "e": 1.5, "f": [1, {"g": "h"}], "h": {}},
    FrozenDict({"k": FrozenList([1, 2])}),
    {REF: 1, "v": REF, "nested": {"w": [REF + "x"]}},
    {"s": type("S", (str,), {})("sub")},
])
def test_flat_dict_path_freezes_like_the_general_one(value):
    refs: set[str] = set()
    out = frozen_json(value, "payload", refs)
    assert out == value and isinstance(out, FrozenDict)
    with pytest.raises(TypeError):
        out["new"] = 1  # type: ignore[index]
    expected = {r for r in (REF, REF + "x") if r in repr(value)}
    assert refs == expected


@pytest.mark.parametrize("bad", [
    {1: "non-string key"},
    {"a": 1, 2: "non-string key after a good one"},
    {"x": math.nan},
    {"x": {"y": object()}},
    {"x": {1, 2}},
])
def test_flat_dict_path_rejects_what_is_not_json(bad):
    with pytest.raises(TypeError):
        frozen_json(bad, "payload", set())
