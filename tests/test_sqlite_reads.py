"""Reads of local_world's events.db do not wait for a commit in progress (issue 30): a
worker's threads commit steps with an fsync each while its claims of queued runs and its
sweeps read logs; on one connection every read queued behind whichever commit was mid-fsync.
Reads go through a connection of their own (WAL: readers never wait for the writer) and see
exactly what is committed, and nothing of a commit not yet made."""

from __future__ import annotations

import os
import threading

import little_workflow as lw


def test_a_log_is_read_while_another_thread_is_inside_a_commit(tmp_path):
    world = lw.local_world(str(tmp_path / "data"))
    world.append_event("run_read", "run.created", {"workflowId": "w"})
    inside, finish = threading.Event(), threading.Event()

    def hold() -> int:  # SQLite calls this while the INSERT below runs
        inside.set()
        finish.wait()
        return 0

    def commit() -> None:
        world.events._conn.set_progress_handler(hold, 1)
        try:
            world.append_event("run_read", "step.succeeded", {"stepPath": "s", "output": 1})
        finally:
            world.events._conn.set_progress_handler(None, 1)

    writer = threading.Thread(target=commit)
    writer.start()
    assert inside.wait(30)
    seen: list[list[str]] = []
    reader = threading.Thread(target=lambda: seen.append(
        [e.type for e in world.list_events("run_read")]))
    reader.start()
    reader.join(30)  # not a speed figure: on one connection it never returns before finish
    read_during_commit = not reader.is_alive()
    finish.set()
    writer.join()
    reader.join()
    assert read_during_commit, "list_events waited for the commit in progress"
    assert seen == [["run.created"]]  # the commit not yet made is not seen
    assert [e.type for e in world.list_events("run_read")] == ["run.created", "step.succeeded"]
    world.close()


def test_reads_see_every_commit_and_close_leaves_one_database(tmp_path):
    data = str(tmp_path / "data")
    world = lw.local_world(data)
    for i in range(50):
        world.append_event("run_many", "step.succeeded", {"stepPath": f"s{i}", "output": i},
                           durable=i % 2 == 0)
        assert len(world.list_events("run_many")) == i + 1
        assert world.read_event("run_many", i + 1) is not None
    world.close()
    assert not os.path.exists(os.path.join(data, "events", "events.db-wal"))
    again = lw.local_world(data)
    assert [e.payload["output"] for e in again.list_events("run_many")] == list(range(50))
    again.close()


def open_handles(path: str) -> int:
    """How many file descriptors of this process are open on `path`."""
    fds = "/proc/self/fd"
    out = 0
    for fd in os.listdir(fds):
        try:
            out += os.readlink(os.path.join(fds, fd)) == path
        except OSError:
            pass  # closed meanwhile (the listing's own descriptor)
    return out


def test_a_read_with_no_commit_in_progress_opens_no_second_connection(tmp_path):
    """A process that opens a World to read (`little runs`, a cold LangGraph get_tuple)
    reads on the connection it has while no commit is in progress: opening a second one
    and reading its schema was ~0.2 ms of a cold read of a LangGraph thread's head."""
    data = tmp_path / "data"
    world = lw.local_world(str(data))
    world.append_event("run_one", "run.created", {"workflowId": "w"})
    db = os.path.realpath(str(data / "events" / "events.db"))
    assert open_handles(db) == 1
    assert [e.type for e in world.list_events("run_one")] == ["run.created"]
    assert world.read_event("run_one", 1).type == "run.created"
    assert open_handles(db) == 1
    world.close()
