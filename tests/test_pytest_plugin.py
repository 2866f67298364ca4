"""The pytest plugin (lw_world, lw_clock) and what an installed package gives a user's
project: pytest loads the plugin by its `pytest11` entry point, and mypy finds the types
after the README's editable install (`pip install -e .` into a fresh venv)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import site
import subprocess
import sys
import sysconfig
import textwrap

import pytest

pytest_plugins = ["pytester"]

# One worker runs this file under xdist (`--dist loadgroup`): the module-scoped venv with
# its editable install is then made once, not once per worker.
pytestmark = pytest.mark.xdist_group("plugin-venv")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def library_loaded_before_pytester() -> None:
    """pytester's in-process runs put `sys.modules` back as they found it: a
    little_workflow module first imported inside such a run is dropped afterwards while
    objects made from it live on, and the next import makes a second copy of its classes —
    a later test on this worker then fails an isinstance check ("… is not a workflow").
    Every module of the core is imported before (not the optional ext/ ones, nor
    `python -m`'s entry)."""
    import pkgutil

    import little_workflow

    for module in pkgutil.walk_packages(little_workflow.__path__, "little_workflow."):
        if not (module.name.startswith("little_workflow.ext.")
                or module.name.endswith(".__main__")):
            importlib.import_module(module.name)


def plugin_args() -> list[str]:
    """Nothing when the installed metadata has the `pytest11` entry point (pytest loads
    the plugin by itself, and `-p` would register it twice); otherwise load it by name
    (a checkout whose installed metadata predates the entry point)."""
    eps = importlib.metadata.entry_points(group="pytest11")
    if any(ep.value == "little_workflow.pytest_plugin" for ep in eps):
        return []
    return ["-p", "little_workflow.pytest_plugin"]


USER_TESTS = '''
    import little_workflow as lw
    from fsspec.implementations.memory import MemoryFileSystem

    SEEN = []

    @lw.workflow(id="double")
    async def double(ctx: lw.RunContext, input: dict) -> dict:
        return {"y": await ctx.step("d", lambda: input["x"] * 2)}

    def test_one(lw_world):
        SEEN.append(lw_world)
        result = lw.run_workflow(double, {"x": 2}, world=lw_world, run_id="run_same")
        assert result.output == {"y": 4} and lw_world.list_runs() == ["run_same"]

    def test_two_starts_fresh(lw_world):
        assert lw_world.list_runs() == []             # nothing left from test_one
        assert SEEN[0].closed and not lw_world.closed  # the last test's World was closed
        result = lw.run_workflow(double, {"x": 5}, world=lw_world, run_id="run_same")
        assert result.output == {"y": 10}              # the same id, a new run

    def test_private_filesystem(lw_world):
        lw.run_workflow(double, {"x": 1}, world=lw_world, run_id="run_p")
        assert not MemoryFileSystem().exists(lw_world.data_dir)  # not fsspec's shared store
        assert lw_world.kind != "local"
'''


def test_lw_world_is_fresh_private_and_closed_per_test(pytester):
    pytester.makepyfile(test_user=textwrap.dedent(USER_TESTS))
    result = pytester.runpytest(*plugin_args())
    result.assert_outcomes(passed=3)


def test_lw_clock_is_the_worlds_clock(pytester):
    pytester.makepyfile(test_clock=textwrap.dedent('''
        def test_clock(lw_world, lw_clock):
            if lw_clock is None:
                assert not hasattr(lw_world, "clock")  # a World without durable time
                return
            assert lw_world.clock is lw_clock
            before = lw_clock.now()
            lw_clock.advance(3600)
            assert lw_world.clock.now() == before + 3600
    '''))
    result = pytester.runpytest(*plugin_args())
    result.assert_outcomes(passed=1)


def test_the_readme_pytest_example_passes(pytester):
    with open(os.path.join(ROOT, "README.md")) as f:
        section = f.read().split("## Test workflows with pytest", 1)[1].split("\n## ", 1)[0]
    block = re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]
    assert len(block.strip().splitlines()) <= 12
    pytester.makepyfile(test_greet=block)
    result = pytester.runpytest(*plugin_args())
    result.assert_outcomes(passed=1)


# --- an editable install into a fresh venv, as the README does it --------------------------

def parent_site_dirs() -> list[str]:
    """Where the running interpreter finds its packages: its own (v)env's site-packages,
    plus the base ones when it is a `--system-site-packages` venv (and the user site)."""
    dirs = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for i, d in enumerate(dirs) if os.path.isdir(d) and d not in dirs[:i]]


