"""Error-budget search: the cheapest value of a variant's quality knob whose error meets a budget, on calibration seeds.

Range (harness.measure.knob_range): the knob's declared range at the cell's key length, its top lowered to the
largest value doing at most MAX_FLOPS_FRACTION of dense attention's analytic FLOPs (more is dense attention done
the slow way, not worth finding).

Fields searched with the knob (QualityKnob.searched_with, sliding_window's sinks in {0, 4}): the knob is searched at
each of their combinations, and the config with the fewest FLOPs (counted with those fields) that meets the budget wins.

Search (harness.measure.knob_range.search_knob): the largest value first (if even it misses the budget, the budget is unreachable
after one evaluation), then doubling from the smallest until a value meets it, then geometric bisection
between the last value that missed and the first that met until they are within TOLERANCE of each
other. Errors are taken to fall as the knob grows (a wider window, a longer projection, more features).
Each value is scored once per cell setting in one process: MeasureContext.tuned keeps the errors across a
run's budgets, so with the local executor a second budget mostly reuses the first one's evaluations (the
subprocess, Ray and Slurm executors give each cell a fresh process, which searches afresh).

Scoring (score_value): the candidate built, calibrated when learnable (with the run's calibration
budget: the same fit the matched cell then uses, cached by harness.measure.calibration), cast to the
cell's dtype and called on TUNING_SEEDS input batches drawn with calibration seeds at the cell's N
(padding masks with those seeds too); its error on the sampled query rows is the worst over those
batches. The evaluation seed is never scored here. In float32, a variant that gives its attention weights is scored by
them on the sampled rows applied to v (harness.measure.accuracy.weights_accuracy: R x M work, not the N-row call; the
weights contract holds them to the call's output); the cell measured at the value found is always the real call.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from dataclasses import dataclass
from typing import Any

import torch

from harness.error_metrics import METRIC_NAMES, metric_error
from harness.inputs import make_inputs
from harness.inputs.padding import padding_mask
from harness.measure.accuracy import check_accuracy, weights_accuracy
from harness.measure.calibration import calibrated
from harness.measure.context import MeasureContext
from harness.measure.knob_range import config_flops, knob_range, search_knob
from harness.measure.settings import CALIBRATION_SEED_OFFSET, DTYPES, MeasureSettings
from harness.measure.timer import Stopwatch
from harness.schema import Cell
from variants import NotSupportedError, build_variant, get_variant

TUNING_SEEDS = 4  # seeds scored per value, the worst counting (2 left the evaluation seed 15% above at N=8192)
# the dtype whose searches score a value by the variant's attention weights on the sampled rows (when it gives them)
SCORED_BY_WEIGHTS = "float32"


@dataclass(frozen=True)
class Tuned:
    """The record of a cell's search: its row fields, and the cell found, or why there is none."""

    fields: dict[str, Any]  # config (the knob at the value chosen; None if the search chose none), tuning, tuning_s
    cell: Cell | None = None  # the cell to measure, at the value found (None: unreachable, or the search failed)
    reason: str | None = None  # why the budget is unreachable
    # what stopped the search (out of memory, the time limit): raised by the caller
    failure: BaseException | None = None


def scoring_seeds(seed: int, calibration_batches: int) -> list[int]:
    """The seeds a search scores on: after the calibration batches' (a fitted variant is scored on inputs it was not
    fitted on), never the evaluation seed `seed`."""
    return [seed + CALIBRATION_SEED_OFFSET + calibration_batches + i for i in range(TUNING_SEEDS)]


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
    seeds = scoring_seeds(cell.seed, settings.calibration_batches)
    tried = context.tuned.setdefault(search_key(cell), {})
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
            batches.extend(_batches(cell, seeds, inputs, device))
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


def score_value(
    cell: Cell,
    knob_field: str,
    value: int,
    batches: list,
    settings: MeasureSettings,
    context: MeasureContext,
    device: torch.device,
    inputs: tuple[str, dict[str, Any]],
    fits: dict[int, dict[str, Any]] | None = None,
) -> float:
    """The worst error over `batches` of the cell's variant with knob_field = value (inf when the output is not finite);
    a learnable variant's calibration errors (train, held-out) go into fits[value]."""
    candidate = dataclasses.replace(cell, config={**cell.config, knob_field: value})
    torch.manual_seed(cell.seed)  # the same initialisation the measured cell gets
    attn = build_variant(cell.variant, **candidate.config).to(device)
    q, k, v, kv_mask, _ = batches[0]
    reasons = attn.not_supported_reasons(q, k, v, causal=cell.causal, kv_mask=kv_mask, training=False)
    if reasons:
        raise NotSupportedError(cell.variant, reasons)
    if attn.capabilities.learnable:
        attn, fitted = calibrated(attn, candidate, inputs, settings, context, device)
        if fits is not None:
            fits[value] = {
                "calibration_train_error": fitted.calibration_train_error,
                "calibration_heldout_error": fitted.calibration_heldout_error,
            }
    attn = attn.to(dtype=DTYPES[cell.dtype]).eval()
    worst = 0.0
    for q, k, v, kv_mask, seed in batches:
        common = dict(
            causal=cell.causal, error_rows=settings.error_rows, seed=seed, reference=settings.accuracy_reference,
            kv_mask=kv_mask,
        )  # fmt: skip
        # float32: the weights on the sampled rows stand for the N-row call (R x M work); in a half dtype the call's
        # own rounding is part of the error, so it is called
        accuracy = weights_accuracy(attn, q, k, v, **common) if cell.dtype == SCORED_BY_WEIGHTS else None
        if accuracy is None:  # the output error only
            accuracy = check_accuracy(attn, q, k, v, training=False, weights=False, **common)
        if accuracy.nonfinite:
            return math.inf
        error = metric_error(accuracy.fields, cell.error_metric)
        worst = max(worst, error if math.isfinite(error) else math.inf)
    return worst


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


def _batches(cell: Cell, seeds: list[int], inputs: tuple[str, dict[str, Any]], device: torch.device) -> list[tuple]:
    """(q, k, v, kv_mask, seed) per scoring seed, at the cell's shape and dtype."""
    name, knobs = inputs
    out = []
    for seed in seeds:
        q, k, v = make_inputs(
            name,
            knobs,
            B=cell.batch,
            H=cell.heads,
            N=cell.seq_len,
            M=cell.kv_len,
            D=cell.head_dim,
            dtype=DTYPES[cell.dtype],
            device=device,
            seed=seed,
            H_kv=cell.kv_heads,
        )
        out.append((q, k, v, padding_mask(cell.batch, cell.kv_len, cell.padding, seed=seed, device=device), seed))
    return out
