"""`little events RUN_ID --follow`: print events as they are appended, until the run ends."""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from ..world.protocol import WorldLike
from .inspect import TERMINAL_EVENTS

#: Wide enough for the longest event type the runtime writes (harness.model_call.succeeded).
TYPE_WIDTH = 28


def event_line(e: Any) -> str:
    p = e.payload if isinstance(e.payload, dict) else {}
    detail = p.get("stepPath") or p.get("callPath") or p.get("name") or p.get("workflowId") or ""
    error = p.get("error")
    if isinstance(error, dict):
        detail = f"{detail} {error.get('type', 'Error')}: {error.get('message', '')}".strip()
    # Fixed-width columns first, the free-length detail last, so every column lines up.
    return f"{e.sequence:>6}  {e.type:<{TYPE_WIDTH}}  {e.created_at}  {detail}".rstrip()


def follow_events(world: WorldLike, run_id: str, *, as_json: bool = False,
                  say: Callable[[str], None] = print, poll_seconds: float = 0.25) -> None:
    """Print every event of the run, then each new one as it is appended; return after the
    terminal event (`run.completed`, `run.failed`, `run.cancelled`). Polls the World, so
    it follows a run written by another process or host."""
    after = 0
    while True:
        for e in world.list_events(run_id, after=after):
            say(json.dumps(e.to_json_dict(), ensure_ascii=False, default=str) if as_json
                else event_line(e))
            after = e.sequence
            if e.type in TERMINAL_EVENTS:
                return
        time.sleep(poll_seconds)
