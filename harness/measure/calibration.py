"""Fitting learnable variants: the harness's one entry around variants.calibrate (`fit`), for the sweep (one fixed
budget on calibration seeds, cached by key: `calibrated`) and the studies (a variant per layer: `fit_summary`)."""

from __future__ import annotations

import copy
import importlib
import json
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from harness.inputs import make_inputs
from harness.measure.context import MeasureContext
from harness.measure.settings import CALIBRATION_SEED_OFFSET, MeasureSettings
from harness.schema import Cell
from variants import get_variant

HELDOUT_BATCHES = 4  # held-out calibration batches: early stopping and the row's calibration_heldout_error
# the protocol's module, its `calibrate` looked up per call (the package's `variants.calibrate` is the function), so a
# test can wrap it
_PROTOCOL = importlib.import_module("variants.calibrate")


@dataclass(frozen=True)
class Calibration:
    """The calibration stage's row fields: the fit's seconds, its report and its errors."""

    calibration_s: float  # seconds of the fit (the cached one's, for a cell that reuses it)
    calibration: dict[str, Any]  # the protocol's report (variants.calibrate), with its seeds
    calibration_train_error: float | None  # the fitted variant's output error on its calibration batches
    calibration_heldout_error: float | None  # and on held-out calibration seeds: the gap says whether it generalises


def fit(
    variant: Any,
    batches: Sequence[tuple],
    *,
    steps: int,
    causal: bool = False,
    heldout: Sequence[tuple] | None = None,
    target: float | None = None,
) -> dict[str, Any]:
    """Fit a learnable variant in place with variants.calibrate (distilled against exact attention on `batches` of
    (q, k, v), early-stopped on `heldout`), leave it in eval mode, and return the protocol's report as a dict."""
    report = _PROTOCOL.calibrate(variant, list(batches), steps=steps, causal=causal, heldout=heldout, target=target)
    variant.eval()
    return report.to_dict()


def fit_summary(reports: Sequence[dict[str, Any]], steps: int) -> dict[str, Any]:
    """What the studies record of the per-layer fits of one variant: the budget and the mean loss before and after."""
    return {
        "steps_per_layer": steps,
        "layers": len(reports),
        "loss_before_mean": sum(r["loss_before"] for r in reports) / len(reports),
        "loss_after_mean": sum(r["loss_after"] for r in reports) / len(reports),
    }


def calibration_length(attn: Any, cell: Cell, settings: MeasureSettings) -> int:
    """N of the calibration batches: the variant's own choice (AttentionVariant.calibration_length) for the cell's N
    and config under the run's cap calibration_max_seq_len (min(N, cap) unless it needs more, e.g. Linformer's
    per-position E and F, window_linear's keys beyond its window)."""
    return attn.calibration_length(cell.config, cell.seq_len, settings.calibration_max_seq_len)


def calibration_key(cell: Cell, settings: MeasureSettings) -> str:
    """The key a fit is cached under (in MeasureContext.calibrated and RUN_DIR/fitted/): cells that
    share it share one calibration, across modes and, where the length is capped, across N."""
    length = calibration_length(get_variant(cell.variant).cls, cell, settings)
    key = dict(cell.cache_key("fit", seq_len=length, device=str(torch.device(settings.device))))
    if fit_target(cell, settings) is not None:
        key["target"] = fit_target(cell, settings)
    return json.dumps(key, sort_keys=True, default=str)


def calibration_seeds(cell: Cell, settings: MeasureSettings) -> list[int]:
    """The seeds of the calibration batches: never the evaluation seed."""
    return [cell.seed + CALIBRATION_SEED_OFFSET + i for i in range(settings.calibration_batches)]


def fit_target(cell: Cell, settings: MeasureSettings) -> float | None:
    """The held-out error a fit of an error-budget cell aims at: the run's largest budget (every budget of a series
    shares one fit), so a fit that cannot reach even that stops early (variants.calibrate's `target`); None for a cell
    without a budget or a metric other than relative L2 (the held-out error's)."""
    if cell.matched_budget is None or cell.error_metric != "rel_l2":
        return None
    return float(max([*settings.error_budgets, cell.matched_budget]))


def heldout_seeds(cell: Cell) -> list[int]:
    """The seeds a fit is stopped on and its held-out error measured on: below the calibration seeds, so never a
    calibration seed, a search's scoring seed (above them) or the evaluation seed."""
    return [cell.seed + CALIBRATION_SEED_OFFSET - 1 - i for i in range(HELDOUT_BATCHES)]


def calibrated(
    attn: Any,
    cell: Cell,
    inputs: tuple[str, dict[str, Any]],
    settings: MeasureSettings,
    context: MeasureContext,
    device: torch.device,
) -> tuple[Any, Calibration]:
    """(a copy of the variant fitted with the fixed budget, early-stopped on heldout_seeds; its Calibration fields).

    `inputs` is the cell's parsed input distribution (name, knobs). The fit is cached in `context`
    across modes and longer N (see calibration_key).
    """
    key = calibration_key(cell, settings)
    if key not in context.calibrated:
        length = calibration_length(attn, cell, settings)
        name, knobs = inputs
        seeds, held = calibration_seeds(cell, settings), heldout_seeds(cell)

        def batch(seed: int) -> tuple:
            return make_inputs(
                name,
                knobs,
                B=cell.batch,
                H=cell.heads,
                N=length,
                D=cell.head_dim,
                device=device,
                seed=seed,
                H_kv=cell.kv_heads,
            )

        batches, heldout = [batch(s) for s in seeds], [batch(s) for s in held]
        steps, target = settings.calibration_steps, fit_target(cell, settings)
        report_dict = fit(attn, batches, steps=steps, causal=cell.causal, heldout=heldout, target=target)
        seconds = report_dict["wall_s"]  # the protocol's own clock around the whole fit (its last errors are read back)
        del batches, heldout
        report_dict["seeds"], report_dict["heldout_seeds"] = seeds, held
        context.calibrated[key] = (copy.deepcopy(attn), seconds, report_dict)
    fitted, seconds, report_dict = context.calibrated[key]
    train, heldout_error = report_dict.get("train_error"), report_dict.get("heldout_error")
    return copy.deepcopy(fitted), Calibration(seconds, dict(report_dict), train, heldout_error)
