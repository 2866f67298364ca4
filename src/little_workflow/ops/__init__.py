"""Tools over a World, not part of it: the run inspector (HTML) and the local UI server.

They read a World only through its public API (`list_events`, `list_runs`) and
`materialize_run_state`, so they work on every World and never depend on a layout.
"""

from typing import Any

__all__ = ["render_run_html", "run_page_data", "run_summary"]


def __getattr__(name: str) -> Any:
    # Imported when used: `little runs` loads ops.cli_support without the inspector.
    if name in __all__:
        from . import inspect

        return getattr(inspect, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
