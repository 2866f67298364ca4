"""Child process of the cross-process lock tests on local files (DESIGN §15).

    python kernel_lock_child.py hold KIND ROOT RUN_ID        hold a run's lock until stdin closes
    python kernel_lock_child.py fence KIND ROOT LOOP_ID      hold an outer-loop fence the same way
    python kernel_lock_child.py race KINDS ROOT SYNC ME OTHER TRIALS
                                                             race OTHER for TRIALS runs per kind

KIND is `local-file` (fsspec `file://`), `dirfs-local` (a DirFileSystem over the local
disk) or `pyfs-osfs` (PyFilesystem2 OSFS); each keeps its World in ROOT/<kind>.

`race`: for each trial both processes meet at a barrier (files in SYNC), then run the
same run id. The winner's first step waits until the loser has reported how its attempt
ended, so the loser always tries while the winner executes; a step that waits 5 s in
vain (both executing: no lock across processes) ends the race after that trial. Every
step execution appends one line to ROOT/ledger (O_APPEND: whole lines from both).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import little_workflow as lw

KINDS = ("local-file", "dirfs-local", "pyfs-osfs")
STATE: dict[str, Any] = {}


def open_world(kind: str, root: str) -> Any:
    base = os.path.join(root, kind)
    os.makedirs(base, exist_ok=True)
    if kind == "local-file":
        return lw.virtual_world(f"file://{base}/wf")
    if kind == "dirfs-local":
        from fsspec.implementations.dirfs import DirFileSystem
        from fsspec.implementations.local import LocalFileSystem

        return lw.virtual_world(DirFileSystem(path=base, fs=LocalFileSystem()), "/wf")
    if kind == "pyfs-osfs":
        from fs.osfs import OSFS

        from fs_adapters.pyfilesystem import PyFilesystemFS

        return lw.virtual_world(PyFilesystemFS(OSFS(base)), "/wf")
    raise ValueError(kind)


def data_dir(kind: str, root: str) -> str:
    """Where a kind's World keeps its files on the local disk."""
    return os.path.join(root, kind, "wf")


def ledger_line(path: str) -> None:
    info = lw.current_step()
    line = f"{info.run_id} {path} {os.getpid()}\n".encode()
    fd = os.open(STATE["ledger"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def mark(name: str) -> None:
    with open(os.path.join(STATE["sync"], name + ".tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.replace(os.path.join(STATE["sync"], name + ".tmp"), os.path.join(STATE["sync"], name))


def seen(name: str) -> bool:
    return os.path.exists(os.path.join(STATE["sync"], name))


def wait_for(name: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not seen(name):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def first(trial: str) -> str:
    ledger_line("a")
    # Executing: hold the run until the other process has tried it and said how it went.
    if not wait_for(f"outcome-{trial}-{STATE['other']}", 5.0):
        STATE["timed_out"] = True
    return "a"


def then(path: str) -> str:
    ledger_line(path)
    return path


@lw.workflow(id="race")
async def race(ctx: lw.RunContext, input: dict[str, Any]) -> list[str]:
    return [await ctx.step("a", first, input["trial"]),
            await ctx.step("b", then, "b"),
            await ctx.step("c", then, "c")]


def run_race(kinds: list[str], root: str, sync: str, me: str, other: str, trials: int) -> None:
    STATE.update(ledger=os.path.join(root, "ledger"), sync=sync, other=other)
    worlds = {kind: open_world(kind, root) for kind in kinds}
    for kind in kinds:
        for t in range(trials):
            trial = f"{kind}-{t}"
            mark(f"ready-{trial}-{me}")
            if not wait_for(f"ready-{trial}-{other}", 60.0):
                print(json.dumps({"trial": trial, "outcome": "no-partner"}), flush=True)
                return
            run_id = f"run_race_{kind.replace('-', '_')}_{t:02d}"
            try:
                result = lw.run_workflow(race, {"trial": trial}, world=worlds[kind], run_id=run_id)
                outcome: dict[str, Any] = {"outcome": result.status}
            except lw.RunLockedError as e:
                outcome = {"outcome": "locked", "ownerPid": e.owner_pid, "message": str(e)}
            mark(f"outcome-{trial}-{me}")
            print(json.dumps({"trial": trial, "pid": os.getpid(), **outcome}), flush=True)
            if STATE.pop("timed_out", False):
                print(json.dumps({"trial": trial, "outcome": "both-executed"}), flush=True)
                return


def hold(kind: str, root: str, what: str, name: str) -> None:
    world = open_world(kind, root)
    lock = world.run_lock(name) if what == "hold" else world.fence_lock(name)
    with lock:
        print("HELD", os.getpid(), flush=True)
        sys.stdin.read()  # until the parent closes our stdin, or kills us


if __name__ == "__main__":
    action = sys.argv[1]
    if action in ("hold", "fence"):
        hold(sys.argv[2], sys.argv[3], action, sys.argv[4])
    elif action == "race":
        run_race(sys.argv[2].split(","), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6],
                 int(sys.argv[7]))
    else:
        raise SystemExit(f"unknown action {action}")
