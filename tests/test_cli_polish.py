"""The CLI and API as a newcomer meets them: every rough edge found by trying the README on
a fresh machine, driven as a user would (subprocesses, a real SIGINT, a real venv)."""

from __future__ import annotations

import json
import os
import pydoc
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
import tomllib

import pytest
from checkout import SRC, as_from_a_terminal

import little_workflow as lw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FLOWS = textwrap.dedent('''
    import os
    import time

    import little_workflow as lw


    def note(name: str) -> str:
        with open("calls.txt", "a") as f:
            f.write(name + "\\n")
        return name


    def slow(i: int) -> int:
        note(f"slow{i}")
        time.sleep(0.3)
        return i


    def boom() -> None:
        raise ValueError("the sensor is unplugged")


    @lw.workflow(id="squares")
    async def squares(ctx: lw.RunContext, input: dict) -> dict:
        return {"sum": sum([await ctx.step(f"sq{x}", lambda x=x: x * x) for x in range(input["n"])])}


    @lw.workflow(id="breaks")
    async def breaks(ctx: lw.RunContext, input: dict) -> dict:
        await ctx.step("fine", note, "fine")
        await ctx.step("sensor", boom, retry=lw.Retry(max_attempts=1))
        return {}


    @lw.workflow(id="slowly")
    async def slowly(ctx: lw.RunContext, input: dict) -> dict:
        return {"sum": sum([await ctx.step(f"s{i}", slow, i) for i in range(input["n"])])}
''')


def little(*args: str, cwd: object, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**(os.environ if env is None else env), "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "little_workflow.cli", *args], cwd=str(cwd),
                          capture_output=True, text=True, env=env, timeout=timeout)


def one_line_error(r: subprocess.CompletedProcess, *needles: str) -> str:
    assert r.returncode not in (0, None), r.stdout
    assert "Traceback" not in r.stderr + r.stdout, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def proj(tmp_path):
    """A user's project directory with a module of workflows in it."""
    (tmp_path / "flows.py").write_text(FLOWS)
    return tmp_path


# --- README -------------------------------------------------------------------------------

def _readme() -> str:
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def test_readme_python_examples_run_after_the_first_setup_command_alone(tmp_path):
    """Every package of an extra the README's first command does not install is made
    unimportable; the README's Python blocks must still run."""
    first = re.findall(r"```bash\n(.*?)```", _readme(), flags=re.S)[0].splitlines()[0]
    m = re.search(r"pip install -e (\S+)", first)
    assert m, first
    asked = re.findall(r"\[(.*)\]", m.group(1).strip("'\""))
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]

    def closure(names: list[str]) -> set[str]:
        out: set[str] = set()
        for name in names:
            out.add(name)
            for req in extras.get(name, []):
                inner = re.match(r"little-workflow\[(.*)\]", req)
                if inner:
                    out |= closure(inner.group(1).split(","))
        return out

    installed = closure([x.strip() for x in asked[0].split(",")] if asked else [])
    installed_pkgs = {re.split(r"[<>=\[ ;]", r)[0] for e in installed for r in extras[e]}
    blocked = sorted({re.split(r"[<>=\[ ;]", r)[0].replace("-", "_")
                      for e, reqs in extras.items() if e not in installed for r in reqs
                      if re.split(r"[<>=\[ ;]", r)[0] not in installed_pkgs}
                     - {"little_workflow", "setuptools"})
    assert "just_bash" in blocked or "bash" in installed
    script = textwrap.dedent(f"""
        import re, sys
        for name in {blocked!r}:
            sys.modules[name] = None  # as if never installed
        text = open({os.path.join(ROOT, "README.md")!r}).read()
        for block in re.findall(r"```python\\n(.*?)```", text, flags=re.S):
            # A block that names the extra it needs runs only where that extra is.
            needs = re.match(r'# needs the extra: pip install -e "\\.\\[([a-z-]+)\\]"', block)
            if needs and needs.group(1) not in {sorted(installed)!r}:
                continue
            exec(compile(block, "README.md", "exec"), {{"__name__": "readme"}})
        print("all blocks ran")
    """)
    r = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": SRC}, timeout=120)
    assert r.returncode == 0 and "all blocks ran" in r.stdout, r.stderr[-2000:]


# --- little, little runs ------------------------------------------------------------------

