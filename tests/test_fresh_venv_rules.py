"""The README's test command is green on a fresh venv anywhere: a test needing a program
pip does not install (Azurite, strace, Chromium) is skipped with a reason naming it and how
to get it, never an error. Under CI (CI=true), the same missing program fails the test, so
CI cannot go green by skipping."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

from checkout import SRC

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One test per program, each needing only that program beyond pip's packages.
NEEDS = {
    "azurite-blob": "tests/test_azure_blob.py::test_a_missing_container_is_named",
    "strace": "tests/test_sqlite_durability.py::test_reopening_an_existing_data_dir_is_traced_durable_too",
    "chromium": "tests/test_inspect.py::test_failed_run_page_shows_the_error_and_the_failed_step",
}


def pytest_without_programs(tmp_path, *, ci: bool) -> str:
    """Those tests run by a machine where none of the programs is installed: PATH names
    one empty folder (the interpreter is called by its full path)."""
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(PATH=str(empty), PYTHONPATH=SRC)
    if ci:
        env["CI"] = "true"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *NEEDS.values()],
                       cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    return f"exit code {r.returncode}\n{r.stdout}{r.stderr}"


def test_a_missing_program_skips_the_test_with_its_name_and_how_to_get_it(tmp_path):
    out = pytest_without_programs(tmp_path, ci=False)
    assert out.startswith("exit code 0\n") and "3 skipped" in out, out[-3000:]
    for program in NEEDS:
        assert f"{program} is not installed" in out, (program, out[-3000:])
    assert out.count("`bash .ci/run`, which installs it") == 3, out[-3000:]


def test_under_ci_a_missing_program_fails_the_test(tmp_path):
    out = pytest_without_programs(tmp_path, ci=True)
    assert out.startswith("exit code 1\n") and "skipped" not in out, out[-3000:]
    for program in NEEDS:
        assert f"CI is set and {program} is not installed" in out, (program, out[-3000:])


def test_tests_look_programs_up_only_through_require_tool():
    """A new `shutil.which("strace")` in some test would bring back the error (or a silent
    skip under CI): every lookup of these programs goes through external_tools."""
    offenders = []
    for name in sorted(os.listdir(os.path.join(ROOT, "tests"))):
        if not name.endswith(".py") or name == "external_tools.py":
            continue
        with open(os.path.join(ROOT, "tests", name)) as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "which"):
                offenders.append(f"{name}:{node.lineno}")
    assert offenders == [], f"use external_tools.require_tool instead of shutil.which: {offenders}"


def test_child_processes_import_the_copy_under_test():
    """Since the src/ layout the checkout's root holds no package: a child process whose
    PYTHONPATH names the root silently imports the installed copy instead of the one under test (a
    helper's worktree, a PYTHONPATH the developer chose). Children get checkout.SRC."""
    import re

    wrong = re.compile(r"""PYTHONPATH["']?\s*[:=]\s*ROOT\b""")
    here = os.path.join(ROOT, "tests")
    found = [f"tests/{name}:{n}" for name in sorted(os.listdir(here)) if name.endswith(".py")
             for n, line in enumerate(open(os.path.join(here, name)), 1) if wrong.search(line)]
    assert not found, "a child process gets the checkout root, not SRC:\n" + "\n".join(found)
