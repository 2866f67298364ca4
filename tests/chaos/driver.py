"""One chaos run on one backend: start the processes, SIGKILL and SIGSTOP/SIGCONT them
at random (seeded), stop them all, drain (a clean worker runs everything to its end),
then check the histories (`history.check`), the actors' incidents and `little verify`.

`run_chaos(...)` returns a `ChaosResult`; its `.report` prints the seed, every violation
and the offending histories (events and ledger lines)."""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from checkout import SRC

from chaos import history, mutants
from chaos.flows import LEDGER_ENV, STEP_SECONDS_ENV, WAIT_RESULT_STEPS, WORKER_TARGETS
from chaos.unfenced import UNFENCED_ENV
from little_workflow.world.ids import run_lock_name

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
ROOT = os.path.dirname(TESTS)
LITTLE = [sys.executable, "-c", mutants.CLI_CODE]

#: Roles that run steps (killed and paused; the starter only paused: a restart costs a
#: loaded machine seconds of imports); the others are killed now and then.
EXECUTORS = ("worker0", "worker1", "pipeliner", "starter")
PAUSE_ONLY = ("starter",)
#: How a run of these workflows may rightly fail: an orchestrator whose sub-run someone
#: cancelled (the canceller picks any active run, sub-runs included).
ALLOWED_FAILURES = ("StepFailedError~RunCancelledError",)
ACTOR_ROLES = ("starter", "sender", "sender-deadline", "canceller", "forker", "gc",
               "pipeliner", "cli")


@dataclass
class ChaosResult:
    kind: str
    seed: int
    violations: list[history.Violation]
    report: str
    stats: dict[str, Any] = field(default_factory=dict)


class Proc:
    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: str):
        self.name, self.argv, self.env, self.log_path = name, argv, env, log_path
        self.popen: subprocess.Popen | None = None
        self.stopped_until: float | None = None
        self.watched: set[str] = set()  # locks it held when it was paused
        self.start()

    def start(self) -> None:
        with open(self.log_path, "ab") as out:
            self.popen = subprocess.Popen(self.argv, env=self.env, stdout=out,
                                          stderr=subprocess.STDOUT, cwd=ROOT)

    def signal(self, sig: int) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(sig)

    def kill(self) -> None:
        if self.stopped_until is not None:
            self.signal(signal.SIGCONT)
            self.stopped_until = None
        self.signal(signal.SIGKILL)
        if self.popen is not None:
            self.popen.wait()


