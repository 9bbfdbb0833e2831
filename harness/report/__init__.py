"""The report: a run folder's report.md, self-contained report.html and figures, computed from its rows.

Modules, bottom up: analysis (pure numbers), budgets (error budgets and each row's error), choice (the
answer tables), formatting (numbers for people), columns (the measured columns, declared once), page (the
block types) and render (Markdown, HTML); analysed (a run analysed once: what every rendering takes);
plotting (shared figure helpers), plots (one PNG each), winner_map, maps, maps_isolated and maps_plot
(effective attention maps) and figures (every figure declared once); the sections (overview, findings, scopes,
vs_published with published, cells, study_results); summary (what a sweep prints at the end); compare
(two runs cell by cell) and compare_output (its printed summary, compare.md, compare.csv); document (write_report, which puts them together).

Importing the package does no work and pulls in neither pandas nor matplotlib: ``write_report``
is loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.report.document import write_report

__all__ = ["write_report"]


def __getattr__(name: str) -> Any:
    if name == "write_report":
        from harness.report.document import write_report  # pandas and matplotlib: loaded on first use

        return write_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
