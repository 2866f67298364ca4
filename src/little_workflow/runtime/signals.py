"""Messages to runs: `lw.send_event` appends `signal.received {name, payload}` to a run's
log; `ctx.wait_for_event` takes the first such event no earlier wait took.

Records of a wait: `wait.started {stepPath, name, deadline[, request]}` (`request`: what the
wait asks for, JSON, shown to whoever answers it — a tool approval's calls are listed by
`lw.pending_approvals`, approvals.py); `wait.timed_out {stepPath}`
once the deadline passed; `wait.completed {stepPath, name, signalSequence}` (null on a
timeout). Arrival against timeout is decided by log order: a wait that timed out at
sequence T still takes a matching event appended before T. A resumed or replayed run
therefore reaches the same answer from the same log — and so does the first execution:
an event another writer got in just before the run's `wait.timed_out` is folded in by
that append (its sequence jumps), before the wait picks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ReplayDivergenceError, RunFinishedError, RunNotFoundError, StepError
from ..world.clock import from_iso, to_iso
from ..world.ids import validate_run_id
from ..world.models import Event, thaw
from ..world.protocol import WorldLike
from .codec import PLAIN, Codec, ValueCodecError, encode_untyped
from .state import TERMINAL_STATUSES, RunLog, WaitRecord
from .telemetry import TRACE_CONTEXT, link_event, trace_fields
from .values import decode_stored, stored_value
from .waiting import RunSuspended, notify_run


def pick_signal(log: RunLog, name: str, before: int | None = None) -> tuple[int, Any] | None:
    """The first event named `name` that no wait took (and, when `before` is given,
    appended before that sequence)."""
    for sequence, signal_name, payload in sorted(log.signals, key=lambda s: s[0]):
        if before is not None and sequence >= before:
            break
        if signal_name == name and sequence not in log.taken:
            return sequence, payload
    return None


def signal_payload(ctx: Any, sequence: int | None, codec: Codec = PLAIN, path: str = "") -> Any:
    """What the event at `sequence` carried, read back as it was sent (typed by the
    wait's `type=`; a None payload stays None, as a timeout's answer)."""
    if sequence is None:
        return None
    for seq, _, payload in ctx.log.signals:
        if seq == sequence:
            value = stored_value(ctx.world, payload)
            if value is None:
                return None
            return decode_stored(codec, value, ctx.run_id, path, "event payload")
    return None


def waiting_for(path: str, rec: WaitRecord) -> dict[str, Any]:
    return {"kind": "event", "stepPath": path, "name": rec["name"], "deadline": rec["deadline"]}


async def wait_for_event(ctx: Any, path: str, name: str, timeout: float | None,
                         codec: Codec | None = None, request: Any = None) -> Any:
    codec = codec or PLAIN
    ctx.claim_path(path)
    if not isinstance(name, str) or not name:
        raise StepError(ctx.run_id, path, f"an event name is a non-empty string, not {name!r}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))):
        raise StepError(ctx.run_id, path, f"timeout is a number of seconds or None, not {timeout!r}")
    log = ctx.log
    rec: WaitRecord | None = log.waits.get(path)
    if rec is not None:
        ctx.asked(("wait", path))
    if ctx.replaying:
        if rec is None:
            raise ReplayDivergenceError(ctx.run_id, path, "the code waits where the log holds no wait")
        if not rec.get("completed"):
            raise RunSuspended(ctx.run_id, waiting_for(path, rec))
        return signal_payload(ctx, rec.get("signalSequence"), codec, path)
    if rec is not None and rec.get("completed"):
        return signal_payload(ctx, rec.get("signalSequence"), codec, path)
    clock = ctx.world.clock
    watch = ctx.watch
    if rec is None:
        if watch is not None:
            watch.at_boundary()
        deadline = None if timeout is None else to_iso(clock.now() + max(0.0, float(timeout)))
        started = {"stepPath": path, "name": name, "deadline": deadline}
        if request is not None:
            try:
                started["request"] = encode_untyped(request)
            except ValueCodecError as e:
                raise StepError(ctx.run_id, path, f"the wait's request {e.reason}") from None
        await ctx.append("wait.started", started)
        rec = log.waits[path]
    refreshed = False
    while True:
        if watch is not None:
            watch.stop_if_due()  # woke at the run's deadline, or a cancel request came
            watch.changed.clear()
        if rec.get("completed"):  # folded in: a holder that lost its lease ended this wait
            return signal_payload(ctx, rec.get("signalSequence"), codec, path)
        if rec["timedOutAt"] is not None:
            hit = pick_signal(log, name, before=rec["timedOutAt"])
            return await _complete(ctx, path, name, hit, codec)
        hit = pick_signal(log, name)
        if hit is not None:
            return await _complete(ctx, path, name, hit, codec)
        deadline_epoch = from_iso(rec["deadline"]) if rec["deadline"] else None
        if deadline_epoch is not None and deadline_epoch <= clock.now():
            await ctx.append("wait.timed_out", {"stepPath": path})
            continue
        if watch is None:
            raise RunSuspended(ctx.run_id, waiting_for(path, rec))
        if getattr(ctx, "suspend", False):
            if not refreshed:
                # An event may have come since the log was read: look once more.
                watch.refresh()
                refreshed = True
                continue
            raise RunSuspended(ctx.run_id, waiting_for(path, rec))
        await watch.wait_changed(deadline_epoch, clock)


async def _complete(ctx: Any, path: str, name: str, hit: tuple[int, Any] | None,
                    codec: Codec) -> Any:
    sequence = hit[0] if hit is not None else None
    value = stored_value(ctx.world, hit[1]) if hit is not None else None
    if value is not None and not codec.plain:
        try:  # before the wait records what it took: a payload that does not fit fails the run
            value = codec.decode(value)
        except ValueCodecError as e:
            raise StepError(ctx.run_id, path, f"the payload of event {name!r} (wanted "
                            f"{e.type_name}) {e.reason}") from None
    await ctx.append("wait.completed", {"stepPath": path, "name": name, "signalSequence": sequence})
    link_event(ctx, sequence)
    return value


def send_event(
    world: WorldLike, run_id: str, name: str, payload: Any = None, *, idempotency_key: str | None = None
) -> Event:
    """Send the event `name` with `payload` to run `run_id` (appended to its log as
    `signal.received`). The same `idempotency_key` with the same name and payload again is
    a no-op; with another one, `IdempotencyConflictError`. Unknown run:
    `RunNotFoundError`; finished run: `RunFinishedError`. A payload that is not JSON (a
    pydantic model, a dataclass, a datetime...) is stored as its JSON (typed again where
    it is read), sets sorted; one that cannot be is a TypeError."""
    validate_run_id(run_id)
    if not isinstance(name, str) or not name:
        raise ValueError(f"an event name is a non-empty string, not {name!r}")
    try:
        payload = encode_untyped(payload)
    except ValueCodecError as e:
        raise TypeError(f"event {name!r} for run {run_id}: the payload {e.reason} "
                        f"(a {e.type_name})") from None
    events = world.list_events(run_id)
    sent = next((e for e in events if idempotency_key is not None
                 and e.append_idempotency_key == idempotency_key), None)
    if sent is not None:
        # Already used: the World's receipt lookup returns the event sent with this key
        # when the request is the same, and raises IdempotencyConflictError when the name
        # or payload differ — on a finished run too (the lookup comes before the end check).
        # The trace context is the first sender's, so a resend from another trace is the
        # same request.
        first = sent.payload.get(TRACE_CONTEXT) if isinstance(sent.payload, Mapping) else None
        return world.append_event(run_id, "signal.received",
                                  {"name": name, "payload": payload,
                                   **({TRACE_CONTEXT: thaw(first)} if first is not None else {})},
                                  idempotency_key=idempotency_key)
    log = RunLog.fold(run_id, events)
    if log.created is None:
        raise RunNotFoundError(run_id, f" in {world.data_dir}")
    if log.status in TERMINAL_STATUSES:
        raise RunFinishedError(run_id, log.status, "signal.received")
    event = world.append_event(run_id, "signal.received",
                               {"name": name, "payload": payload, **trace_fields()},
                               idempotency_key=idempotency_key)
    notify_run(world, run_id)
    return event
