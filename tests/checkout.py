"""Where the code under test lives. ROOT is this checkout (README, examples, tests);
SRC is the directory holding the little_workflow this process imported — the editable
install's src/, or whatever PYTHONPATH named first — and is what a child process gets on
its PYTHONPATH, so it imports the same copy as the test that starts it."""

from __future__ import annotations

import os
import signal

import little_workflow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
SRC = os.path.dirname(os.path.dirname(os.path.abspath(little_workflow.__file__)))


def as_from_a_terminal() -> None:
    """`preexec_fn` for a child that a test sends Ctrl-C: SIGINT back to its default, as
    in a user's terminal. A test run started as a background job (`pytest ... &` in a
    script) inherits SIGINT *ignored*, as `nohup` does, and passes that on to every child;
    a Python started that way rightly ignores Ctrl-C, and the test would see a run that
    finished instead of one that was interrupted."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
