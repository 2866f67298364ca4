"""The chaos test (issue 20): several real processes on ONE World — two `little worker`s,
a starter, two senders (one aiming at wait deadlines), a canceller, a forker, a gc loop,
a pipeline runner and a `little` CLI caller — with random SIGKILL and SIGSTOP/SIGCONT of
the processes that run steps, on local_world, a local-file virtual world, S3 (moto,
short leases) and Azure Blob (Azurite, short leases). Then a drain (a clean worker runs
everything to its end) and the history checker (`chaos/history.py`) over every log and
the external step ledger; on the leased stores also every log against its lease
(`driver.unleased_starts`: an execution that held no lease). The test of the test takes
the kernel locks of local files away (and the log fence too): the checker and `little
verify` must then catch two executors of one run.

`LW_CHAOS_SECONDS` (default 24; 40 under LW_SOAK=1) is the chaos time, split over the
backends (S3 and Azure half each);
`LW_CHAOS_SEED` reproduces a run's schedule of kills, pauses and actions (the report of
a failure prints it); `LW_CHAOS_WORKDIR` keeps the process logs; `LW_CHAOS_ROLES`
(e.g. `starter,sender`) runs only those actors besides the workers, a focused run. The first tests prove
that each rule of the checker fires on a hand-made history that breaks it, and stays
quiet on one that does not.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import pytest
from chaos import history
from chaos.driver import (
    ACTOR_ROLES,
    MotoProcess,
    SlowLink,
    lock_documents,
    lock_owners_on,
    run_chaos,
)
from soak import soak_size

import little_workflow as lw

SECONDS = soak_size("LW_CHAOS_SECONDS", short=24.0, full=40.0)
SEED = int(os.environ.get("LW_CHAOS_SEED") or int(time.time()) % 100_000)
LEASE = 1.5
#: A focused run: only these actors besides the two workers (e.g. `starter,sender`).
ROLES = tuple(os.environ["LW_CHAOS_ROLES"].split(",")) if os.environ.get("LW_CHAOS_ROLES") \
    else None
#: On S3 every action is several HTTP requests and every `little` call a fresh s3fs
#: client: the CLI caller and the forker (both covered on the local backends) are left
#: out, so the workers get the CPU to be caught mid-run.
S3_ROLES = tuple(r for r in ACTOR_ROLES if r not in ("cli", "forker"))
#: On Azure Blob (Azurite) the forker and the pipeline runner act too; the `little` CLI
#: caller (a fresh client per call) is left out, as on S3.
AZURE_ROLES = tuple(r for r in ACTOR_ROLES if r != "cli")


# ---- the checker on hand-made histories ---------------------------------------------------

@dataclass
class Ev:
    sequence: int
    type: str
    payload: Any
    created_at: str = "2026-12-01T12:00:00+00:00"


def at(second: float) -> str:
    return f"2026-12-01T12:00:{second:06.3f}+00:00"


T0 = 1796126400.0  # 2026-12-01T12:00:00Z as epoch seconds


def execution(run: str, path: str, token: str, value: Any = 1, *, inc: str = "i1",
              started: float = 1.0, ended: float = 1.1, pid: int = 10, line: int = 0,
              attempt: int = 1) -> dict[str, Any]:
    return {"run": run, "inc": inc, "path": path, "attempt": attempt, "pid": pid,
            "started": T0 + started, "ended": T0 + ended, "outcome": "returned",
            "output": {"token": token, "value": value}, "line": line}


def clean_run(run: str = "run_a", inc: str = "i1") -> list[Ev]:
    return [
        Ev(1, "run.created", {"workflowId": "chaos", "input": {}}),
        Ev(2, "run.started", {"start": 1}),
        Ev(3, "value.recorded", {"key": "uuid/0", "value": inc}),
        Ev(4, "step.started", {"stepPath": "a"}),
        Ev(5, "step.succeeded", {"stepPath": "a", "output": {"token": "t1", "value": 1}},
           at(2.0)),
        Ev(6, "wait.started", {"stepPath": "w", "name": "poke", "deadline": at(9)}),
        Ev(7, "signal.received", {"name": "poke", "payload": {"k": "x"}}),
        Ev(8, "wait.completed", {"stepPath": "w", "name": "poke", "signalSequence": 7}),
        Ev(9, "step.started", {"stepPath": "got"}),
        Ev(10, "step.succeeded",
           {"stepPath": "got", "output": {"token": "t2", "value": {"k": "x"}}}, at(3.0)),
        Ev(11, "run.completed", {"output": None}),
    ]


def clean_ledger(run: str = "run_a") -> list[dict[str, Any]]:
    return [execution(run, "a", "t1", 1, line=0),
            execution(run, "got", "t2", {"k": "x"}, started=2.5, ended=2.6, line=1)]


OPTIONS = history.Options(wait_result_steps={"w": "got"}, exclusive=True)


def rules(logs: dict[str, Any], ledger: list[dict[str, Any]],
          options: history.Options = OPTIONS) -> list[str]:
    return sorted({v.rule for v in history.check(logs, ledger, options)})


def test_a_clean_history_breaks_no_rule():
    assert rules({"run_a": clean_run()}, clean_ledger()) == []


def test_a_log_that_cannot_be_read_or_skips_a_sequence_is_a_hole():
    err = lw.EventLogCorruptError("run_a", "store", "event 8 is missing")
    assert rules({"run_a": err}, []) == ["hole"]
    events = [e for e in clean_run() if e.sequence != 4]
    assert "hole" in rules({"run_a": events}, clean_ledger())


def test_an_event_after_the_end_breaks_a_rule_but_a_cycle_record_does_not():
    events = clean_run() + [Ev(12, "signal.received", {"name": "poke", "payload": 1})]
    assert rules({"run_a": events}, clean_ledger()) == ["after-terminal"]
    events = clean_run() + [Ev(12, "outer_loop.cycle_completed", {})]
    assert rules({"run_a": events}, clean_ledger()) == []


def test_a_step_committed_twice():
    events = clean_run()[:10] + [
        Ev(11, "step.succeeded", {"stepPath": "a", "output": {"token": "t3", "value": 1}}),
        Ev(12, "run.completed", {"output": None})]
    ledger = clean_ledger() + [execution("run_a", "a", "t3", 1, started=1.05, ended=1.2,
                                         pid=11, line=2)]
    assert rules({"run_a": events}, ledger, history.Options(wait_result_steps={"w": "got"})) \
        == ["committed-twice"]


def test_what_no_single_executor_writes():
    """DESIGN §15: a record of an older execution after a newer run.started, a start that
    does not rise, two ends of one attempt (the rules `little verify` applies)."""
    success = {"stepPath": "a", "attempt": 1, "incarnation": 1,
               "output": {"token": "t1", "value": 1}}
    unfinished = history.Options(final=False)
    events = clean_run()[:4] + [Ev(5, "run.started", {"start": 2}),
                                Ev(6, "step.succeeded", success, at(2.0))]
    assert rules({"run_a": events}, clean_ledger()[:1], unfinished) == ["older-incarnation"]
    events[4] = Ev(5, "run.started", {"start": 1})
    assert rules({"run_a": events}, clean_ledger()[:1], unfinished) == ["start-not-rising"]
    events = clean_run()[:4] + [Ev(5, "step.failed", {**success, "willRetry": False}),
                                Ev(6, "step.succeeded", success, at(2.0))]
    assert rules({"run_a": events}, clean_ledger()[:1], unfinished) == ["attempt-ended-twice"]


def test_a_commit_no_ledgered_execution_returned():
    ledger = clean_ledger()
    ledger[0] = execution("run_a", "a", "t1", 2)  # another output under that token
    assert rules({"run_a": clean_run()}, ledger) == ["unledgered-commit"]
    assert rules({"run_a": clean_run()}, clean_ledger()[1:]) == ["unledgered-commit"]
    # Returned by another run: only a fork's copied records may come from elsewhere.
    assert rules({"run_b": clean_run("run_b")}, clean_ledger("run_a")) == ["unledgered-commit"]
    forked = clean_run("run_b")
    forked[0] = Ev(1, "run.created", {"workflowId": "chaos", "forkedFrom": {"runId": "run_a"}})
    forked[1:5] = [forked[2], forked[3], forked[4], Ev(5, "run.started", {"start": 1})]
    for i, e in enumerate(forked[:4], start=1):
        e.sequence = i
    ledger = [clean_ledger("run_a")[0], clean_ledger("run_b")[1]]
    assert rules({"run_b": forked}, ledger) == []


def test_a_commit_from_another_incarnation_of_the_run():
    ledger = clean_ledger()
    ledger[1] = execution("run_a", "got", "t2", {"k": "x"}, inc="i0", line=1)
    assert rules({"run_a": clean_run()}, ledger) == ["other-incarnation"]


def test_an_execution_long_after_the_commit_and_overlapping_ones():
    late = execution("run_a", "a", "t9", 1, started=5.0, ended=5.1, pid=12, line=2)
    assert rules({"run_a": clean_run()}, clean_ledger() + [late]) == ["ran-after-commit"]
    assert rules({"run_a": clean_run()}, clean_ledger() + [late],
                 history.Options(wait_result_steps={"w": "got"}, fence_slack=4.0)) == []
    beside = execution("run_a", "a", "t9", 1, started=1.05, ended=1.15, pid=12, line=2)
    assert rules({"run_a": clean_run()}, clean_ledger() + [beside]) == ["overlapping-attempts"]


def test_an_event_taken_twice():
    events = clean_run()[:8] + [
        Ev(9, "wait.started", {"stepPath": "w2", "name": "poke", "deadline": None}),
        Ev(10, "wait.completed", {"stepPath": "w2", "name": "poke", "signalSequence": 7})]
    assert rules({"run_a": events}, clean_ledger()[:1], history.Options(final=False)) \
        == ["signal-taken-twice"]


def test_an_event_before_the_timeout_lost_by_the_wait():
    events = clean_run()[:7] + [
        Ev(8, "wait.timed_out", {"stepPath": "w"}),
        Ev(9, "wait.completed", {"stepPath": "w", "name": "poke", "signalSequence": None}),
        Ev(10, "step.succeeded", {"stepPath": "got", "output": {"token": "t2", "value": None}}),
        Ev(11, "run.completed", {"output": None})]
    ledger = [clean_ledger()[0], execution("run_a", "got", "t2", None, line=1)]
    assert rules({"run_a": events}, ledger) == ["signal-lost"]
    # Appended after the timeout: the wait rightly returned None, the event stays pending.
    events[6], events[7] = Ev(7, "wait.timed_out", {"stepPath": "w"}), \
        Ev(8, "signal.received", {"name": "poke", "payload": {"k": "x"}})
    assert rules({"run_a": events}, ledger) == []


def test_a_wait_that_took_the_wrong_event_or_returned_another_value():
    events = clean_run()
    events[7] = Ev(8, "wait.completed", {"stepPath": "w", "name": "poke", "signalSequence": 5})
    assert "signal-order" in rules({"run_a": events}, clean_ledger())
    events = clean_run()[:6] + [
        Ev(7, "signal.received", {"name": "poke", "payload": {"k": "x"}}),
        Ev(8, "signal.received", {"name": "poke", "payload": {"k": "y"}}),
        Ev(9, "wait.completed", {"stepPath": "w", "name": "poke", "signalSequence": 8}),
        Ev(10, "step.succeeded",
           {"stepPath": "got", "output": {"token": "t2", "value": {"k": "y"}}}),
        Ev(11, "run.completed", {"output": None})]
    ledger = [clean_ledger()[0], execution("run_a", "got", "t2", {"k": "y"}, line=1)]
    assert rules({"run_a": events}, ledger) == ["signal-order"]  # not the first one
    ledger = [clean_ledger()[0], execution("run_a", "got", "t2", None, line=1)]
    events = clean_run()
    events[9] = Ev(10, "step.succeeded",
                   {"stepPath": "got", "output": {"token": "t2", "value": None}})
    assert rules({"run_a": events}, ledger) == ["wrong-wait-result"]


def test_a_cancelled_parent_with_an_unfinished_sub_run():
    parent = [
        Ev(1, "run.created", {"workflowId": "chaos_pipe"}),
        Ev(2, "run.started", {"start": 1}),
        Ev(3, "harness.tool_call.started", {"callPath": "call-0-chaos_child",
                                           "args": {"subRunId": "run_sub"}}),
        Ev(4, "run.cancel_requested", {"reason": None}),
        Ev(5, "run.cancelled", {"reason": None})]
    child = [Ev(1, "run.created", {"workflowId": "chaos_child"}),
             Ev(2, "run.started", {"start": 1})]
    assert rules({"run_p": parent, "run_sub": child}, [],
                 history.Options(final=False)) == []
    assert rules({"run_p": parent, "run_sub": child}, []) == [
        "cancel-not-propagated", "unfinished"]
    child.append(Ev(3, "run.cancelled", {"reason": "parent"}))
    assert rules({"run_p": parent, "run_sub": child}, []) == []


def test_an_unfinished_run_and_an_unexpected_failure():
    events = clean_run()[:6]
    assert rules({"run_a": events}, clean_ledger()[:1]) == ["unfinished"]
    failed = clean_run()[:5] + [Ev(6, "run.failed", {"error": {"type": "KeyError"}})]
    assert rules({"run_a": failed}, clean_ledger()[:1]) == ["failed"]
    assert rules({"run_a": failed}, clean_ledger()[:1],
                 history.Options(allowed_failures=("KeyError",))) == []
    assert rules({"run_a": failed}, clean_ledger()[:1],
                 history.Options(allowed_failures=("KeyError~gone",))) == ["failed"]


def test_the_report_names_the_seed_the_rule_and_the_history():
    events = clean_run() + [Ev(12, "signal.received", {"name": "poke", "payload": 1})]
    logs = {"run_a": events}
    found = history.check(logs, clean_ledger(), OPTIONS)
    text = history.format_report(found, logs, clean_ledger(), "seed 42")
    assert "seed 42" in text and "after-terminal" in text
    assert "signal.received" in text and "ledger (2 executions)" in text


def test_a_run_started_more_often_than_its_lease_was_taken():
    from chaos.driver import unleased_starts

    from little_workflow.world.ids import run_lock_name

    logs = {"run_a": clean_run()}
    lock = {run_lock_name("run_a"): {"state": "free", "generation": 1}}
    assert unleased_starts(logs, lock) == []
    twice = clean_run()[:2] + [Ev(3, "run.started", {"start": 2})]  # a second host, no lease
    assert [v.rule for v in unleased_starts({"run_a": twice}, lock)] == ["unleased-start"]
    assert [v.rule for v in unleased_starts(logs, {})] == ["unleased-start"]  # never leased
    taken_over = {run_lock_name("run_a"): {"state": "held", "generation": 2}}
    assert unleased_starts({"run_a": twice}, taken_over) == []


# ---- the chaos itself ---------------------------------------------------------------------

def chaos_on(kind: str, tmp_path: Any, request: Any = None) -> Any:
    # The object stores get half the time: every append is a few HTTP requests, and the
    # failover they are there for needs a worker paused past its lease mid-run (a
    # quarter of 40 s on Azurite left the workers too little to do under load).
    seconds = SECONDS / 2 if kind in ("s3", "azure") else SECONDS / 4
    # LW_CHAOS_WORKDIR keeps the process logs and the ledger past pytest's tmp cleanup.
    keep = os.environ.get("LW_CHAOS_WORKDIR")
    workdir = os.path.join(keep, f"{kind}-{SEED}-{int(time.time())}") if keep \
        else str(tmp_path / "chaos")
    if kind == "local_world":
        data_dir = str(tmp_path / "lw")
        result = run_chaos(kind, f"local:{data_dir}", SEED, seconds, workdir,
                           roles=ROLES or ACTOR_ROLES,
                           open_world=lambda: lw.local_world(data_dir))
    elif kind == "local-file":
        # Run locks across processes are kernel locks here (DESIGN §15): every actor of
        # local_world's chaos, two workers, the forker and the pipeline runner included.
        url = f"file://{tmp_path}/wf"
        result = run_chaos(kind, url, SEED, seconds, workdir, roles=ROLES or ACTOR_ROLES,
                           open_world=lambda: lw.virtual_world(url))
    elif kind == "azure":
        result = chaos_on_azure(request.getfixturevalue("azurite"), seconds, workdir)
    else:
        moto = MotoProcess(workdir)
        links = {name: SlowLink(moto.port) for name in ("worker0", "worker1")}
        try:
            bucket = moto.new_bucket("lw-chaos")
            env = {**moto.env, "LW_LEASE_SECONDS": str(LEASE)}
            # A worker holding a lease is paused past it (the store judges expiry in whole
            # seconds: lease + 1 s at least) or cut off from the store, and let go as soon
            # as the other worker has taken its lock over.
            stop_max, cut_max = LEASE + 6.0, 8.0
            result = run_chaos(
                kind, f"s3://{bucket}/wf", SEED, seconds, workdir, extra_env=env,
                stop_max=stop_max, stop_min=LEASE + 2.0, stop_share=0.8, links=links,
                slow_seconds=cut_max, lock_owners=moto.lock_owners(f"{bucket}/wf"),
                lock_docs=moto.lock_docs(f"{bucket}/wf"),
                fence_slack=max(stop_max, cut_max) + 2 * LEASE, exclusive=False, pace=1.0,
                drain_seconds=45, roles=ROLES or S3_ROLES,
                open_world=lambda: lw.virtual_world(moto.filesystem(), f"{bucket}/wf"))
        finally:
            for link in links.values():
                link.close()
            moto.stop()
    print("\n" + result.report)
    return result


def chaos_on_azure(azurite: Any, seconds: float, workdir: str) -> Any:
    """As on S3: two workers that hold leases are paused past them or cut off from the
    store (each reaches Azurite through its own `SlowLink`), the other one takes over."""
    import fs_adapters.azure_blob  # noqa: F401  (registers its publisher)

    root = f"{azurite.new_container()}/wf"
    links = {name: SlowLink(azurite.port) for name in ("worker0", "worker1")}

    def link_env(port: int) -> dict[str, str]:
        return {"AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string.replace(
            f"127.0.0.1:{azurite.port}/", f"127.0.0.1:{port}/")}

    env = {"AZURE_STORAGE_CONNECTION_STRING": azurite.connection_string,
           "LW_LEASE_SECONDS": str(LEASE)}
    stop_max, cut_max = LEASE + 6.0, 8.0
    try:
        return run_chaos(
            "azure", f"az://{root}", SEED, seconds, workdir, extra_env=env,
            stop_max=stop_max, stop_min=LEASE + 2.0, stop_share=0.8, links=links,
            link_env=link_env, slow_seconds=cut_max,
            lock_owners=lock_owners_on(azurite.filesystem(), root),
            lock_docs=lambda: lock_documents(azurite.filesystem(), root),
            fence_slack=max(stop_max, cut_max) + 2 * LEASE, exclusive=False, pace=1.0,
            drain_seconds=45, roles=ROLES or AZURE_ROLES,
            open_world=lambda: lw.virtual_world(azurite.filesystem(), root))
    finally:
        for link in links.values():
            link.close()


# Each chaos run is a dozen processes for a fixed number of seconds, and must see enough
# runs in them: under xdist (`--dist loadgroup`) one worker runs the four in turn, so they
# never starve each other of the machine's cores.
@pytest.mark.xdist_group("chaos")
@pytest.mark.parametrize("kind", ["local_world", "local-file", "s3", "azure"])
def test_chaos_history_holds_every_rule(kind, tmp_path, request):
    result = chaos_on(kind, tmp_path, request)
    assert result.stats["incarnations"] >= 5, result.report  # the chaos really ran runs
    assert not result.violations, result.report


# ---- the test of the test: take DESIGN §15's protections away -------------------------------

#: Seconds of chaos with a protection taken away (two workers and a starter only): both
#: kinds of finding showed within the first 6 s in every run seen.
UNFENCED_SECONDS = soak_size("LW_CHAOS_UNFENCED_SECONDS", short=6.0, full=20.0)


@pytest.mark.parametrize("removed", ["locks", "locks,fence"])
def test_the_chaos_catches_two_executors_of_one_run(removed, tmp_path):
    """Without the kernel lock, two workers execute one run at once: the checker sees
    their executions of one step overlap (the log fence still keeps the logs whole, so
    `little verify` is ok). Without the log fence too, their records interleave: the
    checker's one-executor rules and `little verify` name them."""
    url = f"file://{tmp_path}/wf"
    started = time.monotonic()
    result = run_chaos("local-file", url, SEED, UNFENCED_SECONDS, str(tmp_path / "chaos"),
                       roles=("starter",), unfenced=removed, step_seconds=0.3,
                       drain_seconds=15, open_world=lambda: lw.virtual_world(url))
    print(f"\n{removed}: {time.monotonic() - started:.1f} s\n{result.report}")
    found = {v.rule for v in result.violations}
    if removed == "locks":
        assert "overlapping-attempts" in found, result.report
        assert "verify" not in found and not found & ONE_EXECUTOR_RULES, result.report
    else:
        assert "verify" in found and found & ONE_EXECUTOR_RULES, result.report


#: The rules only two interleaved executors break.
ONE_EXECUTOR_RULES = {"committed-twice", "attempt-ended-twice", "older-incarnation",
                      "start-not-rising"}
