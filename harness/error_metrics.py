"""What an error budget bounds: the metrics, their names for people, a row's error in one, and how a budget reads.

A leaf (it imports nothing of ours): the search (harness.measure.tuning, its scoring in harness.measure.accuracy), the
planner and the report share it.
"""

from __future__ import annotations

from typing import Any, Mapping

ERROR_METRICS = ("rel_l2", "cosine")  # what an error budget bounds: relative L2 error, or 1 - cosine similarity
METRIC_NAMES = {"rel_l2": "relative L2 error", "cosine": "1 - cosine similarity"}


def metric_error(fields: Mapping[str, Any], metric: str) -> Any:
    """The error an error budget in `metric` bounds, from a checked call's fields or a frame of rows (then a Series):
    the relative L2 error, or 1 - the cosine similarity. The search, the report and anything else that scores a
    budget call this."""
    if metric == "rel_l2":
        return fields["rel_l2_error"]
    if metric == "cosine":
        return 1.0 - fields["cosine"]
    raise ValueError(f"unknown error metric {metric!r}; expected one of {', '.join(ERROR_METRICS)}")


def budget_label(budget: float, metric: str = "rel_l2", *, ascii: bool = True) -> str:
    """How a budget reads: 'rel_l2<=0.05', '1-cos<=0.01' (1 - cosine similarity); 'rel_l2 ≤ 0.05' for people (ascii False)."""
    name = "1-cos" if metric == "cosine" else "rel_l2"
    return f"{name}<={budget:g}" if ascii else f"{name} ≤ {budget:g}"
