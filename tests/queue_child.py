"""Child processes of the queue tests (tests/test_queue_documents.py, tests/test_queues_processes.py).

    python queue_child.py count WORLD PATH N        add 1 to PATH's counter N times (update_document)
    python queue_child.py hold-slot WORLD NAME      hold a slot, print "held", sleep until killed
    python queue_child.py worker WORLD CONCURRENCY  a Worker of queue_flows' workflows until SIGTERM
    python queue_child.py drain WORLD CONCURRENCY   the same, `run_until_idle()` then exit
    python queue_child.py enqueue WORLD QUEUE N KEY DEDUP DEBOUNCE   print the run id ("-": none)

WORLD is `local:DIR` (local_world) or an fsspec URL (`file:///…`, `s3://bucket/prefix`; S3
reaches moto through FSSPEC_S3_ENDPOINT_URL).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import little_workflow as lw


def open_world(spec: str) -> Any:
    if spec.startswith("local:"):
        return lw.local_world(spec[len("local:"):])
    return lw.virtual_world(spec)


def count(world: Any, path: str, n: int) -> None:
    # Each value this process wrote, one per line: the parent tells a store that accepted
    # two conditional writes of one version (a value written twice) from a write that
    # was acknowledged and then lost (a value missing).
    for _ in range(n):
        written = world.update_document(path, lambda doc: {"n": (doc or {"n": 0})["n"] + 1})
        print(written["n"], flush=True)


def hold_slot(world: Any, name: str) -> None:
    slot = world.take_slot(name, "test")
    print("held" if slot is not None else "refused", flush=True)
    while True:
        time.sleep(1)


def worker(world: Any, concurrency: int, until_idle: bool) -> None:
    import queue_flows

    w = lw.Worker(world, workflows=queue_flows.WORKFLOWS, concurrency=concurrency)
    print("worker up", flush=True)
    if until_idle:
        w.run_until_idle()
        w.close()
        print("worker idle", flush=True)
    else:
        w.run()


def enqueue(world: Any, queue: str, n: int, key: str, dedup: str, debounce: str) -> None:
    import queue_flows

    handle = lw.enqueue(world, queue_flows.work_flow, {"n": n, "key": key, "seconds": 0.05},
                        queue=queue, key=None if key == "-" else key,
                        dedup_id=None if dedup == "-" else dedup,
                        debounce=None if debounce == "-" else float(debounce))
    print(handle.run_id, flush=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    mode, spec = sys.argv[1], sys.argv[2]
    world = open_world(spec)
    if mode == "count":
        count(world, sys.argv[3], int(sys.argv[4]))
    elif mode == "hold-slot":
        hold_slot(world, sys.argv[3])
    elif mode in ("worker", "drain"):
        worker(world, int(sys.argv[3]), mode == "drain")
    elif mode == "enqueue":
        enqueue(world, sys.argv[3], int(sys.argv[4]), *sys.argv[5:8])
    else:
        raise SystemExit(f"unknown mode {mode}")
