"""Error-budget search: the cheapest value of a variant's quality knob whose error meets a budget, on calibration seeds.

Range (knob_range): the knob's declared range at the cell's key length, its top lowered to the largest value doing at
most MAX_FLOPS_FRACTION of dense attention's analytic FLOPs (more is dense attention done the slow way, not worth
finding).

Fields searched with the knob (QualityKnob.searched_with, sliding_window's sinks in {0, 4}): the knob is searched at
each of their combinations, and the config with the fewest FLOPs (counted with those fields) that meets the budget wins.

Search (search_knob): the largest value first (if even it misses the budget, the budget is unreachable after one
evaluation), then doubling from the smallest until a value meets it, then geometric bisection between the last value
that missed and the first that met until they are within TOLERANCE of each other. Errors are taken to fall as the knob
grows (a wider window, a longer projection, more features). Each value is scored (harness.measure.accuracy.score_value,
on scoring_seeds) once per cell setting in one process: MeasureContext.tuned keeps the errors across a run's budgets,
so with the local executor a second budget mostly reuses the first one's evaluations (the subprocess, Ray and Slurm
executors give each cell a fresh process, which searches afresh).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from harness.error_metrics import METRIC_NAMES
from harness.measure.accuracy import score_value, scoring_batches, scoring_seeds
from harness.measure.context import MeasureContext
from harness.measure.settings import MeasureSettings
from harness.measure.timer import Stopwatch
from harness.schema import Cell
from variants import build_config, build_variant, count_flops, dense_flops, get_variant

# The top of a searched range: values doing at most this fraction of dense attention's analytic FLOPs. The
# structured variants run at a lower FLOP rate than a fused dense kernel (a window covering 55% of the pairs
# measured 0.91x dense on CPU), so a config doing more than half the work cannot be what a budget is met with.
MAX_FLOPS_FRACTION = 0.5
TOLERANCE = 1.25  # bisection stops when the passing value is within 25% of the largest value known to miss


@dataclass(frozen=True)
class Tuned:
    """The record of a cell's search: its row fields, and the cell found, or why there is none."""

    fields: dict[str, Any]  # config (the knob at the value chosen; None if the search chose none), tuning, tuning_s
    cell: Cell | None = None  # the cell to measure, at the value found (None: unreachable, or the search failed)
    reason: str | None = None  # why the budget is unreachable
    # what stopped the search (out of memory, the time limit): raised by the caller
    failure: BaseException | None = None


def tune(
    cell: Cell,
    settings: MeasureSettings,
    context: MeasureContext,
    device: torch.device,
    inputs: tuple[str, dict[str, Any]],
) -> Tuned:
    """Search the cell's variant's quality knob for cell.matched_budget (see the module doc) and return the search's record.

    A knob searched with other fields (QualityKnob.searched_with: sliding_window's sinks in {0, 4}) is searched at each
    of their combinations; the cheapest config within the budget wins (FLOPs counted with those fields, the first
    combination on a tie), and the record lists every combination's search under "options". A search that fails (out
    of memory, the cell's time limit) returns the failure with the values tried so far and no knob value it never
    chose, so the row shows how far it got; only Ctrl-C escapes.
    """
    options, searches = search_options(cell), []
    for option in options:  # a failure (out of memory, the time limit) ends the search: it is the record
        searches.append(
            _search(dataclasses.replace(cell, config={**cell.config, **option}), settings, context, device, inputs)
        )
        if searches[-1].failure is not None:
            break
    found = [(config_flops(t.cell, t.cell.config), i) for i, t in enumerate(searches) if t.cell is not None]
    failed = searches[-1] if searches[-1].failure is not None else None
    # a failure first; then the cheapest found; else the combination that came closest at the top of its range
    chosen = failed or (searches[min(found)[1]] if found else min(searches, key=_top_error))
    if len(options) == 1:
        return chosen
    fields = {
        **chosen.fields,
        "tuning": {**chosen.fields["tuning"], "options": [_option_record(o, t) for o, t in zip(options, searches)]},
        "tuning_s": sum(t.fields["tuning_s"] for t in searches),
    }
    return dataclasses.replace(chosen, fields=fields)


def search_options(cell: Cell) -> list[dict[str, int]]:
    """The combinations of the fields searched with the cell's knob (QualityKnob.searched_with): [{}] when none."""
    declared = get_variant(cell.variant).cls.quality_knob.searched_with
    names = [name for name, _ in declared]
    return [dict(zip(names, values)) for values in itertools.product(*(values for _, values in declared))]


