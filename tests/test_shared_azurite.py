"""The Azure tests' emulator is one per test run, not one per pytest-xdist worker
(tests/azurite_server.py `shared`): whoever asks first starts it, the others reach the same
one, and it stops when the last process using it has left — a process that died while
using it (SIGKILL) does not keep it running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

from azurite_server import _reachable, shared

TESTS = os.path.dirname(os.path.abspath(__file__))

JOIN = textwrap.dedent('''
    import sys, time
    from azurite_server import shared

    with shared(sys.argv[1]) as server:
        server.new_container()
        print(server.port, flush=True)
        if sys.argv[2] == "stay":
            time.sleep(600)
''')


def join(state_dir: str, how: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", JOIN, state_dir, how], text=True,
                            stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": TESTS})


def test_processes_share_one_emulator_and_the_last_one_out_stops_it(tmp_path):
    state_dir = str(tmp_path)
    with shared(state_dir) as first:
        leaves = join(state_dir, "leave")
        assert int(leaves.stdout.readline()) == first.port  # the same emulator
        assert leaves.wait(60) == 0
        assert _reachable(first.port)  # another user left: still up for this one
        first.new_container()

        dies = join(state_dir, "stay")
        assert int(dies.stdout.readline()) == first.port
        dies.send_signal(signal.SIGKILL)
        dies.wait(60)
        assert _reachable(first.port)
    # This process was the last one alive using it: stopped, and nothing says otherwise.
    assert not _reachable(first.port)
    assert not os.path.exists(os.path.join(state_dir, "azurite.json"))


def test_the_session_emulator_is_the_runs_shared_one_under_xdist(azurite, tmp_path_factory):
    state_path = tmp_path_factory.getbasetemp().parent / "azurite.json"
    if os.environ.get("PYTEST_XDIST_WORKER"):
        state = json.loads(state_path.read_text())
        assert state["port"] == azurite.port and os.getpid() in state["users"]
    else:  # one process: an emulator of its own, nothing written beside other runs' dirs
        assert not state_path.exists()
