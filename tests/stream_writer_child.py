"""Executes one run of `watch_flows.tokens` to its end (or until it is killed), in a
process of its own: `python stream_writer_child.py WORLD RUN_ID INPUT_JSON`, where WORLD
is `local:<data dir>` (a local_world) or an fsspec URL (a virtual_world). Prints the
run's output as JSON."""

from __future__ import annotations

import json
import sys
import time

from watch_flows import tokens

import little_workflow as lw


def open_world(spec: str) -> lw.World:
    if spec.startswith("local:"):
        return lw.local_world(spec[len("local:"):])
    return lw.virtual_world(spec)


if __name__ == "__main__":
    where, run_id, input_json = sys.argv[1:4]
    # A killed writer's lease on an object store lapses only after its lease (tests set
    # LW_LEASE_SECONDS=2): until then the run is held, and a resumer waits as a worker does.
    give_up = time.monotonic() + 60
    with open_world(where) as world:
        while True:
            try:
                result = lw.run_workflow(tokens, json.loads(input_json), world=world,
                                         run_id=run_id)
                break
            except lw.RunLockedError:
                if time.monotonic() > give_up:
                    raise
                time.sleep(0.2)
    print(json.dumps(result.output))