def test_bare_little_prints_help_and_exits_0(tmp_path):
    r = little(cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Usage: little" in r.stdout and "runs" in r.stdout and "error" not in r.stderr
    assert not os.listdir(tmp_path)


def test_runs_newest_first_full_ids_status_workflow_started_duration(proj, monkeypatch):
    monkeypatch.chdir(proj)  # the steps note their calls in the current directory
    world = lw.local_world(str(proj / "d"))
    sys.path.insert(0, str(proj))
    # Another test file may have imported its own `flows` in this process (xdist workers
    # run files in any order): this test's module must be this project's.
    sys.modules.pop("flows", None)
    try:
        import flows  # noqa: F401  (the user's module)
    finally:
        sys.path.remove(str(proj))
    ids = ["run_" + "a" * 76, "run_" + "b" * 60, "run_c"]
    for run_id in ids:
        lw.run_workflow(flows.squares, {"n": 3}, world=world, run_id=run_id)
        time.sleep(0.05)
    with pytest.raises(lw.WorkflowFailedError):
        lw.run_workflow(flows.breaks, {}, world=world, run_id="run_d")
    world.close()
    newest_first = ["run_d", *reversed(ids)]
    r = little("--data-dir", "d", "runs", cwd=proj)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    header = next(line for line in lines if "run id" in line)
    for col in ("status", "workflow", "started", "duration"):
        assert col in header, header
    rows = [line for line in lines if line.split() and line.split()[0].startswith("run_")]
    assert [row.split()[0] for row in rows] == newest_first  # whole ids, one line each
    assert rows[0].split()[1:3] == ["failed", "breaks"]
    assert rows[1].split()[1:3] == ["completed", "squares"]
    r = little("--data-dir", "d", "runs", "--json", cwd=proj)
    listed = json.loads(r.stdout)
    assert [x["runId"] for x in listed] == newest_first
    assert all(x["startedAt"] and x["durationSeconds"] >= 0 for x in listed)
    assert listed[0]["startedAt"] > listed[-1]["startedAt"]


# --- little run ---------------------------------------------------------------------------

def test_run_prints_the_generated_id_when_it_starts(proj):
    r = little("--data-dir", "d", "run", "flows:squares", "--input", '{"n": 3}', "--json", cwd=proj)
    assert r.returncode == 0, r.stderr
    run_id = json.loads(r.stdout)["runId"]
    assert f"started run {run_id}" in r.stderr
    # The same id again: the stored result, and the CLI says so.
    r = little("--data-dir", "d", "run", "flows:squares", "--input", '{"n": 3}', "--run-id", run_id, cwd=proj)
    assert r.returncode == 0 and "stored result" in r.stderr and "started" not in r.stderr


def test_ctrl_c_prints_the_run_id_and_how_to_resume(proj):
    env = {**os.environ, "PYTHONPATH": SRC}
    p = subprocess.Popen([sys.executable, "-m", "little_workflow.cli", "--data-dir", "d", "run",
                          "flows:slowly", "--input", '{"n": 8}'], cwd=proj, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=as_from_a_terminal)
    calls = proj / "calls.txt"
    deadline = time.monotonic() + 60
    while not (calls.exists() and len(calls.read_text().split()) >= 3):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, (out, err)
    assert "Traceback" not in err + out, err
    run_id = re.search(r"started run (run_\w+)", err).group(1)
    resume = [line for line in err.splitlines() if "--run-id " + run_id in line]
    assert resume and "interrupted" in err, err
    cmd = shlex.split(resume[0][resume[0].index("little "):])
    assert cmd[:4] == ["little", "run", "flows:slowly", "--run-id"] and "--data-dir" in cmd
    before = calls.read_text().split()
    r = little(*cmd[1:], cwd=proj)
    assert r.returncode == 0, r.stderr
    assert f"resuming run {run_id}" in r.stderr
    assert '"sum": 28' in r.stdout
    again = calls.read_text().split()[len(before):]
    assert set(again).isdisjoint(before[:-1]), (before, again)  # done steps were not called again


def test_a_failed_run_shows_its_error_everywhere(proj):
    r = little("--data-dir", "d", "run", "flows:breaks", "--run-id", "run_f", "--json", cwd=proj)
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert (out["runId"], out["status"]) == ("run_f", "failed")
    assert "the sensor is unplugged" in out["error"]["message"]
    r = little("--data-dir", "d", "events", "run_f", cwd=proj)
    assert r.returncode == 0 and "the sensor is unplugged" in r.stdout, r.stdout
    r = little("--data-dir", "d", "replay", "run_f", cwd=proj)
    assert r.returncode == 0 and "the sensor is unplugged" in r.stdout, r.stdout
    assert "failed" in r.stdout
    # Running it again is the stored result, not a new attempt; fork is the way forward.
    r = little("--data-dir", "d", "run", "flows:breaks", "--run-id", "run_f", cwd=proj)
    # The run's stored traceback (where boom raised), never one of the CLI's own.
    assert r.returncode == 1 and r.stderr.count("Traceback") == 2, r.stderr  # boom's, then the step's
    assert "in boom" in r.stderr and "cli.py" not in r.stderr, r.stderr
    assert "the sensor is unplugged" in r.stderr and "stored result" in r.stderr
    assert "little fork run_f" in r.stderr
    assert (proj / "calls.txt").read_text().split() == ["fine"]


def test_run_a_file_path(proj):
    (proj / "sub").mkdir()
    (proj / "sub" / "helper.py").write_text("N = 4\n")
    (proj / "sub" / "my flows.py").write_text(
        "import helper\n" + FLOWS.replace('input["n"]', "helper.N"))
    r = little("--data-dir", "d", "run", "./sub/my flows.py:squares", "--json", cwd=proj)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["output"] == {"sum": 14}
    r = little("--data-dir", "d", "run", str(proj / "sub" / "my flows.py") + ":squares", cwd=proj)
    assert r.returncode == 0, r.stderr
    one_line_error(little("run", "./sub/nope.py:squares", cwd=proj), "nope.py")


def test_a_module_that_fails_to_import_is_one_line(proj):
    (proj / "broken.py").write_text("import little_workflow\n\nx = 1 +\n")
    one_line_error(little("run", "broken:wf", cwd=proj), "broken", "SyntaxError")
    (proj / "raises.py").write_text("import os\n\nos.environ['NOPE_NOT_SET']\n")
    one_line_error(little("run", "raises:wf", cwd=proj), "raises", "KeyError", "NOPE_NOT_SET")
    one_line_error(little("run", "./raises.py:wf", cwd=proj), "raises.py", "KeyError")


def test_s3_url_without_credentials_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {"AWS_EC2_METADATA_DISABLED": "true", "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
            "AWS_CONFIG_FILE": str(tmp_path / "none")}
    r = little("--world", "s3://no-such-bucket-lw/wf", "runs", cwd=tmp_path, env=env)
    line = one_line_error(r, "s3://no-such-bucket-lw/wf")
    assert "credentials" in line.lower(), line


# --- read-only commands and worlds ---------------------------------------------------------

def test_artifacts_of_an_unknown_run_is_an_error(proj):
    assert little("--data-dir", "d", "run", "flows:squares", "--input", '{"n": 1}', cwd=proj).returncode == 0
    one_line_error(little("--data-dir", "d", "artifacts", "run_nope", cwd=proj), "run_nope")


@pytest.mark.parametrize("args", [
    ["runs"], ["events", "run_x"], ["replay", "run_x"], ["artifacts", "run_x"], ["verify"],
    ["inspect", "run_x", "--html", "out.html"],
])
def test_read_only_commands_never_create_a_data_dir(tmp_path, args):
    r = little("--data-dir", "typo", *args, cwd=tmp_path)
    one_line_error(r, "no data dir at", str(tmp_path / "typo"))
    r = little("--world", f"file://{tmp_path}/typo2", *args, cwd=tmp_path)
    one_line_error(r, str(tmp_path / "typo2"))
    r = little(*args, cwd=tmp_path)  # the default data dir
    one_line_error(r, ".little-workflow")
    assert os.listdir(tmp_path) == []


def test_an_existing_data_dir_with_no_runs_still_lists_nothing(tmp_path):
    lw.local_world(str(tmp_path / "d")).close()
    r = little("--data-dir", "d", "runs", "--json", cwd=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout) == []


def test_memory_world_in_the_cli_says_it_does_not_outlive_the_process(proj):
    r = little("--world", "memory://x", "run", "flows:squares", "--input", '{"n": 2}', cwd=proj)
    assert r.returncode == 0, r.stderr
    notes = [line for line in r.stderr.splitlines() if "memory://x" in line]
    assert len(notes) == 1 and "process" in notes[0], r.stderr
    r = little("--world", "memory://x", "runs", cwd=proj)
    assert len([line for line in r.stderr.splitlines() if "memory://x" in line]) == 1


def test_file_url_at_a_local_world_dir_suggests_data_dir(proj):
    assert little("--data-dir", "d", "run", "flows:squares", "--input", '{"n": 2}', cwd=proj).returncode == 0
    before = sorted(os.listdir(proj / "d"))
    for cmd in (["runs"], ["run", "flows:squares", "--input", '{"n": 2}']):
        line = one_line_error(little("--world", f"file://{proj}/d", *cmd, cwd=proj), "local_world")
        assert f"--data-dir {proj / 'd'}" in line, line
    assert sorted(os.listdir(proj / "d")) == before  # no virtual_world layout written into it


# --- docstrings and types -----------------------------------------------------------------

def test_help_of_the_public_objects_is_useful():
    text = pydoc.render_doc(lw.RunResult, renderer=pydoc.plaintext)
    for field in ("run_id", "status", "output", "workflow_id", "result_kind", "cycles"):
        assert re.search(rf"{field}\b.*\S", text.split("Method resolution order")[0]), field
    assert "completed" in text and "failed" in text.split("Method resolution order")[0]
    for fn in (lw.local_world, lw.virtual_world, lw.verify_world, lw.RunContext.bash):
        doc = fn.__doc__ or ""
        assert len(doc.split()) >= 25, (fn, doc)
    assert "data_dir" in lw.local_world.__doc__ and "close" in lw.local_world.__doc__
    assert "storage_options" in lw.virtual_world.__doc__
    assert "VerifyReport" in lw.verify_world.__doc__
    assert "exit_code" in lw.RunContext.bash.__doc__
