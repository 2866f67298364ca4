"""A queued run's enqueue order (DESIGN §17) comes from the World's counter
(`World.take_number`): on local_world a commit in events.db that is not synced by itself
but is made durable by the enqueue's own synced `run.created` commit, later in the same
WAL — so an enqueue syncs no more than `start_workflow` does, and no acknowledged enqueue
can come back after a power cut without the number it recorded. Elsewhere the counter is
a durable compare-and-swap document, and a counter kept in `order.json` before goes on."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

from checkout import SRC
from conftest import private_memory
from external_tools import require_tool

import little_workflow as lw

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(ROOT, "tests")

# Declares a queue, enqueues (the first one untimed: schema set-up), then prints
# "ACK i" with a raw write after each enqueue returns.
CHILD = textwrap.dedent("""
    import os, sys
    import little_workflow as lw
    import queue_flows
    world = lw.local_world(sys.argv[1])
    lw.declare_queue(world, "q")
    lw.enqueue(world, queue_flows.work_flow, {"n": -1}, queue="q")
    os.write(1, b"READY\\n")
    for i in range(int(sys.argv[2])):
        lw.enqueue(world, queue_flows.work_flow, {"n": i}, queue="q")
        os.write(1, f"ACK {i}\\n".encode())
    world.close()
""")

LINE_RE = re.compile(r"^(?:\[pid\s+\d+\]\s+|\d+\s+)?(\w+)\((.*)")
FD_PATH_RE = re.compile(r"^(\d+)<([^>]*)>")


def traced_enqueues(tmp_path, enqueues: int) -> list[tuple[str, str, str]]:
    """(syscall, its fd's path or path argument, rest of the line) after READY."""
    strace = require_tool("strace")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    trace = tmp_path / "trace.txt"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, HERE]))
    r = subprocess.run(
        [strace, "-f", "-y", "-qq", "-s", "64", "-o", str(trace),
         "-e", "trace=openat,write,pwrite64,fsync,fdatasync,rename",
         sys.executable, str(script), str(tmp_path / "world"), str(enqueues)],
        capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    calls, ready = [], False
    for line in trace.read_text().splitlines():
        m = LINE_RE.match(line)
        if not m or "resumed>" in line:
            continue
        name, args = m.groups()
        fd = FD_PATH_RE.match(args)
        quoted = re.search(r'"([^"]*)"', args)
        path = fd.group(2) if fd else (quoted.group(1) if quoted else "")
        if name == "write" and '"READY\\n"' in args:
            ready = True
        elif ready:
            calls.append((name, path, args))
    assert ready
    return calls


def test_an_enqueue_syncs_no_queue_document_and_its_number_is_synced_before_it_returns(tmp_path):
    enqueues = 5
    calls = traced_enqueues(tmp_path, enqueues)
    wal = str(tmp_path / "world" / "events" / "events.db-wal")
    queues = str(tmp_path / "world" / "queues") + "/"
    synced_queue_files = [(n, p) for n, p, _ in calls
                          if n in ("fsync", "fdatasync") and p.startswith(queues)]
    assert synced_queue_files == []  # the order counter costs no fsync of its own
    acks, wal_dirty = 0, False
    for name, path, args in calls:
        if name in ("write", "pwrite64") and path == wal:
            wal_dirty = True
        elif name in ("fsync", "fdatasync") and path == wal:
            wal_dirty = False
        elif name == "write" and args.startswith("1<") and '"ACK ' in args:
            # Everything this enqueue wrote to the WAL (its number, its run.created) is
            # synced before it is acknowledged.
            assert not wal_dirty, f"enqueue {acks} acknowledged with its WAL not synced"
            acks += 1
    assert acks == enqueues


def test_enqueue_order_goes_on_from_a_counter_kept_in_order_json(tmp_path):
    @lw.workflow(id="order-noop")
    async def noop(ctx: lw.RunContext, input: dict) -> dict:
        return input

    for world in (lw.local_world(str(tmp_path / "local")),
                  lw.virtual_world(private_memory(), "/wf")):
        lw.declare_queue(world, "q")
        # As a World written before the counter moved out of the document left it.
        world.write_document("queues/q/order.json", {"next": 41})
        orders = []
        for i in range(3):
            handle = lw.enqueue(world, noop, {"n": i}, queue="q")
            created = world.list_events(handle.run_id)[0].payload
            orders.append(created["queue"]["order"])
        assert orders == [41, 42, 43], world.kind
        world.close()


def test_take_number_never_gives_a_number_twice_across_processes(tmp_path):
    data = str(tmp_path / "w")
    lw.local_world(data).close()
    code = textwrap.dedent("""
        import sys
        import little_workflow as lw
        world = lw.local_world(sys.argv[1])
        print(" ".join(str(world.take_number("queues/q/order")) for _ in range(50)))
        world.close()
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, HERE]))
    procs = [subprocess.Popen([sys.executable, "-c", code, data], env=env,
                              stdout=subprocess.PIPE, text=True) for _ in range(3)]
    numbers = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0
        got = [int(x) for x in out.split()]
        assert got == sorted(got)  # each process sees them rise
        numbers += got
    assert sorted(numbers) == list(range(1, 151))
