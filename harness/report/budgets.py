"""Error budgets in the report: which budgets a run answers for, each row's error in the run's metric, and
which rows are candidates within a budget (the rest are "outside every budget", never a winner).

Conventions (documented here once):
- A run's budgets and metric are its spec.toml's `error_budgets` and `error_metric`; a run without
  budgets (older runs, or none asked for) is answered for DEFAULT_BUDGETS in relative L2 error.
- A row's error is its relative L2 error, or 1 - cosine similarity for the cosine metric.
- A row is a candidate at budget b when its error on the evaluation seed is at most b, or when it was
  matched to b (searched on calibration seeds) and its error is at most b * (1 + GENERALISATION_MARGIN):
  the search scores other tensors than the evaluation's, so a tuned config may land a little above.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from harness.error_metrics import METRIC_NAMES, metric_error

DEFAULT_BUDGETS = (1e-2, 1e-1)  # relative L2 error budgets for a run that asked for none: near-exact and approximate
GENERALISATION_MARGIN = 0.1  # a matched row may exceed its budget by 10% on the evaluation seed (see the module doc)


def run_budgets(spec: dict) -> tuple[tuple[float, ...], str]:
    """(the budgets, the metric) a run answers for, from its spec.toml's values (DEFAULT_BUDGETS, rel_l2 when it has none)."""
    metric = spec.get("error_metric") if spec.get("error_metric") in METRIC_NAMES else "rel_l2"
    raw = spec.get("error_budgets") or []
    budgets = tuple(
        sorted({float(b) for b in raw if isinstance(b, (int, float)) and not isinstance(b, bool) and b > 0})
    )
    return (budgets, metric) if budgets else (DEFAULT_BUDGETS, "rel_l2")


def within(frame: pd.DataFrame, budget: float, metric: str) -> pd.Series:
    """True for the rows that are candidates at `budget` (see the module doc); False where the error is missing."""
    error = metric_error(frame, metric)
    matched = pd.to_numeric(frame["matched_budget"], errors="coerce") if "matched_budget" in frame else np.nan
    tuned_here = np.isclose(matched, budget) if not isinstance(matched, float) else False
    return (error <= budget) | (tuned_here & (error <= budget * (1 + GENERALISATION_MARGIN)))


def with_budgets(frame: pd.DataFrame, budgets: Sequence[float], metric: str) -> pd.DataFrame:
    """A copy of frame with "error" (in the metric) and "in_budget" (a candidate at the largest budget)."""
    out = frame.copy()
    out["error"] = metric_error(out, metric) if len(out) else pd.Series(dtype=float)
    out["in_budget"] = within(out, max(budgets), metric) if len(out) else pd.Series(dtype=bool)
    return out


def budget_text(budget: float, metric: str) -> str:
    """'0.05' for relative L2; '1-cos 0.05' for cosine."""
    value = f"{budget:g}" if math.isfinite(budget) else "-"
    return value if metric == "rel_l2" else f"1-cos {value}"
