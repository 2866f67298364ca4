"""DBOS 3.x side of the benchmarks, run in its own process (DBOS is a singleton).

    python benchmarks/dbos_side.py steps   MODE N OUT.json     run time, per-step timestamps
    python benchmarks/dbos_side.py prepare MODE N DIR          N steps, then SIGKILL itself
    python benchmarks/dbos_side.py recover MODE DIR OUT.json   launch, recover, time it

MODE is `rollback` (DBOS on SQLite as shipped: rollback journal) or `wal` (WAL with
synchronous=FULL, set through a SQLAlchemy connect listener).
"""

from __future__ import annotations

import json
import logging
import os
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


if __name__ == "__main__":
    main()
