"""The World's door is typed (issue 33 item 1): runtime, ops, ext and the CLI use a World
through `WorldLike` (world/protocol.py), `World` and `tracing_world` implement it, and
mypy holds every user to it. mypy over the package may not find more errors than the
baseline below: a file may lose errors, never gain them."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
import uuid
from collections import Counter

import pytest
from checkout import SRC
from mypy_scope import UNIMPORTED, config_file

import little_workflow as lw

# One worker at a time writes the shared mypy cache (tests/test_user_types.py uses it too):
# two mypy processes on one cache dir read each other's half-written entries.
pytestmark = pytest.mark.xdist_group("mypy-cache")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


#: mypy errors per file, as they were when the door was typed: each one a debt, none new.
BASELINE = {
    "little_workflow/world/append.py": 2,
    "little_workflow/world/models.py": 2,
}

#: Code outside world/ reaching past the door: each line must be an error.
BREACHES = '''
from little_workflow.world.protocol import WorldLike

def breaches(world: WorldLike) -> None:
    world.state
    world.events
    world.logs
    world.publisher
    world.artifacts
'''


def mypy_errors(*extra: str) -> list[str]:
    # A cache of its own: test_user_types runs mypy with other options on its cache.
    # Kept between runs (a cold run costs ~10 CPU-s) but one per checked folder: a cache
    # written for another checkout or layout serves that one's files and their errors.
    folder = hashlib.sha256(SRC.encode()).hexdigest()[:12]
    cache = os.path.join(tempfile.gettempdir(), f"little-workflow-mypy-cache-door-{folder}")
    os.makedirs(cache, exist_ok=True)
    # mypy checks the copy this process imports, with this checkout's settings.
    config = config_file(cache, project_settings=True)
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", config, "--cache-dir", cache,
         "--no-error-summary", "--show-absolute-path", "little_workflow", "fs_adapters", *extra],
        cwd=SRC, capture_output=True, text=True)
    assert "error: " in out.stdout or out.returncode == 0, out.stdout + out.stderr
    return [line for line in out.stdout.splitlines() if ": error: " in line]


def test_mypy_finds_no_more_errors_than_the_baseline_and_every_breach_of_the_door(tmp_path):
    # A module name of its own each time: mypy would serve a "breaches" module it has
    # cached (same text) without reporting its errors again.
    breach_file = tmp_path / f"breaches_{uuid.uuid4().hex}.py"
    breach_file.write_text(BREACHES)
    errors = mypy_errors(str(breach_file))
    in_breaches = [e for e in errors if e.startswith(str(breach_file))]
    reached = sorted(set(re.findall(r'has no attribute "(\w+)"', "\n".join(in_breaches))))
    assert reached == ["artifacts", "events", "logs", "publisher", "state"], in_breaches
    counts = Counter(os.path.relpath(e.split(":", 1)[0], SRC) for e in errors
                     if not e.startswith(str(breach_file)))
    grown = {f: (n, BASELINE.get(f, 0)) for f, n in counts.items() if n > BASELINE.get(f, 0)}
    assert not grown, "mypy errors above the baseline (found, allowed):\n" + "\n".join(
        f"{f}: {n}" for f, n in grown.items()) + "\n" + "\n".join(errors)


def test_a_tracing_world_opens_only_the_door(memory_world):
    """What is not on the door (the event store, the shared storage state, the ledgers)
    is not reachable through a tracing World either: it reads through what the door has
    and reports each call."""
    calls: list[str] = []
    traced = lw.tracing_world(memory_world, calls.append)
    for inside in ("state", "events", "logs", "publisher", "artifacts"):
        assert not hasattr(traced, inside), inside
    assert traced.storage_key == memory_world.storage_key
    assert traced.data_dir == memory_world.data_dir and traced.files is memory_world.files
    traced.append_event("run_door1", "t", {"n": 1})
    assert traced.log_size("run_door1") == memory_world.log_size("run_door1") > 0
    assert calls == ["append_event", "log_size"]


def test_the_tracing_world_answers_every_method_of_the_door(memory_world):
    """A World method added to the door and not to the tracing wrapper fails only where
    a traced World meets the new code (a queue worker under `little worker` did)."""
    import inspect

    from little_workflow.world.protocol import WorldLike

    traced = lw.tracing_world(memory_world, lambda *a: None)
    members = {name for cls in WorldLike.__mro__ if cls.__module__.startswith("little_workflow")
               for name, _ in inspect.getmembers(cls) if not name.startswith("_")}
    missing = sorted(name for name in members if not hasattr(traced, name))
    assert missing == []
    calls: list[str] = []
    traced = lw.tracing_world(memory_world, lambda name, *a: calls.append(name))
    slot = traced.take_slot("q-0", "queue q")
    assert slot is not None
    slot.release()
    assert traced.update_document("queues/q.json", lambda doc: {"n": 1}) == {"n": 1}
    assert calls == ["take_slot", "update_document"]


def test_the_package_imports_none_of_the_packages_the_mypy_checks_skip():
    """tests/mypy_scope.py lets mypy skip packages reached only through other packages:
    a module here importing one of them would be checked against Any."""
    import ast

    found = []
    for folder, _, files in os.walk(SRC):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path) as f:
                tree = ast.parse(f.read(), path)
            for node in ast.walk(tree):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                    [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
                found += [f"{os.path.relpath(path, SRC)}: {n}" for n in names
                          if n.split(".")[0] in UNIMPORTED]
    assert found == []
