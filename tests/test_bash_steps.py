"""Bash steps (just-bash) over views of the World's filesystem."""

from __future__ import annotations

import pytest
from conftest import private_memory
from fsspec.implementations.dirfs import DirFileSystem

import little_workflow as lw


@pytest.fixture(params=["memory", "local-file", "dirfs-memory", "local_world"])
def bw(request, tmp_path):
    if request.param == "memory":
        return lw.virtual_world(private_memory(), "/wf")
    if request.param == "local-file":
        return lw.virtual_world(f"file://{tmp_path}/vw")
    if request.param == "dirfs-memory":
        return lw.virtual_world(DirFileSystem(path="/base", fs=private_memory()), "/wf")
    return lw.local_world(str(tmp_path / "lw"))


def put(world, data, *parts):
    path = world.path(*parts)
    world.files.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    world.files.pipe_file(path, data)


def test_pipes_redirection_grep_sed_jq(bw):
    bw.memory("org").write_text("runbook.md", "step one\nstep two\nnot this\n")
    bw.memory("org").write_json("config.json", {"name": "owl", "size": 3})

    @lw.workflow(id="sh")
    async def wf(ctx, input):
        a = await ctx.bash("pipes", "grep step /memory/org/runbook.md | sed 's/step/STEP/' > out.txt; "
                                    "cat /scratch/out.txt | wc -l")
        b = await ctx.bash("jq", "jq -r .name /memory/org/config.json")
        assert b.stdout == b["stdout"] and b.exit_code == 0
        c = await ctx.bash("run", "echo shared > /run/shared.txt && cat /run/shared.txt")
        return [a, b, c]

    a, b, c = lw.run_workflow(wf, None, world=bw, run_id="run_sh").output
    assert a["exitCode"] == 0 and a["stdout"].strip() == "2", a
    assert b["stdout"] == "owl\n"
    assert c["stdout"] == "shared\n"
    out = bw.files.cat_file(bw.path("runs", "run_sh", "steps", "pipes", "scratch", "out.txt"))
    assert out == b"STEP one\nSTEP two\n"


def test_read_only_org_memory_and_no_escape(bw):
    bw.memory("org").write_text("policy.md", "original")

    @lw.workflow(id="ro")
    async def wf(ctx, input):
        w = await ctx.bash("write", "echo evil > /memory/org/policy.md")
        rm = await ctx.bash("rm", "rm /memory/org/policy.md")
        esc = await ctx.bash("escape", "cat /run/../../etc/passwd || cat /scratch/../../../../etc/hostname")
        ls = await ctx.bash("ls", "ls /; ls /memory")
        return [w, rm, esc, ls]

    w, rm, esc, ls = lw.run_workflow(wf, None, world=bw).output
    assert w["exitCode"] != 0 and "read-only" in w["stderr"].lower()
    assert rm["exitCode"] != 0
    assert bw.memory("org").read_text("policy.md") == "original"
    assert esc["exitCode"] != 0 and "root:" not in esc["stdout"]
    assert "No such file" in esc["stderr"] or "ENOENT" in esc["stderr"]
    listing = ls["stdout"].split()
    assert "memory" in listing and "run" in listing and "scratch" in listing
    assert "etc" not in listing and "root" not in listing


def test_user_mounts_single_file_and_read_only(bw):
    put(bw, b"hidden", "inputs", "secret.txt")
    put(bw, b"visible report", "inputs", "report.txt")
    put(bw, b"x,1\ny,2\n", "data", "a.csv")

    @lw.workflow(id="mounts")
    async def wf(ctx, input):
        return await ctx.bash("m", "cat /in/report.txt; ls /in; cat /in/secret.txt; "
                                   "cut -d, -f2 /data/a.csv; echo no > /data/b.csv",
                              mounts={"/in/report.txt": lw.file_mount("inputs/report.txt"),
                                      "/data": lw.read_only("data")})

    r = lw.run_workflow(wf, None, world=bw).output
    assert "visible report" in r["stdout"] and "hidden" not in r["stdout"]
    assert "secret" not in r["stdout"]
    assert "1\n2\n" in r["stdout"]
    assert r["exitCode"] != 0
    assert bw.publisher.read(bw.path("data", "b.csv")) is None


