"""Bugs put on purpose into the processes of a chaos run, to prove the history checker
catches each (tests/test_chaos_mutants.py). A test-only patch applied at the start of a
child process when `LW_CHAOS_MUTANT` names a mutant — the product has no such switch.

Each mutant is a bug the checker once missed (issue 27):
- `cancel-keeps-sub-runs`: cancelling a run does not cancel its sub-runs (a drain
  worker then finishes the orphans, so only a look before the drain sees it);
- `catalogue-ignores-completed`: the run catalogue folds `run.completed` as nothing;
- `send-drops-idempotency-key`: `send_event` sends without its idempotency key;
- `signal-lost-before-timeout`: a wait whose timeout is recorded does not take the
  event that reached the log before it.
"""

from __future__ import annotations

import os
from typing import Any, Callable

MUTANT_ENV = "LW_CHAOS_MUTANT"
#: What `little` runs as in a chaos process: the mutant (if any) first.
CLI_CODE = ("import chaos.mutants as m; m.install_from_env(); "
            "from little_workflow.cli import main; main()")


def _cancel_keeps_sub_runs() -> None:
    from little_workflow.runtime import cancel, runner, waiting

    def cancel_none(*args: Any, **kwargs: Any) -> None:
        return None

    cancel.cancel_sub_runs = cancel_none
    waiting.request_sub_run_cancels = cancel_none
    # and the sub-run's own look at its parent (else a resumed orphan still ends)
    runner.cancel_if_parent_cancelled = cancel_none  # type: ignore[attr-defined]


def _catalogue_ignores_completed() -> None:
    from little_workflow.world import append
    from little_workflow.world.catalogue import files, sqlite, summary

    real = summary.summary_change

    def summary_change(type_: str, payload: Any, created_at: str) -> Any:
        return None if type_ == "run.completed" else real(type_, payload, created_at)

    for module in (summary, append, files):
        module.summary_change = summary_change  # type: ignore[attr-defined]
    real_fold = summary.fold_envelopes

    def fold_envelopes(run_id: str, envelopes: Any) -> Any:
        return real_fold(run_id, (e for e in envelopes if e.get("type") != "run.completed"))

    for module in (sqlite, files):
        module.fold_envelopes = fold_envelopes  # type: ignore[attr-defined]


def _send_drops_idempotency_key() -> None:
    import little_workflow as lw
    from little_workflow.runtime import signals

    real = signals.send_event

    def send_event(world: Any, run_id: str, name: str, payload: Any = None, *,
                   idempotency_key: str | None = None) -> Any:
        return real(world, run_id, name, payload)

    signals.send_event = send_event
    lw.send_event = send_event  # type: ignore[attr-defined]


def _signal_lost_before_timeout() -> None:
    from little_workflow.runtime import signals

    real = signals.pick_signal

    def pick_signal(log: Any, name: str, before: int | None = None) -> Any:
        return None if before is not None else real(log, name)

    signals.pick_signal = pick_signal


MUTANTS: dict[str, Callable[[], None]] = {
    "cancel-keeps-sub-runs": _cancel_keeps_sub_runs,
    "catalogue-ignores-completed": _catalogue_ignores_completed,
    "send-drops-idempotency-key": _send_drops_idempotency_key,
    "signal-lost-before-timeout": _signal_lost_before_timeout,
}


def install(name: str | None) -> None:
    if not name:
        return
    MUTANTS[name]()


def install_from_env() -> None:
    install(os.environ.get(MUTANT_ENV))
