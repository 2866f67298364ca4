"""A process that makes one catalogue change and is SIGKILLed at each of its catalogue
writes in turn: `python catalogue_cut_child.py TEMPLATE OUT ACTION`.

TEMPLATE is a local virtual world (a folder). The child counts the catalogue writes
(`replace`, `publish_if_absent`, `remove`, `remove_dir`, `ensure_dir` under
`catalogue/`) that ACTION makes on a copy, then for each k in 1..n copies TEMPLATE to
OUT/<k> and forks a process that performs ACTION there and is SIGKILLed by its own hook
at its k-th catalogue write. One interpreter start for all the kills: the forked
processes hold no threads but the main one. OUT/result.json says what happened.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from typing import Any, Callable

import little_workflow as lw

WRITES = ("replace", "publish_if_absent", "remove", "remove_dir", "ensure_dir")


def act(action: str, world: Any) -> None:
    def append(run_id: str, type_: str, payload: dict[str, Any]) -> None:
        world.append_event(run_id, type_, payload)

    actions: dict[str, Callable[[], None]] = {
        "create": lambda: append("run_new", "run.created", {"workflowId": "wf", "input": None,
                                                            "parentRunId": "run_x"}),
        "start": lambda: append("run_c", "run.started", {"start": 1}),
        "wait": lambda: append("run_x", "timer.scheduled",
                               {"stepPath": "nap", "wakeAt": "2030-01-01T00:00:00.000000Z"}),
        "resume": lambda: append("run_w", "timer.fired", {"stepPath": "nap"}),
        "complete": lambda: append("run_x", "run.completed", {"output": 1}),
        "fail": lambda: append("run_x", "run.failed", {"error": {"type": "E", "message": "x"}}),
        "cancel": lambda: append("run_w", "run.cancelled", {"reason": "stop"}),
    }
    actions[action]()


def arm(world: Any, kill_at: int) -> list[int]:
    """Count the World's catalogue writes; SIGKILL this process at the `kill_at`-th."""
    publisher = world.events.publisher
    count = [0]

    def wrap(name: str) -> None:
        real = getattr(publisher, name)

        def write(path: str, *args: Any, **kwargs: Any) -> Any:
            if "/catalogue/" in path:
                count[0] += 1
                if count[0] == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
            return real(path, *args, **kwargs)

        setattr(publisher, name, write)

    for name in WRITES:
        wrap(name)
    return count


def in_child(template: str, where: str, action: str, kill_at: int) -> int:
    """Fork: the child copies TEMPLATE to `where` and acts; returns its exit status."""
    shutil.copytree(template, where)
    pid = os.fork()
    if pid == 0:
        try:
            world = lw.virtual_world("file://" + where)
            count = arm(world, kill_at)
            act(action, world)
            with open(os.path.join(where, "writes"), "w") as f:
                f.write(str(count[0]))
            os._exit(0)
        except BaseException:  # noqa: BLE001 - a child must never return into the loop
            import traceback

            traceback.print_exc()
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    return status


def main(template: str, out: str, action: str) -> None:
    os.makedirs(out, exist_ok=True)
    status = in_child(template, os.path.join(out, "count"), action, 0)
    if status != 0:
        sys.exit(f"counting run failed: status {status}")
    with open(os.path.join(out, "count", "writes")) as f:
        total = int(f.read())
    killed = []
    for k in range(1, total + 1):
        status = in_child(template, os.path.join(out, str(k)), action, k)
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            killed.append(k)
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump({"writes": total, "killed": killed}, f)


if __name__ == "__main__":
    main(*sys.argv[1:4])
