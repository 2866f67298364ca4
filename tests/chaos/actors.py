"""The processes of the chaos test, besides `little worker`:
`python -m chaos.actors ROLE WORLD SEED END RUNDIR`.

WORLD is `local:<dir>` (local_world) or an fsspec URL (`file:///…`, `s3://bucket/wf`).
END is the epoch second at which the actor stops by itself (0: read it from
RUNDIR/end once the driver has written it). Each actor is a long-lived
process with one World (so it keeps what a real long-lived process keeps: ledgers,
cached logs) and a seeded random generator.

Anything an actor meets that no correct World may show — an `EventLogCorruptError`, an
integrity error, an exception that is no `LittleWorkflowError`, a `little` call that
prints a traceback — is written to RUNDIR/incidents.jsonl for the checker.

Roles: starter, sender (random targets), sender-deadline (sends around wait
deadlines), canceller, forker, gc, pipeliner (runs `chaos_pipe` pipelines), cli
(`little runs/events/verify/send/cancel/fork/gc`), drain (after the chaos: a clean
worker and the pipelines until every run is finished).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import traceback
import uuid
from typing import Any, Callable

import little_workflow as lw
from chaos import flows, mutants
from little_workflow.runtime.active_index import active_run_ids
from little_workflow.runtime.state import RunLog
from little_workflow.world.clock import from_iso

CHAOS_IDS = [f"run_c{i:02d}" for i in range(14)]
PIPE_IDS = [f"run_p{i:02d}" for i in range(4)]
#: Pauses between actions are this many times longer (a slower backend: S3 on moto).
PACE = float(os.environ.get("LW_CHAOS_PACE", "1"))
#: Errors a correct World never raises, whoever calls.
ALARMING = (lw.EventLogCorruptError, lw.RuntimeIntegrityError)


def chaos_input(run_id: str) -> dict[str, Any]:
    i = int(run_id[-2:]) if run_id[-2:].isdigit() else 7
    return {"n": i, "sleep": 0.1 + (i % 4) * 0.1, "wait": 0.6 + (i % 5) * 0.35}


def pipe_input(run_id: str) -> dict[str, Any]:
    i = int(run_id[-2:])
    return {"n": 100 + 10 * i, "sleep": 0.15, "wait": 0.8 + (i % 3) * 0.4}


def open_world(spec: str) -> Any:
    if spec.startswith("local:"):
        return lw.local_world(spec[len("local:"):])
    return lw.virtual_world(spec)


def world_args(spec: str) -> list[str]:
    if spec.startswith("local:"):
        return ["--data-dir", spec[len("local:"):]]
    return ["--world", spec]


class Actor:
    def __init__(self, role: str, spec: str, seed: int, end: float, rundir: str):
        self.role, self.spec, self.rundir = role, spec, rundir
        self.rng = random.Random(seed)
        self.world = open_world(spec)
        print(f"ready {role}", flush=True)
        self.end = end or wait_for_start(rundir)
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        #: (run id, key, payload) of recent sends with a key, to send again.
        self.sent_with_keys: list[tuple[str, str, dict[str, Any]]] = []
        #: How long a send takes here, about (the deadline sender aims with it).
        self.send_seconds = 0.02

    def count(self, what: str) -> None:
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def incident(self, kind: str, run_id: str | None, detail: str) -> None:
        rec = {"role": self.role, "pid": os.getpid(), "kind": kind, "run": run_id,
               "detail": detail[-3000:], "at": time.time()}
        line = (json.dumps(rec) + "\n").encode()
        fd = os.open(os.path.join(self.rundir, "incidents.jsonl"),
                     os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def attempt(self, what: str, run_id: str | None, fn: Callable[[], Any],
                wrong: tuple[type[BaseException], ...] = ()) -> Any:
        """Call fn; expected refusals are counted, alarming ones written down (`wrong`:
        errors this call may never raise)."""
        try:
            result = fn()
            self.count(what)
            return result
        except ALARMING as e:
            self.incident("corrupt", run_id, f"{what}: {type(e).__name__}: {e}")
        except wrong as e:
            self.incident("wrong-refusal", run_id, f"{what}: {type(e).__name__}: {e}")
        except lw.LittleWorkflowError as e:
            self.count(f"{what}:{type(e).__name__}")
        except Exception as e:  # noqa: BLE001 - anything else is a finding
            self.incident("unexpected", run_id,
                          f"{what}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        return None

    def pause(self, low: float, high: float, pace: float = PACE) -> bool:
        left = self.end - time.time()
        if left <= 0:
            return False
        time.sleep(min(left, self.rng.uniform(low, high) * pace))
        return time.time() < self.end

    def some_run(self) -> str:
        roll = self.rng.random()
        if roll < 0.7:
            return self.rng.choice(CHAOS_IDS)
        if roll < 0.85:
            return self.rng.choice(PIPE_IDS)
        active = active_run_ids(self.world)
        return self.rng.choice(active) if active else self.rng.choice(CHAOS_IDS)

    # ---- roles ----------------------------------------------------------------------

    def starter(self) -> None:
        while self.pause(0.05, 0.25, pace=1.0):
            roll = self.rng.random()
            if roll < 0.15:  # a run id nobody reuses
                run_id = f"run_u{uuid.uuid4().hex[:10]}"
            else:
                run_id = self.rng.choice(CHAOS_IDS)
            value = chaos_input(run_id)
            if roll > 0.8:  # run it here (suspending at its sleep)
                self.attempt("run", run_id, lambda: lw.run_workflow(
                    flows.chaos, value, world=self.world, run_id=run_id, suspend=True))
            else:
                # Under the run's lock, start_workflow either finds the run (a no-op) or
                # creates it: "finished" can only come from a stale memory of a deleted
                # run (DESIGN §12/§13: a reused id starts a fresh run).
                self.attempt("start", run_id, lambda: lw.start_workflow(
                    flows.chaos, value, world=self.world, run_id=run_id),
                    wrong=(lw.RunFinishedError,))

    def send(self, run_id: str) -> None:
        """Send a fresh event (half of them with an idempotency key, written into the
        payload too, so that the checker sees a key repeated even by a sender that lost
        it), or now and then send a keyed one again: the same key, the same payload."""
        if self.sent_with_keys and self.rng.random() < 0.3:
            run_id, key, payload = self.rng.choice(self.sent_with_keys)
            self.attempt("send-again", run_id, lambda: lw.send_event(
                self.world, run_id, flows.EVENT, payload, idempotency_key=key))
            return
        k = uuid.uuid4().hex[:10]
        key = f"key-{k}" if self.rng.random() < 0.5 else None
        payload = {"k": k, "key": key}
        if key is not None:
            self.sent_with_keys.append((run_id, key, payload))
            del self.sent_with_keys[:-20]
        self.attempt("send", run_id, lambda: lw.send_event(
            self.world, run_id, flows.EVENT, payload, idempotency_key=key))

    def sender(self) -> None:
        while self.pause(0.05, 0.25):
            self.send(self.some_run())

    def sender_deadline(self) -> None:
        """Send into the race between an event and a wait's timeout. A wait blocked in
        its process re-reads the log every `WAIT_POLL_SECONDS`: an event landing after
        its last read and before its deadline is found only by its `wait.timed_out`
        append, which must hand it over. A suspended wait is resumed by a worker at the
        deadline: an event landing between the worker's read and that append, too."""
        from little_workflow.runtime.waiting import WAIT_POLL_SECONDS

        while self.pause(0.02, 0.08):
            soonest = None
            for run_id in active_run_ids(self.world):
                log = self.attempt("read", run_id, lambda r=run_id: RunLog.fold(
                    r, self.world.list_events(r)))
                if log is None:
                    continue
                for w in log.open_waits.values():
                    if w["kind"] == "event" and w.get("deadline"):
                        due = from_iso(w["deadline"])
                        if due > time.time() - 0.02 and (soonest is None or due < soonest[0]):
                            soonest = (due, run_id)
            if soonest is None:
                continue
            if self.rng.random() < 0.8:
                # To land after the waiter's last read (its reads are WAIT_POLL_SECONDS
                # apart) and before its deadline: the send's own time taken off.
                at = soonest[0] - self.rng.uniform(0.004, 0.1 * WAIT_POLL_SECONDS) - self.send_seconds
            else:  # a worker resuming it at the deadline reads the log, then times out
                at = soonest[0] + self.rng.uniform(0.0, 0.08)
            delay = at - time.time()
            if delay > 1.5:
                continue
            if delay > 0:
                time.sleep(delay)
            began = time.time()
            self.send(soonest[1])
            self.send_seconds = 0.7 * self.send_seconds + 0.3 * (time.time() - began)

    def canceller(self) -> None:
        while self.pause(0.6, 1.6):
            run_id = self.rng.choice(PIPE_IDS) if self.rng.random() < 0.4 else self.some_run()
            self.attempt("cancel", run_id, lambda: lw.cancel_run(self.world, run_id, "chaos"))

    def forker(self) -> None:
        made = 0
        while self.pause(0.4, 1.0) and made < 30:
            source = self.some_run()
            step = self.rng.choice(["flaky", "p/1", "nap", "w", "got", "z"])
            new_id = f"run_f{uuid.uuid4().hex[:10]}"
            if self.attempt("fork", source, lambda: lw.fork_run(
                    self.world, source, from_step=step, new_run_id=new_id)):
                made += 1

    def gc(self) -> None:
        while self.pause(0.4, 1.0):
            age = self.rng.choice([0.0, 0.3, 1.0])
            self.attempt("gc", None, lambda: lw.gc(self.world, older_than=age))

    def pipeliner(self) -> None:
        """Two threads: one runs (and resumes) the fixed pipelines the canceller aims
        at; the other starts new ones, each a sub-run blocked in a wait in this process
        while its deadline nears — the race the deadline sender aims at."""
        def loop(fresh: bool) -> None:
            while self.pause(0.05, 0.4):
                run_id = f"run_pf{uuid.uuid4().hex[:8]}{self.rng.randrange(100):02d}" if fresh \
                    else self.rng.choice(PIPE_IDS)
                self.attempt("pipe", run_id, lambda: flows.run_pipe(
                    self.world, run_id, pipe_input(run_id)))

        threads = [threading.Thread(target=loop, args=(fresh,)) for fresh in (False, True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def cli(self) -> None:
        base = [sys.executable, "-c", mutants.CLI_CODE]
        while self.pause(0.8, 2.0):
            run_id = self.some_run()
            command = self.rng.choice([
                ["runs"], ["events", run_id, "--json"], ["verify", "--json"],
                ["send", run_id, flows.EVENT, "--payload",
                 json.dumps({"cli": uuid.uuid4().hex[:6]})],
                ["cancel", run_id], ["fork", run_id, "--from-step", "nap"],
                ["gc", "--older-than", "1s"], ["replay", run_id, "--json"],
            ])
            try:
                done = subprocess.run(base + command + world_args(self.spec), capture_output=True,
                                      text=True, timeout=60)
            except subprocess.TimeoutExpired:
                self.incident("unexpected", run_id, f"little {' '.join(command)} hung for 60 s")
                continue
            self.count(f"little {command[0]}:{done.returncode}")
            text = done.stdout + done.stderr
            if command[0] == "verify" and done.returncode != 0:
                self.incident("verify-during-chaos", None, text)
            elif "Traceback" in text or "Corrupt" in text or "is missing" in text:
                self.incident("cli", run_id, f"little {' '.join(command)} -> "
                              f"{done.returncode}\n{text}")

    def drain(self) -> None:
        """After the chaos: run everything to its end (waits time out on their own)."""
        import logging

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        pending: list[str] = []
        while time.time() < self.end:
            pending = []
            for run_id in active_run_ids(self.world):
                log = self.attempt("read", run_id, lambda r=run_id: RunLog.fold(
                    r, self.world.list_events(r)))
                if log is None or log.created is None:
                    continue
                if log.status not in ("completed", "failed", "cancelled"):
                    pending.append(run_id)
                    if log.created.get("workflowId") == "chaos_pipe":
                        value = lw.materialize_run_state(self.world, run_id).input
                        self.attempt("pipe", run_id, lambda r=run_id, v=value: flows.run_pipe(
                            self.world, r, v))
            if not pending:
                break
            # A fresh Worker each round: one that found a run locked (a dead holder's
            # lease not yet expired) skips it in run_until_idle until its log changes.
            worker = lw.Worker(self.world, workflows=[flows.chaos, flows.chaos_child])
            try:
                worker.run_until_idle()
            finally:
                worker.close()
            time.sleep(0.2)
        for run_id in pending:
            state = self.attempt("read", run_id, lambda r=run_id: lw.materialize_run_state(
                self.world, r))
            print(f"left unfinished: {run_id} {state.status if state else '?'} "
                  f"{state.waiting if state else ''}", flush=True)

    def run(self) -> None:
        getattr(self, self.role.replace("-", "_"))()
        print(json.dumps({"role": self.role, "counts": self.counts}), flush=True)


def wait_for_start(rundir: str) -> float:
    """The driver writes RUNDIR/end (the epoch second the chaos ends) once every process
    has started, so a loaded machine's slow imports do not eat the chaos window."""
    path = os.path.join(rundir, "end")
    while True:
        try:
            with open(path) as f:
                return float(f.read())
        except (OSError, ValueError):
            time.sleep(0.05)


def main(argv: list[str]) -> None:
    role, spec, seed, end, rundir = argv
    mutants.install_from_env()
    Actor(role, spec, int(seed), float(end), rundir).run()


if __name__ == "__main__":
    main(sys.argv[1:])
