"""What a caller asks (`list_runs`, `RunQuery`, the cursor): every argument checked
once, a bad one is `CatalogueQueryError`; a page costs O(limit), not O(runs)."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable

from ...errors import CatalogueQueryError
from ..ids import RUN_ID_RE
from .summary import (
    MAX_US,
    STATUSES,
    RunPage,
    RunSummary,
    SummaryDoc,
    created_us,
)

# --- a query: arguments checked once, cursors ----------------------------------------------

@dataclass(frozen=True)
class RunQuery:
    statuses: tuple[str, ...] | None
    workflow_id: str | None
    parent_run_id: str | None
    after_us: int | None  # created_at >= this
    before_us: int | None  # created_at < this
    limit: int
    #: (created µs, run id) of the last run of the previous page
    position: tuple[int, str] | None

    def matches(self, doc: SummaryDoc) -> bool:
        if self.statuses is not None and doc.get("status") not in self.statuses:
            return False
        if self.workflow_id is not None and doc.get("workflowId") != self.workflow_id:
            return False
        if self.parent_run_id is not None and doc.get("parentRunId") != self.parent_run_id:
            return False
        us = created_us(doc)
        if self.after_us is not None and us < self.after_us:
            return False
        if self.before_us is not None and us >= self.before_us:
            return False
        if self.position is not None:
            # Newest first, ties by run id: only what comes after the cursor's run.
            at_us, at_run = self.position
            return us < at_us or (us == at_us and doc["runId"] > at_run)
        return True


def order_key(us: int, run_id: str) -> str:
    """A name that sorts newest first, ties by run id."""
    return f"{MAX_US - us:016d}_{run_id}"


def key_position(key: str) -> tuple[int, str] | None:
    head, _, run_id = key.partition("_")
    if len(head) != 16 or not head.isdigit() or not RUN_ID_RE.fullmatch(run_id):
        return None
    return MAX_US - int(head), run_id


def encode_cursor(us: int, run_id: str) -> str:
    raw = json.dumps([1, us, run_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


#: The largest page `list_runs` hands out (a caller wanting more pages with the cursor).
MAX_LIMIT = 10_000
#: Cursors are short: anything longer was not handed out (and is not worth decoding).
MAX_CURSOR_CHARS = 1000
#: Positions a cursor may hold: far wider than any clock, narrower than SQLite's integers.
MAX_POSITION_US = 2**62


def decode_cursor(cursor: str) -> tuple[int, str]:
    def refuse() -> CatalogueQueryError:
        shown = cursor if len(cursor) <= 60 else cursor[:57] + "..."
        return CatalogueQueryError(
            "cursor", f"{shown!r} is not a cursor list_runs handed out (pass next_cursor as it is)")

    if len(cursor) > MAX_CURSOR_CHARS:
        raise refuse()
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (ValueError, RecursionError):  # bad base64 or JSON (UnicodeDecodeError is one)
        raise refuse() from None
    if not (isinstance(value, list) and len(value) == 3 and value[0] == 1
            and type(value[1]) is int and -MAX_POSITION_US <= value[1] <= MAX_POSITION_US
            and isinstance(value[2], str) and RUN_ID_RE.fullmatch(value[2])):
        raise refuse()
    return value[1], value[2]


def _moment(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise CatalogueQueryError(name, f"expected an aware datetime, got {type(value).__name__}")
    try:
        offset = value.utcoffset()
        if offset is None:
            raise CatalogueQueryError(name, "the datetime has no timezone (use tzinfo=timezone.utc)")
        # On timedeltas: exact for every datetime from year 1 to 9999, whatever its offset.
        return ((value.replace(tzinfo=None) - _EPOCH_NAIVE) - offset) // _ONE_US
    except CatalogueQueryError:
        raise
    except (ValueError, TypeError, OverflowError, ArithmeticError) as e:
        raise CatalogueQueryError(name, f"the datetime's timezone cannot be read: {e}") from None


_EPOCH_NAIVE = datetime(1970, 1, 1)
_ONE_US = datetime.resolution


def _text(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise CatalogueQueryError(name, f"expected a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise CatalogueQueryError(name, f"{value!r} is not valid text (a lone surrogate)") from None
    return value


def _statuses(status: Any) -> tuple[str, ...] | None:
    if status is None:
        return None
    if isinstance(status, str):
        items: tuple[Any, ...] = (status,)
    elif isinstance(status, (bytes, bytearray, dict)) or not hasattr(status, "__iter__"):
        raise CatalogueQueryError("status", f"a status or a list of statuses, not {type(status).__name__}")
    else:
        items = tuple(status)
    for s in items:
        if not isinstance(s, str) or s not in STATUSES:
            raise CatalogueQueryError("status", f"unknown status {s!r}; one of {', '.join(STATUSES)}")
    if not items:
        raise CatalogueQueryError("status", "an empty list matches nothing; pass None for all")
    return tuple(sorted(set(items)))


def build_query(*, status: Any, workflow_id: Any, created_after: Any, created_before: Any,
                parent_run_id: Any, limit: Any, cursor: Any) -> RunQuery:
    statuses = _statuses(status)
    if type(limit) is not int or not 1 <= limit <= MAX_LIMIT:
        raise CatalogueQueryError("limit", f"must be an integer from 1 to at most {MAX_LIMIT} "
                                  f"(page on with the cursor), not {limit!r}")
    workflow_id = _text("workflow_id", workflow_id)
    parent_run_id = _text("parent_run_id", parent_run_id)
    if parent_run_id is not None and not RUN_ID_RE.fullmatch(parent_run_id):
        raise CatalogueQueryError("parent_run_id", f"{parent_run_id!r} is not a run id "
                                  "(run_ followed by 1 to 80 letters, digits, _ or -)")
    if cursor is not None and not isinstance(cursor, str):
        raise CatalogueQueryError("cursor", f"expected the string next_cursor, got {type(cursor).__name__}")
    return RunQuery(statuses=statuses, workflow_id=workflow_id, parent_run_id=parent_run_id,
                    after_us=_moment("created_after", created_after),
                    before_us=_moment("created_before", created_before), limit=limit,
                    position=decode_cursor(cursor) if cursor else None)


def list_runs(world: Any, *, status: str | Iterable[str] | None = None,
              workflow_id: str | None = None, created_after: datetime | None = None,
              created_before: datetime | None = None, parent_run_id: str | None = None,
              limit: int = 50, cursor: str | None = None) -> RunPage:
    """A page of runs from the World's catalogue, newest first by `created_at` (ties by
    run id), filters combined with AND: `status` one value or a list, `workflow_id`,
    `created_after` (inclusive) and `created_before` (exclusive) as aware datetimes,
    `parent_run_id` (sub-runs of a pipeline). `next_cursor` gives the next page; a page
    is consistent with the runs that existed when the first page was read plus any
    created since. Costs O(limit), not O(runs). Bad arguments raise
    `lw.CatalogueQueryError` naming the argument."""
    query = build_query(status=status, workflow_id=workflow_id, created_after=created_after,
                        created_before=created_before, parent_run_id=parent_run_id,
                        limit=limit, cursor=cursor)
    catalogue = getattr(world, "catalogue", None)
    if catalogue is None:
        raise TypeError(f"{world!r} is not a World with a run catalogue")
    docs = catalogue.page(query, query.limit + 1)
    more = len(docs) > query.limit
    docs = docs[: query.limit]
    runs = [RunSummary.from_doc(d) for d in docs]
    last = docs[-1] if docs and more else None
    return RunPage(runs=runs, next_cursor=encode_cursor(created_us(last), last["runId"]) if last else None)
