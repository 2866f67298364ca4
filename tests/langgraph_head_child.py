"""Puts LangGraph checkpoints into one thread of a local-files virtual World
(tests/test_ext_langgraph_head.py).

python langgraph_head_child.py DIR THREAD N [KILL_AT]
puts N checkpoints, each the child of the last, into THREAD (namespace ""), printing each
id once its put returned; with KILL_AT, SIGKILLs itself just before its KILL_AT-th World
call that writes during the last put (a crash at a known moment of that put). With
HEAD_CHILD_GO set, waits for that file to exist before its first put (racing children
start together).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6

import little_workflow as lw
from little_workflow.ext.langgraph import WorldCheckpointSaver
from little_workflow.world.tracing import tracing_world

WRITES = {"write_file", "create_file", "update_document", "write_document",
          "create_document", "remove_file", "append_event"}


def main() -> None:
    where, thread, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    kill_at = int(sys.argv[4]) if len(sys.argv) > 4 else None
    armed = [False, 0]

    def on_call(name: str, *args: Any, **kwargs: Any) -> None:
        if armed[0] and name in WRITES:
            armed[1] += 1
            if armed[1] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    world = tracing_world(lw.virtual_world("file://" + where), on_call)
    saver = WorldCheckpointSaver(world)
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    go = os.environ.get("HEAD_CHILD_GO")
    while go and not os.path.exists(go):
        time.sleep(0.001)
    for i in range(n):
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=i))
        checkpoint["channel_values"] = {"i": i}
        checkpoint["channel_versions"] = {"i": i + 1}
        armed[0] = kill_at is not None and i == n - 1
        config = saver.put(config, checkpoint, {"source": "loop", "step": i, "parents": {}},
                           {"i": i + 1})
        print(config["configurable"]["checkpoint_id"], flush=True)


if __name__ == "__main__":
    main()
