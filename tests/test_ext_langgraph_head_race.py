"""Two processes begin one LangGraph thread on local files at once: the head pointer must
not hide a newer checkpoint when the thread's document is written last by the process
that began it with a pointer, after another process (which found the thread without a
document) put a newer checkpoint.

A writes its first checkpoint X (pointer moved to X, record written) and stops just before
it writes the thread's document; B then reads the head (X), puts Y on top and documents
the thread; A goes on and documents it too (`headPointer`). B took the thread for one
written without pointers, so it left the pointer at X: a cold `get_tuple` returned X while
Y was stored (a resumed graph would have gone back one step)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest
from checkout import SRC

pytest.importorskip("langgraph")

import little_workflow as lw  # noqa: E402
from little_workflow.ext.langgraph import WorldCheckpointSaver  # noqa: E402

CHILD = r'''
import os, sys, time
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
import little_workflow as lw
from little_workflow.ext.langgraph import WorldCheckpointSaver
from little_workflow.world.tracing import tracing_world

where, step, pause = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def on_call(name, args, kwargs):
    # The first process stops before it documents the thread, until told to go on.
    if pause and name == "write_document" and "threads" in str(args[0]):
        open(pause[0], "w").close()
        while not os.path.exists(pause[1]):
            time.sleep(0.005)

saver = WorldCheckpointSaver(tracing_world(lw.virtual_world("file://" + where), on_call))
config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
got = saver.get_tuple(config)
if got is not None:
    config = got.config
checkpoint = empty_checkpoint()
checkpoint["id"] = str(uuid6(clock_seq=step))
checkpoint["channel_values"] = {"i": step}
checkpoint["channel_versions"] = {"i": step + 1}
put = saver.put(config, checkpoint, {"source": "loop", "step": step, "parents": {}},
                {"i": step + 1})
print(put["configurable"]["checkpoint_id"], flush=True)
'''


def config() -> Any:
    return {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


def test_a_thread_begun_by_two_processes_at_once_has_the_newest_as_its_cold_head(tmp_path: Any) -> None:
    where = str(tmp_path / "w")
    paused, go = str(tmp_path / "paused"), str(tmp_path / "go")
    env = {**os.environ, "PYTHONPATH": SRC}
    first = subprocess.Popen([sys.executable, "-c", CHILD, where, "0", paused, go],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(paused):
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first process never reached its document"
            time.sleep(0.01)
        second = subprocess.run([sys.executable, "-c", CHILD, where, "1"], capture_output=True,
                                text=True, timeout=120, env=env)
        assert second.returncode == 0, second.stderr
    finally:
        open(go, "w").close()
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    x, y = out.strip(), second.stdout.strip()
    assert y > x
    cold = WorldCheckpointSaver(lw.virtual_world("file://" + where))
    listed = [t.config["configurable"]["checkpoint_id"] for t in cold.list(config())]
    assert listed == [y, x]
    got = WorldCheckpointSaver(lw.virtual_world("file://" + where)).get_tuple(config())
    assert got is not None
    assert got.config["configurable"]["checkpoint_id"] == y, \
        f"the cold head is {got.config['configurable']['checkpoint_id']} (the first put), not {y}"
