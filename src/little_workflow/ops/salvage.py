"""What can still be read from a damaged `events.db` (`little verify` on a store the World
refuses to open): run by run, through a read-only SQLite connection, so a bad page costs
the runs stored on it and not the whole report."""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from ..world.ids import RUN_ID_RE


@dataclass
class SalvageReport:
    db_path: str
    damage: str
    readable: dict[str, int] = field(default_factory=dict)  # run id -> events read
    unreadable: dict[str, str] = field(default_factory=dict)  # run id -> what failed

    def to_json_dict(self) -> dict[str, Any]:
        return {"ok": False, "damaged": f"{self.db_path}: {self.damage}",
                "readableRuns": self.readable, "unreadableRuns": self.unreadable}


def _run_ids(conn: sqlite3.Connection, data_dir: str) -> set[str]:
    """Every run id named by the table (as far as it reads) or by a run's folder (each
    run has runs/<id>/scratch), so runs on a bad page are still named."""
    ids: set[str] = set()
    runs_dir = os.path.join(data_dir, "runs")
    if os.path.isdir(runs_dir):
        ids.update(n for n in os.listdir(runs_dir) if RUN_ID_RE.fullmatch(n))
    try:
        for (run_id,) in conn.execute("SELECT DISTINCT run_id FROM events"):
            ids.add(run_id)
    except sqlite3.DatabaseError:
        pass  # the scan stops at the first bad page: the folders name the rest
    return ids


def salvage_events(data_dir: str, damage: str) -> SalvageReport:
    db_path = os.path.join(data_dir, "events", "events.db")
    report = SalvageReport(db_path, damage)
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        for run_id in sorted(_run_ids(conn, data_dir)):
            try:
                rows = conn.execute("SELECT sequence, envelope FROM events WHERE run_id = ?"
                                    " ORDER BY sequence", (run_id,)).fetchall()
                for expected, (sequence, envelope) in enumerate(rows, start=1):
                    if sequence != expected:
                        raise ValueError(f"event {expected} is missing")
                    json.loads(envelope)
                if not rows:
                    raise ValueError("no event of it can be read")
                report.readable[run_id] = len(rows)
            except (sqlite3.DatabaseError, ValueError) as e:
                report.unreadable[run_id] = str(e)
    finally:
        conn.close()
    return report
