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


#: Scans that name run ids, each stopping at the first bad page it meets, so each is read
#: from both ends: the events' key (the whole table in a WITHOUT ROWID file, an index
#: beside the rows in a newer one), the rows in insertion order (newer files only), and
#: the run catalogue. A bad page costs the runs stored on it, not those behind it.
_RUN_ID_SCANS = tuple(
    f"SELECT {what} ORDER BY {order} {direction}"
    for what, order in (("DISTINCT run_id FROM events", "run_id"),
                        ("run_id FROM events NOT INDEXED", "rowid"),
                        ("run_id FROM runs", "run_id"))
    for direction in ("ASC", "DESC")
)


def _run_ids(conn: sqlite3.Connection, data_dir: str) -> set[str]:
    """Every run id named by the tables (as far as they read) or by a run's folder."""
    ids: set[str] = set()
    runs_dir = os.path.join(data_dir, "runs")
    if os.path.isdir(runs_dir):
        ids.update(n for n in os.listdir(runs_dir) if RUN_ID_RE.fullmatch(n))
    for scan in _RUN_ID_SCANS:
        try:
            for (run_id,) in conn.execute(scan):
                ids.add(run_id)
        except sqlite3.DatabaseError:
            pass  # a bad page, or no rowid / runs table in this file: the others go on
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