def can_build_wheels() -> bool:
    """setuptools builds wheels by itself from 70.1 on; before that it needs `wheel`."""
    try:
        version = importlib.metadata.version("setuptools")
    except importlib.metadata.PackageNotFoundError:
        return False
    major, minor = (int(part) for part in re.findall(r"\d+", version)[:2])
    return (major, minor) >= (70, 1) or importlib.util.find_spec("wheel") is not None


@pytest.fixture(scope="module")
def venv_python(tmp_path_factory):
    """A fresh venv with an editable install of this checkout. It borrows the running
    interpreter's packages (pytest, fsspec, mypy...) through a .pth file naming its site
    directories: `--system-site-packages` would give the *base* interpreter's packages,
    which lack them when the tests themselves run in a venv. Nothing is downloaded."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    own_site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    # addsitedir, not a bare path: the parent's own .pth files (editable installs,
    # distutils shims) take effect too. Named to sort after the editable install's .pth,
    # so this checkout comes before any other install of little_workflow on sys.path.
    with open(os.path.join(own_site, "zz_parent_site.pth"), "w") as f:
        for d in parent_site_dirs():
            f.write(f"import site; site.addsitedir({d!r})\n")
    # The build backend comes from the parent's packages when they can build a wheel (the
    # dev extra asks for such a setuptools), offline; pip's isolated build would download
    # it. An environment installed before that falls back to the isolated build.
    offline = ["--no-index", "--no-build-isolation"] if can_build_wheels() else []
    r = subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", *offline, "-e", ROOT],
                       capture_output=True, text=True, env=user_env(), timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return py


def user_env() -> dict[str, str]:
    """A user's shell: no PYTHONPATH pointing into this checkout."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}


def test_the_installed_package_registers_the_plugin(venv_python, tmp_path):
    (tmp_path / "test_mine.py").write_text(textwrap.dedent('''
        import little_workflow as lw

        def test_fixture(lw_world):
            assert lw_world.list_runs() == []
            assert lw.__file__.startswith(%r)
    ''' % ROOT))
    r = subprocess.run([venv_python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_mine.py"],
                       cwd=tmp_path, capture_output=True, text=True, env=user_env(), timeout=300)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]


def test_the_editable_install_exposes_only_the_librarys_packages(venv_python, tmp_path):
    """Issue #32: `pip install -e .` put the checkout's root on sys.path, so its `tests`,
    `examples` and `benchmarks` were importable top-level packages in the user's venv."""
    probe = textwrap.dedent("""
        import importlib.util, json, os, sys
        import little_workflow, fs_adapters
        found = {}
        for name in ("tests", "examples", "benchmarks"):
            spec = importlib.util.find_spec(name)
            # A namespace package (tests/ has no __init__.py) has locations, no origin.
            if spec is None:
                found[name] = []
            elif spec.origin:
                found[name] = [spec.origin]
            else:
                found[name] = list(spec.submodule_search_locations)
        print(json.dumps({"path": [os.path.realpath(p) for p in sys.path if p],
                          "ours": [little_workflow.__file__, fs_adapters.__file__],
                          "others": found}))
    """)
    r = subprocess.run([venv_python, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                       env=user_env(), timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    seen = json.loads(r.stdout)
    root = os.path.realpath(ROOT)
    assert all(os.path.realpath(f).startswith(root + os.sep) for f in seen["ours"]), seen["ours"]
    # A same-named package from elsewhere in the environment is not ours to judge.
    from_here = {name: where for name, where in seen["others"].items()
                 if any(os.path.realpath(w).startswith(root + os.sep) for w in where)}
    assert from_here == {}, from_here
    assert root not in seen["path"], seen["path"]


def test_mypy_finds_little_workflows_types_after_the_readme_editable_install(venv_python, tmp_path):
    import mypy  # noqa: F401  (the dev extra installs it)

    (tmp_path / "user.py").write_text(textwrap.dedent("""
        import little_workflow as lw

        @lw.workflow(id="w")
        async def w(ctx: lw.RunContext, input: dict) -> dict:
            return {}

        result: lw.RunResult = lw.run_workflow(w, {}, world="memory://w")
        run_id: str = result.run_id
        wrong: int = result.run_id
    """))
    r = subprocess.run([venv_python, "-m", "mypy", "--no-incremental", "user.py"], cwd=tmp_path,
                       capture_output=True, text=True, env=user_env(), timeout=300)
    assert "import-not-found" not in r.stdout and "missing library stubs" not in r.stdout, r.stdout
    # mypy sees the real types: exactly the one deliberate mistake is reported.
    assert 'user.py:10: error: Incompatible types in assignment (expression has type "str"' in r.stdout, r.stdout
    assert "Found 1 error" in r.stdout, r.stdout
