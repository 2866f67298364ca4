"""Where the code under test lives. ROOT is this checkout (README, examples, tests);
SRC is the directory holding the little_workflow this process imported — the editable
install's src/, or whatever PYTHONPATH named first — and is what a child process gets on
its PYTHONPATH, so it imports the same copy as the test that starts it."""

from __future__ import annotations

import os

import little_workflow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
SRC = os.path.dirname(os.path.dirname(os.path.abspath(little_workflow.__file__)))
