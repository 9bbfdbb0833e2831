"""The report: a run folder's report.md, self-contained report.html and figures, computed from its rows.

Modules by job, bottom up: render (numbers for people, the page model, Markdown and HTML); analysis (settings, dense
ratios, error budgets, Pareto fronts) and clock (which clock answers, contention); scaling (exponents, crossovers, the
Scaling and layer sections) and lengths (the longest N each series ran, and trains within a memory budget); choice
(the answer tables), analysed (a run analysed once: what every rendering takes) and reach (searches that met no
budget); tables (the measured columns declared once, the cell tables, the terminal table) and overview (environment,
outcome, load); plotting (shared figure helpers), curves, tradeoffs and heatmaps (the drawings; maps, maps_isolated
and maps_plot make the effective attention maps) and figures (every figure declared once); findings (the answer in
words: the report's and the sweep's), published (the papers' numbers beside ours), study_results; compare (two runs
matched, and its output) with verdicts (one cell judged); document (write_report, which puts them together).

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
