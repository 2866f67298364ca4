"""Child process for lock tests."""

import json
import os
import sys
import time

import little_workflow as lw

if __name__ == "__main__":
    action, data_dir = sys.argv[1], sys.argv[2]
    world = lw.local_world(data_dir)
    if action == "hold":
        with world.run_lock(sys.argv[3]):
            print("HELD", os.getpid(), flush=True)
            time.sleep(float(sys.argv[4]))
    elif action == "race":
        # Ready once imported; the parent sends one start time to both racers, so a slow
        # start on a loaded machine cannot turn the race into two turns.
        print("READY", flush=True)
        start_at = float(sys.stdin.readline())
        time.sleep(max(0.0, start_at - time.time()))
        try:
            with world.run_lock(sys.argv[3]):
                print("WON", flush=True)
                time.sleep(1.0)
        except lw.RunLockedError as e:
            print("LOCKED", e.owner_pid, flush=True)
    elif action == "manifests":
        i = 0
        while True:
            i += 1
            world.write_document("outer-loops/ol.json", {"n": i, "pad": "x" * (i % 5000)})
            print(i, flush=True) if i == 1 else None
    elif action == "append":
        for i in range(int(sys.argv[3])):
            world.append_event("run_busy", "t", {"i": i})
        print("APPENDED", flush=True)
    elif action == "read":
        deadline = time.time() + float(sys.argv[3])
        n = 0
        while time.time() < deadline:
            n = len(world.list_events("run_busy"))
            world.list_runs()
        print("READ", json.dumps(n), flush=True)
