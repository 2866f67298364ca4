"""DBOS 3.x side of the benchmarks, run in its own process (DBOS is a singleton).

    python benchmarks/dbos_side.py steps   MODE N OUT.json     run time, per-step timestamps
    python benchmarks/dbos_side.py prepare MODE N DIR          N steps, then SIGKILL itself
    python benchmarks/dbos_side.py recover MODE DIR OUT.json   launch, recover, time it
    python benchmarks/dbos_side.py wake    MODE REPS OUT.json  P7: recv/send and sleep wake-ups
    python benchmarks/dbos_side.py queue   MODE N POLL OUT.json  P8: N queued 3-step workflows

MODE is `rollback` (DBOS on SQLite as shipped: rollback journal) or `wal` (WAL with
synchronous=FULL, set through a SQLAlchemy connect listener).
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import sys
import tempfile
import time

WORKFLOW_ID = "bench-recovery"


def setup(mode: str, directory: str) -> tuple:
    import sqlalchemy as sa
    from dbos import DBOS, DBOSConfig

    logging.getLogger("dbos").setLevel(logging.WARNING)
    url = f"sqlite:///{directory}/dbos.sqlite"
    engine = sa.create_engine(url)
    if mode == "wal":
        @sa.event.listens_for(engine, "connect")
        def _wal(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
            cur.close()

    config: DBOSConfig = {"name": "lw-bench", "system_database_url": url,
                          "system_database_engine": engine, "run_admin_server": False,
                          "log_level": "WARNING"}
    DBOS(config=config)
    stamps: list[float] = []
    kill_at = int(os.environ.get("LW_BENCH_KILL_AT", "-1"))

    @DBOS.step()
    def noop(i: int) -> int:
        if i == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return i

    @DBOS.workflow()
    def steps(n: int) -> int:
        stamps.append(time.perf_counter())
        for i in range(n):
            noop(i)
            stamps.append(time.perf_counter())
        return n

    return DBOS, steps, stamps


def main() -> None:
    action, mode = sys.argv[1], sys.argv[2]
    if action == "steps":
        n, out = int(sys.argv[3]), sys.argv[4]
        DBOS, steps, stamps = setup(mode, tempfile.mkdtemp(prefix="lwb-dbos-"))
        DBOS.launch()
        t0 = time.perf_counter()
        steps(n)  # run start -> run end, as little-workflow's run_workflow call
        run_seconds = time.perf_counter() - t0
        DBOS.destroy()
        with open(out, "w") as f:
            json.dump({"stamps": stamps, "run_seconds": run_seconds}, f)
    elif action == "prepare":
        n, directory = int(sys.argv[3]), sys.argv[4]
        os.environ["LW_BENCH_KILL_AT"] = str(n)  # step n+1 (index n) kills the process
        from dbos import SetWorkflowID

        DBOS, steps, _ = setup(mode, directory)
        DBOS.launch()
        with SetWorkflowID(WORKFLOW_ID):
            steps(n + 1)
    elif action == "recover":
        directory, out = sys.argv[3], sys.argv[4]
        DBOS, steps, stamps = setup(mode, directory)
        t0 = time.perf_counter()
        DBOS.launch()  # recovers this executor's pending workflows in the background
        while True:
            try:
                handle = DBOS.retrieve_workflow(WORKFLOW_ID)
                result = handle.get_result()
                break
            except Exception:
                time.sleep(0.001)
        # get_result() polls the database at an interval, so its return time is quantised;
        # the recovered workflow body, running in this process, stamps when it finished.
        elapsed = (stamps[-1] if stamps else time.perf_counter()) - t0
        DBOS.destroy()
        with open(out, "w") as f:
            json.dump({"seconds": elapsed, "result": result}, f)


def wake(mode: str, reps: int, out: str) -> None:
    """P7 on DBOS, measured as on little-workflow's side: the wall-clock time from the
    moment a message is sent (or a sleep is due) to the start of the workflow's next step.
    Same process: `DBOS.send` from the main thread into a workflow blocked in `DBOS.recv`.
    Another process: `DBOSClient.send` from a child process (same SQLite file)."""
    import subprocess

    from dbos import DBOS, SetWorkflowID

    directory = tempfile.mkdtemp(prefix="lwb-dbos-wake-")
    DBOS_, _, _ = setup(mode, directory)
    starts: dict[str, float] = {}

    @DBOS.step()
    def next_step(key: str) -> None:
        starts[key] = time.time()

    @DBOS.workflow()
    def receiver(key: str) -> None:
        DBOS.recv("approval", timeout_seconds=60)
        next_step(key)

    @DBOS.workflow()
    def sleeper(key: str, seconds: float) -> None:
        starts[key + ":due"] = time.time() + seconds  # just before the sleep call
        DBOS.sleep(seconds)
        next_step(key)

    DBOS.launch()
    same, other, sleeps = [], [], []

    rng = random.Random(7)

    def wait_blocked(wid: str) -> None:
        # Let recv block, then send at a random phase of its 1 s re-check (as lw's side does
        # against its worker's sweep): 0.3 s + U(0, 1) s, the same seeded draws on both sides.
        time.sleep(0.3 + rng.random())

    for i in range(reps):
        wid = f"recv-same-{i}"
        with SetWorkflowID(wid):
            h = DBOS.start_workflow(receiver, wid)
        wait_blocked(wid)
        sent = time.time()
        DBOS.send(wid, {"ok": True}, "approval")
        h.get_result()
        same.append(starts[wid] - sent)

        wid = f"recv-other-{i}"
        with SetWorkflowID(wid):
            h = DBOS.start_workflow(receiver, wid)
        wait_blocked(wid)
        stamp = os.path.join(directory, f"sent-{i}")
        subprocess.run([sys.executable, __file__, "send-from-client", mode, directory, wid, stamp],
                       check=True, timeout=120)
        h.get_result()
        with open(stamp) as f:
            other.append(starts[wid] - float(f.read()))

        wid = f"sleep-{i}"
        with SetWorkflowID(wid):
            DBOS.start_workflow(sleeper, wid, 0.2).get_result()
        sleeps.append(starts[wid] - starts[wid + ":due"])
    DBOS.destroy()
    with open(out, "w") as f:
        json.dump({"recv_same": same, "recv_other": other, "sleep": sleeps}, f)


def send_from_client(mode: str, directory: str, wid: str, stamp: str) -> None:
    import sqlalchemy as sa
    from dbos import DBOSClient

    url = f"sqlite:///{directory}/dbos.sqlite"
    engine = sa.create_engine(url)
    if mode == "wal":
        @sa.event.listens_for(engine, "connect")
        def _wal(dbapi_conn, _record):  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=FULL")
            cur.close()

    client = DBOSClient(system_database_url=url, system_database_engine=engine)
    sent = time.time()
    client.send(wid, {"ok": True}, "approval")
    with open(stamp, "w") as f:
        f.write(repr(sent))
    client.destroy()


def queue(mode: str, n: int, poll: float, out: str) -> None:
    """P8 on DBOS: n workflows of 3 steps enqueued on a queue with worker_concurrency=8,
    timed from the first enqueue to the last completion (the last workflow body's own
    stamp after its third step — a little earlier than its status commit, in DBOS's
    favour — and, for reference, to the last get_result)."""
    from dbos import DBOS

    DBOS_, _, _ = setup(mode, tempfile.mkdtemp(prefix="lwb-dbos-q-"))
    ends: list[float] = []

    @DBOS.step()
    def noop(i: int) -> int:
        return i

    @DBOS.workflow()
    def three(i: int) -> int:
        for k in range(3):
            noop(k)
        ends.append(time.perf_counter())
        return i

    DBOS.launch()
    q = DBOS.register_queue("q", worker_concurrency=8, polling_interval_sec=poll)
    t0 = time.perf_counter()
    handles = [q.enqueue(three, i) for i in range(n)]
    results = [h.get_result() for h in handles]
    t_results = time.perf_counter()
    DBOS.destroy()
    assert results == list(range(n)) and len(ends) == n
    with open(out, "w") as f:
        json.dump({"seconds": max(ends) - t0, "seconds_to_last_result": t_results - t0}, f)


if __name__ == "__main__":
    if sys.argv[1] == "wake":
        wake(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif sys.argv[1] == "send-from-client":
        send_from_client(*sys.argv[2:6])
    elif sys.argv[1] == "queue":
        queue(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
    else:
        main()