def test_bash_result_recorded_not_rerun_on_resume(bw):
    counter = {"n": 0}

    def crash_once():
        counter["n"] += 1
        if counter["n"] == 1:
            raise KeyboardInterrupt

    @lw.workflow(id="rec")
    async def wf(ctx, input):
        r = await ctx.bash("append", "echo line >> /run/log.txt; cat /run/log.txt | wc -l")
        await ctx.step("maybe-crash", crash_once)
        return r["stdout"].strip()

    with pytest.raises(KeyboardInterrupt):
        lw.run_workflow(wf, None, world=bw, run_id="run_rec")
    assert lw.run_workflow(wf, None, world=bw, run_id="run_rec").output == "1"
    assert bw.files.cat_file(bw.path("runs", "run_rec", "scratch", "log.txt")) == b"line\n"


def test_memory_writes_from_bash_are_journaled(bw):
    @lw.workflow(id="bmem")
    async def wf(ctx, input):
        return await ctx.bash("note", "echo learned > /memory/workflow/lesson.txt")

    lw.run_workflow(wf, None, world=bw, run_id="run_bmem")
    assert bw.memory("workflow", "bmem").read_text("lesson.txt") == "learned\n"
    written = [e.payload for e in bw.list_events("run_bmem") if e.type == "memory.written"]
    assert written and written[0]["path"] == "lesson.txt" and written[0]["stepPath"] == "note"


def test_limits_enforced(bw):
    @lw.workflow(id="limits")
    async def wf(ctx, input):
        return await ctx.bash("loop", "while true; do :; done", limits={"max_loop_iterations": 50})

    r = lw.run_workflow(wf, None, world=bw).output
    assert r["exitCode"] != 0


def test_skill_folders(bw, tmp_path):
    put(bw, b"# Summarize\nuse head\n", "skills-src", "summarize", "SKILL.md")

    @lw.workflow(id="skilled", skills={"summarize": "skills-src/summarize"})
    async def wf(ctx, input):
        return await ctx.bash("use", "head -1 /skills/summarize/SKILL.md; echo x > /skills/summarize/new")

    r = lw.run_workflow(wf, None, world=bw).output
    # (just-bash still prints a failed redirection's output to stdout; the exit code and
    # stderr say it failed, and nothing was written)
    assert r["stdout"].startswith("# Summarize\n") and r["exitCode"] != 0
    assert "read-only" in r["stderr"]
    assert bw.publisher.read(bw.path("skills-src", "summarize", "new")) is None
    host = tmp_path / "host-skill"
    host.mkdir()
    (host / "README").write_text("from the host\n")

    @lw.workflow(id="host-skilled", skills={"h": host})
    async def hw(ctx, input):
        return await ctx.bash("use", "cat /skills/h/README")

    if bw.kind == "local":
        assert lw.run_workflow(hw, None, world=bw).output["stdout"] == "from the host\n"
    else:
        with pytest.raises(lw.UnsupportedSourceError):
            lw.run_workflow(hw, None, world=bw, run_id="run_refused")
        assert bw.list_events("run_refused") == []

    @lw.workflow(id="remote-skilled", skills={"r": "https://example.invalid/skills/r"})
    async def rw(ctx, input):
        return 1

    if bw.kind != "local":
        with pytest.raises(lw.UnsupportedSourceError):
            lw.run_workflow(rw, None, world=bw, run_id="run_refused2")
        assert bw.list_runs() == [r for r in bw.list_runs() if r != "run_refused2"]


def test_without_the_bash_extra_the_error_names_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "just_bash", None)  # as if just-bash were not installed

    @lw.workflow(id="noextra")
    async def wf(ctx, input):
        return await ctx.bash("x", "echo hi")

    with pytest.raises(lw.WorkflowFailedError) as info:
        lw.run_workflow(wf, None, world=lw.virtual_world(private_memory(), "/wf"))
    assert isinstance(info.value.cause, lw.MissingExtraError)
    assert "little-workflow[bash]" in str(info.value.cause)
