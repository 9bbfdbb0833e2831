"""The report: a run folder's report.md, self-contained report.html and figures, computed from its rows.

Modules, bottom up: analysis (pure numbers), formatting (numbers for people), page (the block
types) and render (Markdown, HTML); the sections (overview, findings, figures, vs_published, cells,
study_results); plotting (shared figure helpers) and plots (one PNG each); maps (effective attention
maps); compare (two runs cell by cell); document (write_report, which puts them together).

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
        from harness.report.document import write_report

        return write_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