def _option_record(option: dict[str, int], tuned: Tuned) -> dict[str, Any]:
    """One combination's search as the record lists it: its fields, the knob value it found (None: none), what it tried."""
    record = tuned.fields["tuning"]
    value = tuned.cell.config[record["knob"]] if tuned.cell is not None else None
    return {**option, "value": value, "high": record["high"], "tried": record["tried"]}


def _top_error(tuned: Tuned) -> float:
    """The error at the top of a search's range (inf where none was scored): how close an unreachable one came."""
    record = tuned.fields["tuning"]
    error = record["tried"].get(str(record["high"]))
    return float(error) if isinstance(error, (int, float)) and not math.isnan(error) else math.inf


def _search(
    cell: Cell,
    settings: MeasureSettings,
    context: MeasureContext,
    device: torch.device,
    inputs: tuple[str, dict[str, Any]],
) -> Tuned:
    """The search of the cell's knob with the rest of its config as given (tune's one combination)."""
    field_name, low, high, bound = knob_range(cell)
    budget, metric = float(cell.matched_budget), cell.error_metric
    tried = context.tuned.setdefault(search_key(cell), {})
    seeds = scoring_seeds(cell.seed, settings.calibration_batches)
    record = {
        "knob": field_name,
        "low": low,
        "high": high,
        "bound": bound,
        "budget": budget,
        "metric": metric,
        "seeds": seeds,
        "tried": tried,
        "evaluated": 0,
    }
    batches: list = []
    fits: dict[int, dict[str, Any]] = {}  # a learnable variant's calibration errors per value scored

    def evaluate(value: int) -> float:
        if not batches:
            batches.extend(scoring_batches(cell, seeds, inputs, device))
        record["evaluated"] += 1
        return score_value(cell, field_name, value, batches, settings, context, device, inputs, fits)

    def fields(value: int | None, seconds: float) -> dict[str, Any]:
        return {
            "config": {**cell.config, field_name: value},
            "tuning": record,
            "tuning_s": seconds,
            **fits.get(value, {}),
        }

    if high is None:
        return Tuned(
            fields(low, 0.0),
            reason=f"{field_name} {low}, {bound} (nothing cheaper to search), for the budget {budget:g}",
        )
    watch = Stopwatch.started()
    try:
        value, failure = search_knob(evaluate, budget, low, high, tried=tried), None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - returned with the values tried; the cell raises it in its tuning stage
        value, failure = None, exc
    seconds = watch.seconds
    record["tried"] = {str(v): tried[v] for v in sorted(tried)}  # a copy: the context's dict grows with later budgets
    if failure is not None:
        return Tuned(fields(None, seconds), failure=failure)
    if value is None:
        return Tuned(fields(high, seconds), reason=_unreachable(record, tried[high], fits.get(high)))
    return Tuned(fields(value, seconds), cell=dataclasses.replace(cell, config={**cell.config, field_name: value}))


def search_key(cell: Cell) -> str:
    """What a search's errors depend on: the cell without its budget and the knob's own value, and without its mode,
    phase and scope (every value is scored on a forward of the attention alone: its call, or in float32 its weights), so
    those cells share one search."""
    knob = get_variant(cell.variant).quality_knob
    data = {
        **cell.fields(),
        "matched_budget": None,
        "mode": None,
        "phase": None,
        "scope": None,
        "config": {k: v for k, v in cell.config.items() if k != knob.field},
    }
    return json.dumps(data, sort_keys=True, default=str)


def _unreachable(record: dict[str, Any], top_error: float, fit: dict[str, Any] | None) -> str:
    """Why a search's budget is unreachable: the error at the top of its range, with a learnable variant's fit."""
    knob, low, high = record["knob"], record["low"], record["high"]
    return (
        f"{METRIC_NAMES[record['metric']]} {top_error:.3g} at {knob} {high}, {record['bound']} (searched {low}-{high} "
        f"on held-out calibration seeds), is above the budget {record['budget']:g}"
    ) + _fit_note(fit)


def _fit_note(fit: dict[str, Any] | None) -> str:
    """' (its fit: 0.74 on its calibration seeds, 0.84 held out)' for a learnable variant, so the gap is in the reason."""
    if not fit or fit.get("calibration_heldout_error") is None:
        return ""
    return (
        f" (its fit: {fit['calibration_train_error']:.3g} on its calibration seeds, "
        f"{fit['calibration_heldout_error']:.3g} held out)"
    )


