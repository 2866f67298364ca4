"""The run catalogue: one summary per run, kept as events are appended, so
that a page of runs costs O(limit), not O(runs).

Its rooms:

- `summary.py`: what a caller gets (`RunSummary`, `RunPage`) and the fold, written once
  (`summary_change`, `apply_change`, `fold_envelopes`);
- `query.py`: what a caller asks (`list_runs`, `RunQuery`, the cursor): every argument
  checked once, a bad one is `CatalogueQueryError`;
- `sqlite.py`: local_world's `runs` table in events.db, written in the same transaction
  as the event that changes it (`SqliteCatalogue`, called by `SqliteEventStore`);
- `tracker.py`: what this process folded of each run since it wrote its summary;
- `files.py`: file and object-store Worlds' summary documents and key indexes (its
  docstring is the write protocol that keeps them honest through cuts and races).
The log stays the truth: a summary is written only after its event is published, so it
may lag (a crash in between) but never shows a status the log does not have.
"""

from __future__ import annotations

from .query import (
    MAX_CURSOR_CHARS,
    MAX_LIMIT,
    MAX_POSITION_US,
    RunQuery,
    build_query,
    decode_cursor,
    encode_cursor,
    key_position,
    list_runs,
    order_key,
)
from .sqlite import (
    SqliteCatalogue,
    StoreCatalogue,
)
from .summary import (
    FINISHED_STATUSES,
    MAX_US,
    PROGRESS_FROM,
    STATUSES,
    SUMMARY_FIELDS,
    TERMINAL,
    ChangeKind,
    RunPage,
    RunSummary,
    SummaryChange,
    SummaryDoc,
    apply_change,
    changes_status,
    created_us,
    fold_envelopes,
    iso,
    micros,
    parse_time,
    summary_change,
    summary_json,
    summary_lags,
)
from .tracker import (
    CACHE_LIMIT,
    CachedSummary,
    SummaryTracker,
    progress_printer,
)

__all__ = [
    "CACHE_LIMIT",
    "CachedSummary",
    "ChangeKind",
    "FINISHED_STATUSES",
    "MAX_CURSOR_CHARS",
    "MAX_LIMIT",
    "MAX_POSITION_US",
    "MAX_US",
    "PROGRESS_FROM",
    "RunPage",
    "RunQuery",
    "RunSummary",
    "STATUSES",
    "SUMMARY_FIELDS",
    "SqliteCatalogue",
    "StoreCatalogue",
    "SummaryChange",
    "SummaryDoc",
    "SummaryTracker",
    "TERMINAL",
    "apply_change",
    "build_query",
    "changes_status",
    "created_us",
    "decode_cursor",
    "encode_cursor",
    "fold_envelopes",
    "iso",
    "key_position",
    "list_runs",
    "micros",
    "order_key",
    "parse_time",
    "progress_printer",
    "summary_change",
    "summary_json",
    "summary_lags",
]
