"""What mypy says a value is, the program gets (DESIGN §16): for every kind of value the
codec keeps, `reveal_type` (mypy --strict) and the runtime `type()` agree — on the first
run, after a real SIGKILL and a resume in a new process, on replay, and when the stored
result of the completed run is returned again."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest
from checkout import SRC
from mypy_scope import config_file

# On the worker that runs tests/test_user_types.py: they share the session's strict mypy
# cache (conftest.strict_mypy_cache), built once.
pytestmark = pytest.mark.xdist_group("mypy-cache")

FLOW = '''
from __future__ import annotations

import dataclasses
import enum
import functools
import json
import os
import signal
import sys
import uuid
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any, Optional, Union, reveal_type

from pydantic import BaseModel, ConfigDict
from typing_extensions import TypedDict

import little_workflow as lw


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Order(BaseModel):
    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")
    item: str
    placed: datetime
    tags: set[str]
    blob: bytes


@dataclasses.dataclass
class Point:
    x: int
    y: float


class Movie(TypedDict):
    title: str
    year: int


class Approval(BaseModel):
    ok: bool
    at: datetime


AT = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone.utc)
ORDER = Order(item="tea", placed=AT, tags={"green", "black", "white"}, blob=b"\\x00\\xff")


def make_order() -> Order:
    return ORDER


def make_point() -> Point:
    return Point(1, 2.5)


def make_movie() -> Movie:
    return Movie(title="Alien", year=1979)


def make_pair() -> tuple[int, datetime]:
    return 1, AT


def make_when() -> datetime:
    return AT


def make_day() -> date:
    return date(2026, 2, 28)


def make_clock() -> time:
    return time(12, 30, 15, 250)


def make_span() -> timedelta:
    return timedelta(days=1, seconds=5)


def make_ident() -> uuid.UUID:
    return uuid.UUID(int=42)


def make_price() -> Decimal:
    return Decimal("1.10")


def make_color() -> Color:
    return Color.BLUE


def make_blob() -> bytes:
    return b"\\x00\\x01\\xfe\\xff"


def make_tags() -> set[str]:
    return {"pear", "apple", "fig"}


def make_frozen() -> frozenset[int]:
    return frozenset({3, 1, 2})


def make_maybe() -> Optional[Order]:
    return ORDER


def make_either() -> Union[Point, Color]:
    return Color.RED


async def make_nested() -> dict[str, list[tuple[Order, Color]]]:
    return {"k": [(ORDER, Color.RED)]}


def at_hour(day: int, hour: int) -> datetime:
    return datetime(2026, 3, day, hour, tzinfo=timezone.utc)


def crash() -> None:
    if os.environ.get("LW_TEST_CRASH") == "1":
        os.kill(os.getpid(), signal.SIGKILL)


def report(phase: str, seen: list[tuple[str, Any]]) -> None:
    with open(os.environ["LW_TEST_LEDGER"], "a") as f:
        for label, value in seen:
            t = type(value)
            f.write(json.dumps({"phase": phase, "label": label, "repr": repr(value),
                                "type": f"{t.__module__}.{t.__qualname__}"}) + "\\n")


@lw.workflow(id="types")
async def flow(ctx: lw.RunContext, input: Order) -> Order:
    order = await ctx.step("order", make_order)
    point = await ctx.step("point", make_point)
    movie = await ctx.step("movie", make_movie)
    pair = await ctx.step("pair", make_pair)
    when = await ctx.step("when", make_when)
    day = await ctx.step("day", make_day)
    clock = await ctx.step("clock", make_clock)
    span = await ctx.step("span", make_span)
    ident = await ctx.step("ident", make_ident)
    price = await ctx.step("price", make_price)
    color = await ctx.step("color", make_color)
    blob = await ctx.step("blob", make_blob)
    tags = await ctx.step("tags", make_tags)
    frozen = await ctx.step("frozen", make_frozen)
    maybe = await ctx.step("maybe", make_maybe)
    either = await ctx.step("either", make_either)
    nested = await ctx.step("nested", make_nested)
    hour = await ctx.step("hour", functools.partial(at_hour, 3), 4)
    many = await ctx.parallel("many", [functools.partial(at_hour, 1, 2), functools.partial(at_hour, 4, 5)])
    approval = await ctx.wait_for_event("approval", "approval", type=Approval)
    now = ctx.now()
    fresh = ctx.uuid()
    report(os.environ["LW_TEST_PHASE"], [
        ("input", reveal_type(input)),
        ("input.placed", reveal_type(input.placed)),
        ("order", reveal_type(order)),
        ("order.placed", reveal_type(order.placed)),
        ("order.tags", reveal_type(order.tags)),
        ("order.blob", reveal_type(order.blob)),
        ("point", reveal_type(point)),
        ("movie", reveal_type(movie)),
        ("pair", reveal_type(pair)),
        ("pair[1]", reveal_type(pair[1])),
        ("when", reveal_type(when)),
        ("day", reveal_type(day)),
        ("clock", reveal_type(clock)),
        ("span", reveal_type(span)),
        ("ident", reveal_type(ident)),
        ("price", reveal_type(price)),
        ("color", reveal_type(color)),
        ("blob", reveal_type(blob)),
        ("tags", reveal_type(tags)),
        ("frozen", reveal_type(frozen)),
        ("maybe", reveal_type(maybe)),
        ("either", reveal_type(either)),
        ("nested", reveal_type(nested)),
        ("nested-order", reveal_type(nested["k"][0][0])),
        ("nested-color", reveal_type(nested["k"][0][1])),
        ("hour", reveal_type(hour)),
        ("many", reveal_type(many)),
        ("many[1]", reveal_type(many[1])),
        ("approval", reveal_type(approval)),
        ("now", reveal_type(now)),
        ("fresh", reveal_type(fresh)),
    ])
    await ctx.step("crash", crash)
    return order


def main(phase: str, data_dir: str) -> None:
    os.environ["LW_TEST_PHASE"] = phase
    world = lw.local_world(data_dir)
    if phase == "first":
        lw.start_workflow(flow, ORDER, world=world, run_id="run_types")
        lw.send_event(world, "run_types", "approval", Approval(ok=True, at=AT))
    if phase == "replay":
        result = lw.replay_run(world, "run_types", flow)
    else:
        result = lw.run_workflow(flow, ORDER, world=world, run_id="run_types")
    report(phase + "-output", [("result.output", reveal_type(result.output))])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
'''


def mypy_reveals(tmp_path, cache_dir: str) -> dict[str, str]:
    """label -> what mypy --strict reveals for it."""
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", cache_dir,
                        "--config-file", config_file(str(tmp_path), project_settings=False),
                        "--follow-imports=silent", "typesflow.py"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "MYPYPATH": SRC})
    out = r.stdout.replace("builtins.", "")
    assert ": error:" not in out, out
    lines = FLOW.splitlines()
    reveals = {}
    for line in out.splitlines():
        m = re.match(r"typesflow\.py:(\d+): note: Revealed type is \"(.*)\"$", line)
        if m:
            source = lines[int(m.group(1)) - 1]
            label = re.search(r'\("([^"]+)", reveal_type', source).group(1)
            reveals[label] = m.group(2)
    return reveals


def runtime_types_for(revealed: str) -> set[str]:
    """The runtime type names a revealed mypy type allows: generics by their origin, a
    TypedDict as a dict, a union as any of its members."""
    names = set()
    for part in re.split(r" \| (?![^\[]*\])", revealed):
        if part.startswith("TypedDict("):
            names.add("dict")
        elif part != "None":
            names.add(part.split("[", 1)[0])
    return names


def run_phase(tmp_path, phase: str, crash: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{SRC}",
           "LW_TEST_LEDGER": str(tmp_path / "ledger.jsonl"), "PYTHONHASHSEED": "0",
           "LW_TEST_CRASH": "1" if crash else "0"}
    return subprocess.run([sys.executable, "-c", "import sys, typesflow; typesflow.main(*sys.argv[1:])",
                           phase, str(tmp_path / "data")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_reveal_type_and_runtime_type_agree_first_run_after_sigkill_and_on_replay(
        tmp_path, strict_mypy_cache):
    (tmp_path / "typesflow.py").write_text(textwrap.dedent(FLOW))
    reveals = mypy_reveals(tmp_path, strict_mypy_cache)
    assert len(reveals) == 32, reveals

    first = run_phase(tmp_path, "first", crash=True)
    assert first.returncode == -signal.SIGKILL, first.stderr
    for phase in ("resume", "replay", "stored"):
        r = run_phase(tmp_path, phase)
        assert r.returncode == 0, (phase, r.stderr)

    records = [json.loads(line) for line in (tmp_path / "ledger.jsonl").read_text().splitlines()]
    by_phase: dict[str, dict[str, dict[str, str]]] = {}
    for rec in records:
        by_phase.setdefault(rec["phase"], {})[rec["label"]] = rec
    assert set(by_phase) == {"first", "resume", "replay", "resume-output", "replay-output",
                             "stored-output"}, set(by_phase)
    for phase, seen in by_phase.items():
        for label, rec in seen.items():
            runtime = rec["type"].removeprefix("builtins.")
            assert runtime in runtime_types_for(reveals[label]), (phase, label, runtime, reveals[label])
    # and the values themselves are the same in every phase (one hash seed for all)
    for label in by_phase["first"]:
        assert {by_phase[p][label]["repr"] for p in ("first", "resume", "replay")} == \
            {by_phase["first"][label]["repr"]}, label
    outputs = {by_phase[p]["result.output"]["repr"] for p in ("resume-output", "replay-output",
                                                               "stored-output")}
    assert len(outputs) == 1 and by_phase["stored-output"]["result.output"]["type"] == "typesflow.Order"
    # Nothing ran twice: the resumed process served every step from the log.
    events = json.loads(subprocess.run(
        [sys.executable, "-m", "little_workflow.cli", "events", "run_types", "--json",
         "--data-dir", str(tmp_path / "data")], capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": SRC}).stdout)
    succeeded = [e["payload"]["stepPath"] for e in events if e["type"] == "step.succeeded"]
    assert len(succeeded) == len(set(succeeded)) == 21, succeeded
