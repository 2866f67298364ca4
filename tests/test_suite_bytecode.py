"""Under PYTHONDONTWRITEBYTECODE the suite still caches bytecode, outside the tree
(tests/conftest.py `keep_bytecode_out_of_the_tree`): otherwise every xdist worker rewrites
every test module's asserts again and every child process compiles little_workflow again."""

from __future__ import annotations

import os
import subprocess
import sys

from checkout import SRC

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What a test's child process sees, printed from inside a pytest session.
PROBE_TEST = '''
import os, subprocess, sys

def test_probe():
    child = subprocess.run([sys.executable, "-c",
                            "import sys; print(sys.dont_write_bytecode, sys.pycache_prefix)"],
                           capture_output=True, text=True, check=True)
    print("CHILD", child.stdout.strip(), "ENV", os.environ.get("PYTHONDONTWRITEBYTECODE"))
'''


def test_bytecode_goes_to_a_private_folder_under_the_temp_dir_not_the_tree(tmp_path):
    probe = tmp_path / "tests" / "test_zz_bytecode_probe.py"
    probe.parent.mkdir()
    probe.write_text(PROBE_TEST)
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
    env.update(PYTHONDONTWRITEBYTECODE="1", TMPDIR=str(temp),
               PYTHONPATH=os.pathsep.join([SRC, os.path.join(ROOT, "tests")]))
    # The repo's conftest loaded as a plugin (-p conftest) for a probe test outside the tree.
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "no:xdist",
         "--rootdir", ROOT, "-c", os.path.join(ROOT, "pyproject.toml"),
         "-p", "conftest", str(probe)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    prefix = temp / f"little-workflow-pycache-{os.getuid()}"
    assert f"CHILD False {prefix} ENV None" in r.stdout, r.stdout[-3000:]
    # The probe module's rewritten asserts are cached there, and nothing beside it.
    rewritten = list(prefix.rglob("test_zz_bytecode_probe*pytest*.pyc"))
    assert rewritten, sorted(str(p) for p in prefix.rglob("*.pyc"))[:20]
    assert not (probe.parent / "__pycache__").exists()
