"""LW_SOAK: the README's test command runs soak and torture tests short, `.ci/run` runs
them in full (tests/soak.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from checkout import SRC

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBE = ("import soak; "
         "print(soak.SOAK, soak.soak_size('LW_PROBE_TRIALS', short=3, full=40), "
         "soak.soak_size('LW_PROBE_SECONDS', short=1.5, full=30.0))")


def probe(**env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("LW_SOAK", "LW_PROBE_TRIALS")}
    r = subprocess.run([sys.executable, "-c", PROBE], env={**base, **env}, cwd=os.path.join(ROOT, "tests"),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_short_by_default_full_under_lw_soak_and_a_test_variable_wins():
    assert probe() == "False 3 1.5"
    assert probe(LW_SOAK="0") == "False 3 1.5"
    assert probe(LW_SOAK="1") == "True 40 30.0"
    assert probe(LW_SOAK="1", LW_PROBE_TRIALS="7") == "True 7 30.0"
    assert probe(LW_PROBE_TRIALS="7") == "False 7 1.5"


def test_ci_runs_the_long_forms():
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        script = f.read()
    setting = script.index('export LW_SOAK="${LW_SOAK:-1}"')
    assert setting < script.index("python -m pytest -q")


def test_pytest_says_which_size_it_runs():
    env = {k: v for k, v in os.environ.items() if k != "LW_SOAK"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co",
                        "tests/test_soak_switch.py"], cwd=ROOT, env={**env, "PYTHONPATH": SRC},
                       capture_output=True, text=True, timeout=120)
    assert "soak: short defaults (LW_SOAK=1" in r.stdout, r.stdout