def search_knob(
    evaluate: Callable[[int], float],
    budget: float,
    low: int,
    high: int,
    *,
    tried: dict[int, float] | None = None,
    tolerance: float = TOLERANCE,
) -> int | None:
    """The smallest value in [low, high] found to meet `budget` (evaluate(value) <= budget), or None when high misses.

    `tried` holds errors already known (value -> error) and receives the new ones; a NaN error misses.
    """
    tried = {} if tried is None else tried

    def meets(value: int) -> bool:
        if value not in tried:
            tried[value] = float(evaluate(value))
        return tried[value] <= budget

    if not meets(high):
        return None
    value = low
    while not meets(value):
        value = min(2 * value, high)
    misses = [v for v, e in tried.items() if v < value and not e <= budget]
    miss = max(misses) if misses else None
    while miss is not None and value > miss * tolerance and value - miss > 1:
        middle = min(max(round(math.sqrt(miss * value)), miss + 1), value - 1)
        if meets(middle):
            value = middle
        else:
            miss = middle
    return value


def knob_range(cell: Cell) -> tuple[str, int, int | None, str]:
    """(the knob's field, low, high, what bounds high) searched for the cell: the knob's declared range at the cell's M,
    with high lowered to the largest value whose useful FLOPs (variants.count_flops; K/V heads and the config's other
    fields, sinks, counted) are at most MAX_FLOPS_FRACTION of dense attention's analytic FLOPs (None: even low does
    more, nothing is worth searching). A variant whose FLOPs do not change with the knob (the base class counts dense
    FLOPs) keeps its declared range."""
    return knob_range_at(cell.variant, cell.config, _shape(cell), kv_heads=cell.kv_heads)


def knob_range_at(
    name: str, config: dict[str, Any], shape: tuple[int, int, int, int, int, bool], *, kv_heads: int | None = None
) -> tuple[str, int, int | None, str]:
    """knob_range for variant `name` with `config` (its other fields) on shape (B, H, N, M, D, causal) and kv_heads:
    what model-eval's search, which has no sweep cell, asks."""
    knob = get_variant(name).cls.quality_knob
    low, high = knob.range_for(shape[3])

    def flops(value: int) -> int:
        return config_flops_at(name, {**config, knob.field: value}, shape, kv_heads=kv_heads)

    limit = MAX_FLOPS_FRACTION * dense_flops(*shape)
    at_low, at_high = flops(low), flops(high)
    if at_high <= limit or at_low == at_high:
        return knob.field, low, high, "the largest declared"
    if at_low > limit:
        return knob.field, low, None, f"the smallest declared, already does over {MAX_FLOPS_FRACTION:g}x dense's FLOPs"
    cheap, costly = low, high  # flops(cheap) <= limit < flops(costly)
    while costly - cheap > 1:
        middle = (cheap + costly) // 2
        cheap, costly = (middle, costly) if flops(middle) <= limit else (cheap, middle)
    return knob.field, low, cheap, f"the largest doing at most {MAX_FLOPS_FRACTION:g}x dense's FLOPs"


def config_flops(cell: Cell, config: dict[str, Any]) -> int:
    """The useful FLOPs (variants.count_flops) of the cell's variant with `config` at the cell's shape and K/V heads."""
    return config_flops_at(cell.variant, config, _shape(cell), kv_heads=cell.kv_heads)


def config_flops_at(
    name: str, config: dict[str, Any], shape: tuple[int, int, int, int, int, bool], *, kv_heads: int | None
) -> int:
    """The useful FLOPs of variant `name` with `config` on shape (B, H, N, M, D, causal) and kv_heads."""
    cls = get_variant(name).cls
    try:  # the analytic count reads the config only: no parameters allocated (Linformer's E, F are k x M)
        variant = cls.__new__(cls)  # not __init__: nn.Module's set-up and the parameters are not needed
        object.__setattr__(variant, "config", build_config(name, **config))
        return count_flops(variant, *shape, H_kv=kv_heads)
    except AttributeError:  # a plugin's count that reads more of the built variant
        return count_flops(build_variant(name, **config), *shape, H_kv=kv_heads)


def _shape(cell: Cell) -> tuple[int, int, int, int, int, bool]:
    return (cell.batch, cell.heads, cell.seq_len, cell.kv_len, cell.head_dim, cell.causal)
