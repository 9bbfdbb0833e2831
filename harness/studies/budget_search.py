"""Error budgets in model-eval (`--error-budgets`): the cheapest quality-knob value whose error inside the model, on
the calibration texts, stays within each budget; the studies then evaluate that config on the evaluation texts.

The semantics are the sweep's (harness.measure.tuning): a variant is matched to every budget when it declares a
quality knob the user left free (harness.plan.matched_budgets), the knob is searched over knob_range's range (the
declared one at the length, its top capped at half dense attention's FLOPs) by the same search_knob (the top first,
doubling from the bottom, geometric bisection), and the errors of the values tried are kept across a variant's
budgets at one length. Only the error differs: the study's (for a causal LM one of ERRORS: KL, the relative perplexity
increase, or greedy disagreement with dense; the encoder's 1 - mean embedding cosine), measured on calibration texts,
never on the ones evaluated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.measure.timer import Stopwatch
from harness.measure.tuning import knob_range_at, search_knob
from harness.plan import matched_budgets
from harness.report.study_outcomes import with_outcome
from variants import build_variant, get_variant

Shape = tuple[int, int, int, int, int, bool]  # (B, H, N, M, D, causal) the knob's FLOP cap is counted on


def budgets_for(name: str, budgets: tuple[float, ...], overrides: dict[str, Any] | None) -> tuple[float | None, ...]:
    """The budgets variant `name` is matched to (None: its config as given, measured once)."""
    return matched_budgets(budgets, get_variant(name).cls, overrides or {})


@dataclass
class Match:
    """One budget's search: the config to evaluate (None: unreachable), and the row fields that describe it."""

    fields: dict[str, Any] | None  # the variant's config fields with the knob at the value found
    config: dict[
        str, Any
    ]  # what the row shows as its config: the value found, or the top of the range when unreachable
    tuning: dict[str, Any]  # knob, low, high, bound, budget, metric, tried (value -> error), evaluated
    tuning_s: float
    reason: str | None = None  # why the budget is unreachable
    error: float | None = None  # the error of the value found (or of the top), on the calibration texts


@dataclass
class Searcher:
    """Searches one variant at one length for each budget, reusing the errors of the values already tried."""

    name: str
    fields: dict[str, Any]  # the variant's config fields at this length (overrides applied, the knob left free)
    shape: Shape
    kv_heads: int | None
    metric: str  # the error's name for people, e.g. "perplexity increase"
    error_of: Callable[[dict[str, Any]], float]  # config fields -> error on the calibration texts
    tried: dict[int, float] = field(default_factory=dict)

    def match(self, budget: float) -> Match:
        knob, low, high, bound = knob_range_at(self.name, self.fields, self.shape, kv_heads=self.kv_heads)
        record: dict[str, Any] = {"knob": knob, "low": low, "high": high, "bound": bound, "budget": budget}
        record.update(metric=self.metric, texts="calibration", evaluated=0)

        def evaluate(value: int) -> float:
            record["evaluated"] += 1
            return self.error_of({**self.fields, knob: value})

        if high is None:
            reason = f"{knob} {low}, {bound} (nothing cheaper to search), for the budget {budget:g}"
            return Match(None, {**self.fields, knob: low}, {**record, "tried": {}}, 0.0, reason)
        with Stopwatch() as watch:
            value = search_knob(evaluate, budget, low, high, tried=self.tried)
        seconds = watch.seconds
        record["tried"] = {str(v): self.tried[v] for v in sorted(self.tried)}
        if value is None:
            reason = (
                f"{self.metric} {self.tried[high]:.3g} at {knob} {high}, {bound} (searched {low}-{high} on the "
                f"calibration texts), is above the budget {budget:g}"
            )
            return Match(None, {**self.fields, knob: high}, record, seconds, reason, self.tried[high])
        found = {**self.fields, knob: value}
        return Match(found, found, record, seconds, error=self.tried[value])


def apply_match(
    row: dict[str, Any], name: str, fields: dict[str, Any], budget: float | None, searcher: "Searcher | None"
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """For a study row with a budget: the search's record into `row`, then (the fields found, None), or (fields,
    the finished `unreachable` row) when no value meets it; without a budget, (fields, None)."""
    if budget is None or searcher is None:
        return fields, None

    match = searcher.match(budget)
    row.update(tuning=match.tuning, tuning_s=match.tuning_s)
    if match.fields is None:
        config = build_variant(name, **match.config).config.to_dict()
        return fields, with_outcome({**row, "config": config}, "unreachable", match.reason)
    return match.fields, None


def label(row: dict[str, Any]) -> str:
    """A row's variant, with its budget when it has one: 'sliding_window', 'sliding_window@0.05'."""
    return row["variant"] if row.get("budget") is None else f"{row['variant']}@{row['budget']:g}"


def found(row: dict[str, Any]) -> str:
    """'window 64: ' for a row whose knob a budget chose, else ''."""
    tuning = row.get("tuning")
    return "" if not tuning or not row.get("config") else f"{tuning['knob']} {row['config'].get(tuning['knob'])}: "


# what --error-budgets can bound for a causal LM (--error-metric), and its name for people; the first is the default:
# KL is never negative, so a budget on it bounds the size of a change (a perplexity that fell passes any budget)
ERRORS = {
    "kl": "KL(dense||variant)",  # mean over next-token positions, in nats (0: the same distributions)
    "perplexity": "perplexity increase",  # perplexity / the unmodified model's - 1 (relative; negative: better)
    # 1 - greedy continuation agreement with dense (lm_generate) over --generate-tokens: a budget of 0.1 asks
    # agreement >= 0.9; searched by generating after the calibration windows
    "disagreement": "greedy disagreement with dense",
}


def budget_error(totals: dict[str, float], metric: str) -> float:
    """The error a budget in `metric` bounds, from lm_eval's sums over windows (inf when a sum is not finite)."""
    if not all(math.isfinite(v) for v in totals.values()):
        return math.inf
    if metric == "kl":
        return totals["kl"] / totals["count"]
    if metric != "perplexity":  # disagreement is generated, not summed over windows (lm_eval searches it apart)
        raise ValueError(f"budget_error: {metric!r} is not a summed metric; expected 'kl' or 'perplexity'")
    return math.exp((totals["nll"] - totals["nll_reference"]) / totals["count"]) - 1
