"""Under xdist the longest tests are handed out first (conftest.slowest_first, from
tests/slowest.txt): a long test handed out last would set the run's wall clock alone."""

from __future__ import annotations

import os
import re

from conftest import SLOWEST_LIST, slowest_first

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_listed_tests_go_first_in_the_lists_order_and_the_rest_keep_theirs():
    nodeids = ["t/a.py::fast", "t/b.py::slow[s3]", "t/b.py::slow[azure]", "t/c.py::mid",
               "t/d.py::other", "t/e.py::grouped@chaos", "t/b.py::slowish[x]"]
    listed = ["t/b.py::slow[azure]", "t/c.py::mid", "t/b.py::slow", "t/e.py::grouped"]
    order = [nodeids[i] for i in slowest_first(nodeids, listed)]
    assert order == ["t/b.py::slow[azure]", "t/c.py::mid", "t/b.py::slow[s3]",
                     "t/e.py::grouped@chaos", "t/a.py::fast", "t/d.py::other",
                     "t/b.py::slowish[x]"]
    assert slowest_first(nodeids, []) == list(range(len(nodeids)))


def test_every_listed_test_exists():
    """A renamed or deleted test left in the list would silently lose its place."""
    with open(SLOWEST_LIST) as f:
        listed = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    assert len(listed) >= 10
    missing = []
    for entry in listed:
        path, name = entry.split("::", 1)
        name = name.split("[", 1)[0]
        full = os.path.join(ROOT, path)
        if not os.path.exists(full):
            missing.append(entry)
            continue
        with open(full) as f:
            source = f.read()
        if not re.search(rf"^(async )?def {re.escape(name)}\(", source, flags=re.M):
            missing.append(entry)
    assert missing == []
