"""benchmarks/run.py, the harness behind RESULTS.md: every row BENCHMARKS.md and the
issues name is run by one invocation, LW_BENCH_ONLY picks rows and leaves RESULTS.md
alone, and a row name it does not know is refused. Nothing here is timed."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "benchmarks", "run.py")
RESULTS = os.path.join(ROOT, "benchmarks", "RESULTS.md")

#: The rows RESULTS.md must have (issue 32: P1–P13, M1, M2).
REQUIRED = {f"P{i}" for i in range(1, 14)} | {"M1", "M2"}


def bench(tmp_path: object, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, RUN], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TMPDIR": str(tmp_path), **env})


def test_one_invocation_runs_every_row() -> None:
    with open(RUN) as f:
        source = f.read()
    dispatched = set(re.findall(r'wanted\("([A-Z0-9]+)"\)', source))
    assert REQUIRED <= dispatched, f"rows run.py never runs: {sorted(REQUIRED - dispatched)}"
    # LW_BENCH_ONLY accepts the names in ROWS: a row run.py runs must be one of them.
    rows = next(ast.literal_eval(node.value) for node in ast.parse(source).body
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "ROWS")
    assert set(rows) == dispatched


def test_memory_rows_run_alone_and_leave_results_alone(tmp_path: object) -> None:
    with open(RESULTS, "rb") as f:
        before = f.read()
    done = bench(tmp_path, LW_BENCH_ONLY="M1,M2", LW_BENCH_M_STEPS="200")
    assert done.returncode == 0, done.stderr
    m1 = re.search(r"M1 memory virtual_world, 200 steps: .*: ([\d.]+) MB for ([\d.]+) MB of "
                   r"JSON \(([\d,]+) events\) ([\d.]+)×", done.stdout)
    assert m1, done.stdout
    assert int(m1.group(3).replace(",", "")) > 400  # 200 steps: at least two events each
    assert float(m1.group(4)) > 0
    m2 = re.search(r"M2 local_world: peak Python allocation during a run, 200 steps / 20 "
                   r"steps: ([\d.]+) MB vs ([\d.]+) MB peak", done.stdout)
    assert m2, done.stdout
    assert float(m2.group(1)) > 0 and float(m2.group(2)) > 0
    assert "RESULTS.md left as it was" in done.stdout
    with open(RESULTS, "rb") as f:
        assert f.read() == before


def test_an_unknown_row_is_refused_in_one_line(tmp_path: object) -> None:
    done = bench(tmp_path, LW_BENCH_ONLY="M1,P99")
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "P99" in lines[0] and "M1" in lines[0], done.stderr
