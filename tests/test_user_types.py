"""What mypy tells a user about their workflow code: `ctx.step` returns what the step
function returns (awaited for an async one) and checks its arguments, `ctx.now()` is a
datetime, `RunResult.status` a Literal."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from checkout import SRC
from mypy_scope import config_file

# One worker runs this file under xdist (`--dist loadgroup`): the session's strict mypy
# cache (conftest.strict_mypy_cache) is then built once, not once per worker.
pytestmark = pytest.mark.xdist_group("mypy-cache")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

USER = '''
import datetime
import little_workflow as lw


def fetch(n: int, label: str = "x") -> list[int]:
    return list(range(n))


async def summarize(numbers: list[int]) -> dict[str, int]:
    return {"sum": sum(numbers)}


@lw.workflow(id="typed")
async def typed(ctx: lw.RunContext, input: dict[str, int]) -> dict[str, int]:
    numbers = await ctx.step("fetch", fetch, input["n"])
    reveal_type(numbers)
    summary = await ctx.step("sum", summarize, numbers)
    reveal_type(summary)
    when = ctx.now()
    reveal_type(when)
    first = await ctx.step("first", lambda: numbers[0])
    reveal_type(first)
    await ctx.step("bad", fetch, "three")
    return summary


result = lw.run_workflow(typed, {"n": 3}, world="memory://typed")
reveal_type(result.status)
'''


def test_mypy_sees_step_results_arguments_now_and_status(tmp_path, mypy_cache):
    (tmp_path / "user.py").write_text(textwrap.dedent(USER))
    out = _mypy(tmp_path, mypy_cache, "user.py")
    assert 'Revealed type is "list[int]"' in out, out
    assert 'Revealed type is "dict[str, int]"' in out, out
    assert 'Revealed type is "datetime.datetime"' in out, out
    assert 'Revealed type is "int"' in out, out
    status = out.split("user.py:29: note: Revealed type is ", 1)[1].splitlines()[0]
    assert all(f"'{s}'" in status for s in ("completed", "failed", "waiting")), status
    assert "Literal" in status and "str" not in status.replace("'", " ").split(), status
    bad = [line for line in out.splitlines() if "user.py:24: error" in line]
    # fetch takes an int first; "three" is a str: the call is refused.
    assert bad and "Callable[[int, str], list[int]]" in bad[0] and "Callable[[str]" in bad[0], out
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1, out  # only the deliberate mistake


@pytest.fixture
def mypy_cache(strict_mypy_cache):
    return strict_mypy_cache


def _mypy(tmp_path, cache_dir: str, *files: str) -> str:
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--cache-dir", cache_dir,
                        "--config-file", config_file(str(tmp_path), project_settings=False),
                        "--follow-imports=silent", *files], cwd=tmp_path, capture_output=True,
                       text=True, timeout=600, env={**os.environ, "MYPYPATH": SRC})
    return r.stdout.replace("builtins.", "")  # mypy before 2.0 spelled builtins out


GENERIC = '''
import functools
from typing import TypedDict

import little_workflow as lw
from pydantic import BaseModel


class Order(TypedDict):
    item: str
    qty: int


class Receipt(BaseModel):
    total: int


async def price(qty: int) -> int:
    return qty * 3


@lw.workflow(id="order")
async def order(ctx: lw.RunContext, input: Order) -> list[int]:
    prices = await ctx.parallel("p", [lambda: input["qty"], lambda: 2])
    reveal_type(prices)
    costs = await ctx.parallel("c", [functools.partial(price, q) for q in (1, 2)])
    reveal_type(costs)
    reveal_type(ctx.uuid())
    reveal_type(await ctx.wait_for_event("w", "go", timeout=1))
    reveal_type(await ctx.wait_for_event("t", "go", type=Receipt))
    reveal_type((await ctx.bash("b", "echo hi")).stdout)
    return prices + costs


@lw.workflow(id="receipt")
async def receipt(ctx: lw.RunContext, input: int) -> Receipt:
    return Receipt(total=input)


reveal_type(order)
reveal_type(receipt)
# (mypy infers a TypedDict from a call, not from an inline dict literal, here.)
result = lw.run_workflow(order, Order(item="tea", qty=2), world="memory://t")
reveal_type(result)
reveal_type(result.output)
reveal_type(lw.run_workflow(receipt, 3).output)
reveal_type(lw.replay_run(lw.virtual_world("memory://w"), "run_x", order).output)
lw.run_workflow(order, "tea")
lw.run_workflow(receipt, "three")
lw.start_workflow(receipt, "three")
'''


def test_mypy_sees_workflow_input_and_output_types(tmp_path, mypy_cache):
    (tmp_path / "user.py").write_text(GENERIC)
    out = _mypy(tmp_path, mypy_cache, "user.py")
    notes = {int(line.split(":")[1]): line.split("Revealed type is ", 1)[1].strip('"')
             for line in out.splitlines() if "Revealed type is" in line}
    lines = GENERIC.splitlines()

    def revealed(code: str) -> str:
        return notes[next(i for i, line in enumerate(lines, 1) if f"reveal_type({code})" in line)]

    assert revealed("prices") == "list[int]", out
    assert revealed("costs") == "list[int]", out  # awaited: not a list of coroutines
    assert revealed("ctx.uuid()") == "uuid.UUID", out
    assert revealed('await ctx.wait_for_event("w", "go", timeout=1)') in ("Any | None",
                                                                         "Union[Any, None]"), out
    assert revealed('(await ctx.bash("b", "echo hi")).stdout') == "str", out
    assert revealed("order").endswith("Workflow[TypedDict(user.Order, {'item': str, 'qty': int}), list[int]]"), out
    assert revealed('await ctx.wait_for_event("t", "go", type=Receipt)') == "user.Receipt | None", out
    # Values keep their types (DESIGN §16): a workflow returning a model gives the model.
    assert revealed("receipt").endswith("Workflow[int, user.Receipt]"), out
    assert revealed("result").endswith("RunResult[list[int]]"), out
    assert revealed("result.output") == "list[int]", out
    assert revealed("lw.run_workflow(receipt, 3).output") == "user.Receipt", out
    assert revealed('lw.replay_run(lw.virtual_world("memory://w"), "run_x", order).output') == "list[int]", out
    errors = {int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line}
    wrong = {i for i, line in enumerate(lines, 1)
             if line.startswith(("lw.run_workflow(order, \"", "lw.run_workflow(receipt, \"",
                                     "lw.start_workflow(receipt"))}
    assert errors == wrong and len(wrong) == 3, out  # a str for an Order or an int: refused


def test_mypy_strict_passes_on_every_readme_python_block(tmp_path, mypy_cache):
    """Each ```python block of the README, as a user would copy it into a file (the
    extras the `# needs the extra:` blocks name are installed here)."""
    import re

    with open(os.path.join(ROOT, "README.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
    assert len(blocks) >= 6
    names = []
    for i, block in enumerate(blocks):
        (tmp_path / f"readme_{i}.py").write_text(block)
        names.append(f"readme_{i}.py")
    out = _mypy(tmp_path, mypy_cache, *names)
    assert f"Success: no issues found in {len(blocks)} source files" in out, out