def run_chaos(kind: str, spec: str, seed: int, seconds: float, workdir: str, *,
              extra_env: dict[str, str] | None = None, stop_max: float = 1.5,
              fence_slack: float = 1.0, exclusive: bool = True,
              drain_seconds: float = 25.0, pace: float = 1.0, stop_share: float = 0.45,
              stop_min: float = 0.2, roles: tuple[str, ...] = ACTOR_ROLES,
              links: dict[str, SlowLink] | None = None, slow_seconds: float = 0.0,
              lock_owners: Callable[[], dict[str, int]] | None = None,
              lock_docs: Callable[[], dict[str, dict[str, Any]]] | None = None,
              link_env: Callable[[int], dict[str, str]] | None = None,
              workers: tuple[str, ...] = ("worker0", "worker1"),
              unfenced: str | None = None, step_seconds: float = 0.03,
              open_world: Callable[[], Any]) -> ChaosResult:
    """Chaos on the World `spec` (`local:<dir>` or a URL) for `seconds`, then drain and
    check. `open_world()` gives the checker a fresh World on the same storage.

    `lock_docs()` (leased backends): lock name -> lock document; after the drain every
    log is checked against its lock's generation (`unleased_starts`).
    `lock_owners()` (leased backends): lock name -> holder pid. A paused process is then
    resumed as soon as another process has taken over one of the locks it held — the
    moment a holder that lost its lease may still get a write through (DESIGN §13).
    `links`: process name -> the `SlowLink` it reaches the store through (`link_env(port)`
    is the environment that points it there; by default S3's `FSSPEC_S3_ENDPOINT_URL`); a
    worker holding a lease is then also slowed down now and then: what it sends is held until another worker has taken one of its locks over (at
    most `slow_seconds`), then let through.

    `unfenced` (`locks` or `locks,fence`): every process of the chaos (not the drain) runs
    with those protections of DESIGN §15 taken away (`chaos.unfenced`) — the test of the
    test."""
    rng = random.Random(seed)
    os.makedirs(workdir, exist_ok=True)
    ledger = os.path.join(workdir, "ledger.jsonl")
    env = {**os.environ, **(extra_env or {}),
           "PYTHONPATH": os.pathsep.join([SRC, TESTS]),
           LEDGER_ENV: ledger, STEP_SECONDS_ENV: str(step_seconds), "LW_CHAOS_PACE": str(pace)}
    for link in (links or {}).values():
        link.peers = [other for other in links.values() if other is not link]
    started = time.time()
    end = 0.0  # written to workdir/end once every process is up
    procs: dict[str, Proc] = {}
    pids: dict[int, str] = {}  # every process started -> its role
    restarts = 0

    if unfenced:
        env[UNFENCED_ENV] = unfenced

    def actor_argv(role: str, until: float = 0.0) -> list[str]:
        return [sys.executable, "-m", "chaos.actors", role, spec,
                str(seed * 1000 + restarts), str(until), workdir]

    def spawn(name: str) -> Proc:
        if name.startswith("worker"):
            argv = LITTLE + ["worker", *WORKER_TARGETS, "--concurrency", "4",
                             *world_args(spec)]
        else:
            argv = actor_argv(name)
        if unfenced:
            argv = [sys.executable, "-m", "chaos.unfenced",
                    "little" if name.startswith("worker") else "actor", *argv[3:]]
        own_env = env
        if links and name in links:
            own_env = {**env, **(link_env or s3_link_env)(links[name].port)}
        proc = Proc(name, argv, own_env, os.path.join(workdir, f"{name}.log"))
        pids[proc.popen.pid] = name
        return proc

    for name in (*workers, *roles):
        procs[name] = spawn(name)
    wait_until_ready(procs.values(), timeout=60)
    ready_seconds = time.time() - started
    end = time.time() + seconds
    with open(os.path.join(workdir, "end.tmp"), "w") as f:
        f.write(repr(end))
    os.replace(os.path.join(workdir, "end.tmp"), os.path.join(workdir, "end"))
    chaos_started = time.time()
    kills = stops = takeovers = stops_holding = slowdowns = 0
    next_watch = 0.0
    try:
        next_blow = time.time() + rng.uniform(0.5, 1.2)
        while time.time() < end:
            now = time.time()
            if lock_owners is not None and now >= next_watch and any(
                    p.watched and p.stopped_until is not None for p in procs.values()):
                next_watch = now + 0.1
                owners = lock_owners()
                for p in procs.values():
                    if p.watched and p.stopped_until is not None and any(
                            owners.get(n) not in (None, p.popen.pid) for n in p.watched):
                        p.stopped_until = now + rng.uniform(0.0, 0.05)
                        p.watched = set()
                        takeovers += 1
            if links and lock_owners is not None and any(
                    link.watched and link.slow_until > now for link in links.values()):
                owners = lock_owners()
                for name, link in links.items():
                    if link.watched and link.slow_until > now and any(
                            owners.get(n) not in (None, procs[name].popen.pid)
                            for n in link.watched):
                        # Taken over: let the held writes land now, or in a moment.
                        link.slow_until = now + rng.uniform(0.0, 0.15)
                        link.watched = set()
                        takeovers += 1
            for p in procs.values():
                if p.stopped_until is not None and p.stopped_until <= now:
                    p.signal(signal.SIGCONT)
                    p.stopped_until = None
            if now >= next_blow:
                others = [r for r in ("sender", "sender-deadline", "gc", "forker", "canceller")
                          if r in procs]
                victim = procs[rng.choice([r for r in EXECUTORS if r in procs])
                               if rng.random() < 0.85 or not others else rng.choice(others)]
                if victim.name.startswith("worker") and any(
                        p.stopped_until is not None
                        or (links and p.name in links and links[p.name].slow_until > now)
                        for p in procs.values() if p.name.startswith("worker")):
                    # One worker paused at a time: the other one is the taker.
                    next_blow = now + rng.uniform(0.3, 0.8) * pace
                    continue
                holders: set[int] = set()
                if lock_owners is not None and victim.name.startswith("worker"):
                    # Pause a worker in the middle of a run (holding its lease) if any.
                    holders = set(lock_owners().values())
                    holding = [p for p in procs.values() if p.name.startswith("worker")
                               and p.popen.pid in holders and p.stopped_until is None]
                    victim = rng.choice(holding) if holding else victim
                if links and victim.name in links and victim.popen.pid in holders \
                        and rng.random() < 0.8:
                    link = links[victim.name]
                    link.slow_until = now + slow_seconds
                    link.watched = {n for n, pid in lock_owners().items()
                                    if pid == victim.popen.pid} if lock_owners else set()
                    slowdowns += 1
                elif victim.name in EXECUTORS and victim.stopped_until is None \
                        and (victim.name in PAUSE_ONLY or rng.random() < stop_share):
                    victim.signal(signal.SIGSTOP)
                    victim.stopped_until = now + rng.uniform(stop_min, stop_max)
                    if lock_owners is not None:
                        victim.watched = {n for n, pid in lock_owners().items()
                                          if pid == victim.popen.pid}
                        stops_holding += bool(victim.watched)
                    stops += 1
                elif victim.name not in PAUSE_ONLY:
                    victim.kill()
                    restarts += 1
                    procs[victim.name] = spawn(victim.name)
                    kills += 1
                next_blow = now + rng.uniform(0.6, 1.6) * pace
            time.sleep(0.05)
    finally:
        for p in procs.values():
            p.kill()
    chaos_seconds = time.time() - chaos_started
    before_drain = logs_before_drain(open_world)

    drain_env = {k: v for k, v in env.items() if k != UNFENCED_ENV}
    drain = subprocess.run(actor_argv("drain", time.time() + drain_seconds),
                           env=drain_env, cwd=ROOT, capture_output=True, text=True)
    drain_text = drain.stdout + drain.stderr
    with open(os.path.join(workdir, "drain.log"), "w") as f:
        f.write(drain_text)
    drain_seconds_taken = time.time() - chaos_started - chaos_seconds

    world = open_world()
    logs = history.read_world(world)
    entries = history.read_ledger(ledger)
    options = history.Options(wait_result_steps=WAIT_RESULT_STEPS, fence_slack=fence_slack,
                              exclusive=exclusive, allowed_failures=ALLOWED_FAILURES)
    violations = history.check(logs, entries, options)
    violations += history.check_what_users_see(logs, history.read_catalogue(world), before_drain)
    if lock_docs is not None:
        violations += unleased_starts(logs, lock_docs())
    warnings: list[str] = []
    seen: dict[tuple[str, str, str], int] = {}
    for rec in read_incidents(workdir):
        if rec["kind"] == "verify-during-chaos":
            warnings.append(f"{rec['role']}: little verify during the chaos: {rec['detail'][:300]}")
            continue
        key = (rec["kind"], rec.get("run") or "-", rec["detail"].splitlines()[0][:200])
        seen[key] = seen.get(key, 0) + 1
        if seen[key] == 1:
            violations.append(history.Violation(
                f"incident-{rec['kind']}", key[1],
                f"{rec['role']} pid {rec['pid']}: {rec['detail']}"))
    verify = subprocess.run(LITTLE + ["verify", "--json"] + world_args(spec), env=env,
                            cwd=ROOT, capture_output=True, text=True)
    if verify.returncode != 0:
        violations.append(history.Violation("verify", "-", (verify.stdout + verify.stderr)[-2000:]))
    if drain.returncode != 0:
        violations.append(history.Violation("drain", "-", drain_text[-2000:]))

    counts: dict[str, int] = {}
    for p in procs.values():
        counts.update(actor_counts(p.log_path, p.name))
    statuses: dict[str, int] = {}
    for events in logs.values():
        s = "unreadable" if isinstance(events, BaseException) else history.status(events) or "open"
        statuses[s] = statuses.get(s, 0) + 1
    stats = {"kind": kind, "seed": seed, "ready_s": round(ready_seconds, 1),
             "chaos_s": round(chaos_seconds, 1), "drain_s": round(drain_seconds_taken, 1),
             "total_s": round(time.time() - started, 1), "kills": kills, "stops": stops,
             "stops_holding_a_lease": stops_holding,
             "slowdowns": slowdowns, "resumed_after_takeover": takeovers,
             "handoffs": sum(link.handoffs for link in (links or {}).values()),
             "runs_left": len(logs), "statuses": statuses, "executions": len(entries),
             "incarnations": len({(r["run"], r["inc"]) for r in entries}),
             "executions_by": dict(collections.Counter(
                 pids.get(r["pid"], "other") for r in entries)),
             "warnings": len(warnings)}
    header = (f"chaos on {kind}: seed {seed} (reproduce: LW_CHAOS_SEED={seed} "
              f"LW_CHAOS_SECONDS=…), {json.dumps(stats)}; process logs in {workdir}")
    report = header
    if violations:
        report = history.format_report(violations, logs, entries, header,
                                       raw=history.read_raw(world, logs))
    if warnings:
        report += "\nwarnings:\n" + "\n".join(warnings[:5])
    if any(v.rule == "unfinished" for v in violations):
        report += "\nthe drain said:\n" + drain_text[-3000:]
    return ChaosResult(kind, seed, violations, report, stats)


