"""Soak and torture tests have two sizes: a short default, so that the README's
`python -m pytest -q` stays within about ten minutes on 2 cores, and the long form under
`LW_SOAK=1`, which `.ci/run` sets (CI has 30 minutes).

The short form is the same test with less repetition — fewer trials, fewer runs, fewer
seconds of chaos — never fewer checks or mechanisms: the same real processes, SIGKILLs,
races and history checks run, and the amount kept is one that was seen to fail on the bug
the test was written for (each test says which). A test-specific variable
(`LW_TORTURE_TRIALS`...) still overrides both sizes.

    from soak import SOAK, soak_size

    TRIALS = soak_size("LW_TORTURE_TRIALS", short=5, full=20)

    @only_in_soak            # a long variant whose short form runs by default
    def test_...
"""

from __future__ import annotations

import os
from typing import TypeVar

import pytest

Number = TypeVar("Number", int, float)

#: Run soak and torture tests in their long form.
SOAK = os.environ.get("LW_SOAK", "").strip().lower() not in ("", "0", "false", "no")


def soak_size(variable: str, *, short: Number, full: Number) -> Number:
    """`$variable` when set, else `full` under LW_SOAK=1, else `short`."""
    given = os.environ.get(variable, "").strip()
    if given:
        return type(full)(given)
    return full if SOAK else short


#: For a long variant of a test whose short form runs by default: skipped without
#: LW_SOAK=1, with a reason saying how to run it.
only_in_soak = pytest.mark.skipif(
    not SOAK, reason="a long variant: LW_SOAK=1 runs it (.ci/run sets it); its short form runs by default")


def describe() -> str:
    """One line for pytest's header: which size this session runs."""
    if SOAK:
        return "soak: LW_SOAK=1, soak and torture tests run in full"
    return "soak: short defaults (LW_SOAK=1 runs soak and torture tests in full, as .ci/run does)"
