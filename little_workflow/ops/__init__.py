"""Tools over a World, not part of it: the run inspector (HTML) and the local UI server.

They read a World only through its public API (`list_events`, `list_runs`) and
`materialize_run_state`, so they work on every World and never depend on a layout.
"""

from .inspect import render_run_html, run_page_data, run_summary

__all__ = ["render_run_html", "run_page_data", "run_summary"]
