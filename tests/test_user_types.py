"""What mypy tells a user about their workflow code: `ctx.step` returns what the step
function returns (awaited for an async one) and checks its arguments, `ctx.now()` is a
datetime, `RunResult.status` a Literal."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

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


def test_mypy_sees_step_results_arguments_now_and_status(tmp_path):
    (tmp_path / "user.py").write_text(textwrap.dedent(USER))
    r = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental",
                        "--follow-imports=silent", "user.py"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=600, env={**os.environ, "MYPYPATH": ROOT})
    out = r.stdout.replace("builtins.", "")  # mypy before 2.0 spelled builtins out
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