def logs_before_drain(open_world: Callable[[], Any]) -> dict[str, Any]:
    """Every log as the chaos left it, before the drain runs what is unfinished to its
    end (an orphaned sub-run, finished by the drain, would hide an uncancelled one)."""
    world = open_world()
    try:
        return history.read_world(world)
    finally:
        world.close()


def s3_link_env(port: int) -> dict[str, str]:
    return {"FSSPEC_S3_ENDPOINT_URL": f"http://127.0.0.1:{port}"}


class SlowLink:
    """A TCP relay between one process and the store. Until `slow_until`, every chunk the
    process sends is held: a partitioned network, where a write that passed its lease
    check lands after the lease ran out and another worker took the run over (DESIGN
    §13, "fencing holds at the write"). The driver lets the held writes go just after it
    sees the takeover — or, sharper, when the taker's own link shows its first append
    after taking the lock over (and so after reading the log): that append is held a
    moment and the cut holder's writes go first, landing between the taker's read and
    its first append (issue 20, item 2)."""

    #: How long the taker's first append is held while the cut holder's writes go.
    TAKER_HOLD = 0.3

    def __init__(self, target_port: int):
        import socket
        import threading

        self.target_port = target_port
        self.slow_until = 0.0
        self.watched: set[str] = set()  # the locks its process held when it was cut
        self.peers: list[SlowLink] = []  # the other processes' links
        self.cut_peer: SlowLink | None = None  # a cut holder whose lock this one took
        self.handoffs = 0
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while not self.closed:
            try:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                continue
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, src: Any, dst: Any, outgoing: bool) -> None:
        import socket

        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if outgoing and self._saw(data):
                    self.slow_until = time.time() + self.TAKER_HOLD
                while outgoing and time.time() < self.slow_until:
                    time.sleep(0.01)  # held: the network is cut until slow_until
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _saw(self, data: bytes) -> bool:
        """Watch the requests this process sends; True: hold this one a moment."""
        line = data.split(b"\r\n", 1)[0]
        if line.startswith(b"PUT ") and b"/locks/" in line:
            name = line.split(b"/locks/", 1)[1].split(b"/", 1)[0].decode(errors="replace")
            for peer in self.peers:
                if peer.slow_until > time.time() and name in peer.watched:
                    self.cut_peer = peer  # taking over a lock of a cut holder
        elif line.startswith(b"PUT ") and b"/events/" in line and self.cut_peer is not None:
            # The taker's first append after its takeover and read: let the cut holder's
            # held write go first.
            peer, self.cut_peer = self.cut_peer, None
            if peer.slow_until > time.time():
                peer.slow_until = 0.0
                peer.watched = set()
                self.handoffs += 1
                return True
        return False

    def close(self) -> None:
        self.closed = True
        self.listener.close()


