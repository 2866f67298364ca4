"""The workflows of the chaos test, imported by every process of it (`little worker
chaos.flows:chaos chaos.flows:chaos_child`, the pipeline runner, the drain).

Together they use every rule a run can break: plain steps, a retried step, a parallel
group, a durable sleep, a wait for an event with a timeout, a recorded value and a
sub-run (a pipeline: `chaos_pipe` calls `chaos_child`; workers know only `chaos` and
`chaos_child`, so an orchestrator is executed by the pipeline runner, as in real use).

Every step function writes one ledger line per execution to a file outside the World
(one `write` on an O_APPEND descriptor, so a line is whole even if the process is
SIGKILLed right after): run id, the run's incarnation, step path, attempt, pid, start and
end time, and the output it returned (with a fresh token). The incarnation is the run's
first recorded uuid (`ctx.uuid()`, recorded as `value.recorded {key: "uuid/0"}`): a run id
reused after gc records a new one, and a resumed run reads the same one back.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from typing import Any

import little_workflow as lw

LEDGER_ENV = "LW_CHAOS_LEDGER"
STEP_SECONDS_ENV = "LW_CHAOS_STEP_SECONDS"
#: The recorded value that names a run's incarnation.
INCARNATION_KEY = "uuid/0"
#: The event name every wait of these workflows waits for.
EVENT = "poke"
#: Wait path -> the step that records what the wait returned (the checker compares).
WAIT_RESULT_STEPS = {"w": "got"}


def write_ledger(record: dict[str, Any]) -> None:
    line = (json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n").encode()
    fd = os.open(os.environ[LEDGER_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def ledgered(incarnation: str, value: Any, fail_first: bool = False) -> dict[str, Any]:
    """A step that records its execution: returns `{"token", "value"}`."""
    info = lw.current_step()
    started = time.time()
    time.sleep(float(os.environ.get(STEP_SECONDS_ENV, "0.03")))
    record = {"run": info.run_id, "inc": incarnation, "path": info.step_path,
              "attempt": info.attempt, "pid": os.getpid(), "started": started}
    if fail_first and info.attempt == 1:
        write_ledger({**record, "ended": time.time(), "outcome": "raised", "output": None})
        raise RuntimeError("chaos: a first attempt fails, the retry succeeds")
    output = {"token": uuid.uuid4().hex[:16], "value": value}
    write_ledger({**record, "ended": time.time(), "outcome": "returned", "output": output})
    return output


@lw.workflow(id="chaos")
async def chaos(ctx: lw.RunContext, input: dict) -> dict:
    inc = str(ctx.uuid())
    n = input["n"]
    first = await ctx.step("a", ledgered, inc, n)
    await ctx.step("flaky", ledgered, inc, n + 1, True,
                   retry=lw.Retry(max_attempts=3, backoff=0.02))
    group = await ctx.parallel("p", [lambda i=i: ledgered(inc, n * 10 + i) for i in range(3)])
    await ctx.sleep("nap", input["sleep"])
    got = await ctx.wait_for_event("w", EVENT, timeout=input["wait"])
    await ctx.step("got", ledgered, inc, got)
    last = await ctx.step("z", ledgered, inc, [first["token"]] + [g["token"] for g in group])
    return {"inc": inc, "got": got, "z": last["token"]}


@lw.workflow(id="chaos_child")
async def chaos_child(ctx: lw.RunContext, input: dict) -> dict:
    inc = str(ctx.uuid())
    await ctx.step("a", ledgered, inc, input["n"])
    await ctx.sleep("nap", input["sleep"])
    got = await ctx.wait_for_event("w", EVENT, timeout=input["wait"])
    await ctx.step("got", ledgered, inc, got)
    return {"inc": inc, "got": got}


@lw.workflow(id="chaos_pipe")
async def chaos_pipe(ctx: lw.RunContext, input: dict) -> dict:
    inc = str(ctx.uuid())
    await ctx.step("pre", ledgered, inc, input["n"])
    child = await ctx.call_workflow("chaos_child", {**input, "n": input["n"] + 1})
    last = await ctx.step("post", ledgered, inc, child)
    return {"inc": inc, "child": child, "post": last["token"]}


#: What workers are given (an orchestrator needs its pipeline, which a worker lacks).
WORKER_TARGETS = ["chaos.flows:chaos", "chaos.flows:chaos_child"]


def run_pipe(world: Any, run_id: str, input: dict) -> lw.RunResult:
    return lw.run_pipeline([chaos_child], input, orchestrator=chaos_pipe, world=world,
                           run_id=run_id)