#: `python -c` of the moto server process: moto's own server, with tests/s3_server.py's
#: `list_moto_modules_once` (its folder listed once, not once a request).
MOTO_SERVER_CODE = (
    f"import sys; sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))!r}); "
    "from s3_server import list_moto_modules_once; list_moto_modules_once(); "
    "from moto.server import main; main()")


class MotoProcess:
    """A moto S3 server in its own process (the chaos sends it thousands of requests: in
    the test process it would compete with the driver for one interpreter lock)."""

    def __init__(self, workdir: str):
        import socket

        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        os.makedirs(workdir, exist_ok=True)
        with open(os.path.join(workdir, "moto.log"), "ab") as out:
            self.popen = subprocess.Popen(
                [sys.executable, "-c", MOTO_SERVER_CODE, "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=out, stderr=subprocess.STDOUT)
        self.storage_options = {
            "key": "testing", "secret": "testing",
            "client_kwargs": {"endpoint_url": self.endpoint, "region_name": "us-east-1"},
        }
        self.env = {"FSSPEC_S3_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
        deadline = time.time() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    break
            except OSError:
                if time.time() > deadline or self.popen.poll() is not None:
                    raise RuntimeError(f"moto did not start (see {workdir}/moto.log)") from None
                time.sleep(0.1)

    def filesystem(self) -> Any:
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, **self.storage_options)

    def new_bucket(self, name: str) -> str:
        self.filesystem().call_s3("create_bucket", Bucket=name)
        return name

    def lock_owners(self, root: str) -> Callable[[], dict[str, int]]:
        """Lock name -> holder pid of every held run lock under `root` (bucket/prefix)."""
        return lock_owners_on(self.filesystem(), root)

    def lock_docs(self, root: str) -> Callable[[], dict[str, dict[str, Any]]]:
        return lambda: lock_documents(self.filesystem(), root)

    def stop(self) -> None:
        self.popen.kill()
        self.popen.wait()


def lock_documents(fs: Any, root: str) -> dict[str, dict[str, Any]]:
    """Lock name -> the document of every leased run lock under `root` on `fs` (an object
    store client; the lock objects of fs_adapters/leases.py)."""
    fs.invalidate_cache()  # another process's locks, not this client's listing
    paths = fs.find(f"{root}/locks")
    out = {}
    for path, body in (fs.cat(paths) if paths else {}).items():
        try:
            doc = json.loads(body)
        except ValueError:
            continue
        if isinstance(doc, dict):
            out[path.rsplit("/", 2)[-2]] = doc
    return out


def lock_owners_on(fs: Any, root: str) -> Callable[[], dict[str, int]]:
    """Lock name -> holder pid of every held leased run lock under `root` on `fs`."""

    def owners() -> dict[str, int]:
        try:
            docs = lock_documents(fs, root)
        except Exception:  # noqa: BLE001 - a lost look is only a missed chance
            return {}
        return {name: int(doc.get("pid") or 0) for name, doc in docs.items()
                if doc.get("state") == "held"}

    return owners


def unleased_starts(logs: dict[str, Any], docs: dict[str, dict[str, Any]]) -> list[history.Violation]:
    """On a leased store every execution of a run begins, holding the run's lease, with
    `run.started`, and every taking of a lease raises its generation (a lock object is
    marked free, never deleted, gc included): so a log with more `run.started` than its
    lock's generation had an execution that held no lease — two hosts may interleave."""
    out = []
    for run_id, events in logs.items():
        if isinstance(events, BaseException):
            continue
        starts = sum(1 for e in events if e.type == "run.started")
        generation = int(docs.get(run_lock_name(run_id), {}).get("generation") or 0)
        if starts > generation:
            out.append(history.Violation(
                "unleased-start", run_id,
                f"{starts} run.started in the log, but its lease was taken {generation} times"))
    return out


def wait_until_ready(procs: Any, timeout: float) -> None:
    """Until every process has printed its first line (`ready ROLE`, `worker: …`)."""
    deadline = time.time() + timeout
    waiting = list(procs)
    while waiting and time.time() < deadline:
        waiting = [p for p in waiting if os.path.getsize(p.log_path) == 0]
        time.sleep(0.05)


def world_args(spec: str) -> list[str]:
    if spec.startswith("local:"):
        return ["--data-dir", spec[len("local:"):]]
    return ["--world", spec]


def read_incidents(workdir: str) -> list[dict[str, Any]]:
    path = os.path.join(workdir, "incidents.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def actor_counts(log_path: str, name: str) -> dict[str, int]:
    """The last summary line an actor printed (killed ones print none)."""
    out: dict[str, int] = {}
    try:
        with open(log_path) as f:
            for line in f:
                if line.startswith('{"role"'):
                    for k, v in json.loads(line)["counts"].items():
                        out[f"{name}.{k}"] = out.get(f"{name}.{k}", 0) + v
    except (OSError, ValueError):
        pass
    return out
