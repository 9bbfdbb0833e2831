"""The model-eval study (`python -m harness model-eval`): swap each variant into every attention layer of all-MiniLM-L6-v2.

For each variant and length limit: every layer's attention becomes ``variants.MultiHeadAttention``
around that variant, with the model's own W^Q, W^K, W^V, W^O; the passages of the evaluation
corpus are embedded one at a time (no padding), and compared to the unmodified model by
- cosine similarity of the sentence embeddings (mean and minimum over passages), and
- retrieval agreement: the share of passages whose nearest neighbour (by cosine, among the
  other evaluation passages) is the same as with the unmodified model.
Learnable variants are calibrated per layer (``variants.calibrate``) on the model's own q, k, v
from calibration passages, which are never evaluated. First, the `dense` swap must reproduce
the unmodified model (cosine > 0.9999 for every passage), or the command fails.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor

from harness.models import minilm
from harness.measure.calibration import fit, fit_summary
from harness.measure.timer import Stopwatch
from harness.report.render import Block, Paragraph
from harness.report.study_cells import budget_note
from harness.report.study_results import MODEL_EVAL, model_eval_note, model_eval_table
from harness.studies import budget_search
from harness.studies.passages import AtLength, at_length, Encoded, LayerBatches, compare, embed_all
from harness.studies.plots import plot_model_eval
from harness.studies.results_io import write_results
from harness.studies.selection import variant_fields
from harness.report.study_outcomes import FAILURES, failed, outcome_text, succeeded, with_outcome
from variants import AttentionVariant, build_variant, get_variant

STEM = MODEL_EVAL  # model_eval.csv/.json/.md/.png
DENSE_MIN_COSINE = 0.9999  # the dense swap must reproduce every embedding at least this closely


def swapped_model(
    name: str,
    fields: dict[str, Any],
    *,
    device: str,
    seed: int,
    calibration: LayerBatches | None,
    steps: int,
) -> tuple[minilm.MiniLM, dict[str, Any] | None]:
    """A fresh model with `name` in every layer; learnable variants calibrated per layer. Returns (model, calibration summary)."""
    torch.manual_seed(seed)
    learnable = get_variant(name).capabilities.learnable
    reports = []

    def make(layer: int) -> AttentionVariant:
        variant = build_variant(name, **fields).to(device)
        if learnable:
            if not calibration:
                raise ValueError(f"{name} is learnable and needs calibration passages (--calibration-texts >= 1)")
            reports.append(fit(variant, calibration[layer], steps=steps))
        return variant

    model = minilm.swap_attention(minilm.load_model(device=device), make)
    if not learnable:
        return model, None
    summary = {
        **fit_summary(reports, steps),
        "passages": len(calibration[0]) if calibration else 0,
        "loss": reports[0]["loss"],
        "per_layer": reports,
    }
    return model, summary


def _empty_row(
    name: str, max_len: int, encoded: Encoded, *, budget: float | None, device: str, seed: int
) -> dict[str, Any]:
    """A row of `name` at this length limit before anything is measured: status ok, every metric None."""
    lengths = [int(mask.sum()) for _, mask in encoded]
    return {
        "model": minilm.MODEL_NAME,
        "variant": name,
        "config": None,
        "budget": budget,
        "max_len": max_len,
        "seq_len_mean": sum(lengths) / len(lengths),
        "seq_len_max": max(lengths),
        "texts": len(encoded),
        "status": "ok",
        "reason": None,
        "cosine_mean": None,
        "cosine_min": None,
        "retrieval_agreement": None,
        "calibration": None,
        "calibration_s": None,
        "eval_s": None,
        "device": device,
        "seed": seed,
        "tuning": None,
        "tuning_s": None,
    }


def evaluate_variant(
    name: str,
    max_len: int,
    *,
    reference: Tensor,
    encoded: Encoded,
    calibration: Callable[[], LayerBatches],
    steps: int,
    device: str,
    seed: int,
    overrides: dict[str, Any] | None = None,
    budget: float | None = None,
    searcher: budget_search.Searcher | None = None,
) -> dict[str, Any]:
    """One row: `name` swapped into the model at this length limit, compared to `reference` embeddings; with a
    budget, at the config `searcher` finds for it (status unreachable when none is within it)."""
    fields = variant_fields(name, max_len, overrides)
    row = _empty_row(name, max_len, encoded, budget=budget, device=device, seed=seed)
    try:
        fields, unreachable = budget_search.apply_match(row, name, fields, budget, searcher)
        if unreachable is not None:
            return unreachable
        row["config"] = build_variant(name, **fields).config.to_dict()
        needs = get_variant(name).capabilities.learnable
        with Stopwatch(device) as fit:
            model, row["calibration"] = swapped_model(
                name, fields, device=device, seed=seed, calibration=calibration() if needs else None, steps=steps
            )
        row["calibration_s"] = fit.seconds if needs else None
        with Stopwatch(device) as evaluation:
            embeddings = embed_all(model, encoded)
        row["eval_s"] = evaluation.seconds
    except FAILURES as exc:
        return failed(row, exc)
    if not torch.isfinite(embeddings).all():
        return with_outcome(row, "nonfinite", "an embedding has NaN or inf entries")
    return {**row, **compare(reference, embeddings)}


def dense_check(at: AtLength) -> dict[str, float]:
    """The dense swap compared to the unmodified model; RuntimeError when it does not reproduce every embedding."""
    swapped = minilm.swap_attention(minilm.load_model(device=at.device), lambda i: build_variant("dense").to(at.device))
    check = compare(at.reference, embed_all(swapped, at.evaluation))
    if check["cosine_min"] <= DENSE_MIN_COSINE:
        raise RuntimeError(
            f"the dense swap does not reproduce {minilm.MODEL_NAME} at max_len={at.max_len}: minimum cosine "
            f"{check['cosine_min']:.6f} <= {DENSE_MIN_COSINE}; the swap or the weights are wrong"
        )
    return check


def error_of(at: AtLength, name: str, *, steps: int, seed: int) -> Callable[[dict[str, Any]], float]:
    """fields -> 1 - the mean embedding cosine of `name` with them, on the calibration passages."""

    def error(fields: dict[str, Any]) -> float:
        passages, reference = at.calibration_reference()
        learnable = get_variant(name).capabilities.learnable
        model, _ = swapped_model(
            name,
            fields,
            device=at.device,
            seed=seed,
            calibration=at.calibration() if learnable else None,
            steps=steps,
        )
        embeddings = embed_all(model, passages)
        if not torch.isfinite(embeddings).all():
            return float("inf")
        return 1 - compare(reference, embeddings)["cosine_mean"]

    return error


def rows_at(
    at: AtLength,
    variants: list[str],
    *,
    steps: int,
    seed: int,
    overrides: dict[str, dict[str, Any]],
    budgets: tuple[float, ...],
    log: Callable[[str], None] | None,
) -> list[dict[str, Any]]:
    """The rows of every (variant, budget) at this length limit, each logged as it is made."""
    rows = []
    for name in variants:
        fields = variant_fields(name, at.max_len, overrides.get(name))
        shape = (1, minilm.BertConfig().num_heads, at.max_len, at.max_len, minilm.BertConfig().head_dim, False)
        searcher = budget_search.Searcher(name, fields, shape, None, ERROR, error_of(at, name, steps=steps, seed=seed))
        for budget in budget_search.budgets_for(name, budgets, overrides.get(name)):
            row = evaluate_variant(
                name,
                at.max_len,
                reference=at.reference,
                encoded=at.evaluation,
                calibration=at.calibration,
                steps=steps,
                device=at.device,
                seed=seed,
                overrides=overrides.get(name),
                budget=budget,
                searcher=searcher,
            )
            rows.append(row)
            if log:
                log(f"max_len={at.max_len:<4d} {budget_search.label(row):15s} {_shown(row)}")
    return rows


def run_model_eval(
    variants: list[str],
    max_lens: list[int],
    *,
    n_eval: int,
    n_calibration: int,
    steps: int,
    device: str = "cpu",
    seed: int = 0,
    overrides: dict[str, dict[str, Any]] | None = None,
    budgets: tuple[float, ...] = (),
    log: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows for every (max_len, variant, budget), and meta with the dense-swap check per max_len.

    budgets: error budgets on 1 - the mean embedding cosine, searched on the calibration passages (budget_search).

    Raises RuntimeError when the dense swap does not reproduce the unmodified model.
    """
    tokenizer = minilm.load_tokenizer()
    rows, checks = [], {}
    for max_len in max_lens:
        at = at_length(tokenizer, max_len, n_eval, n_calibration, device)
        checks[max_len] = dense_check(at)
        rows += rows_at(at, variants, steps=steps, seed=seed, overrides=overrides or {}, budgets=budgets, log=log)
    meta = {
        "model": minilm.MODEL_NAME,
        "tokenizer": "the model's",  # MiniLM's own WordPiece, always (model-eval --tokenizer is for --model)
        "corpus": "pydoc_data.topics (CPython's documentation), paragraphs joined into passages",
        "texts": n_eval,
        "calibration_texts": n_calibration,
        "calibration_steps": steps,
        "max_lens": max_lens,
        "dense_check": {str(k): v for k, v in checks.items()},
        "dense_min_cosine_required": DENSE_MIN_COSINE,
        "error_budgets": list(budgets),
        "error_metric": ERROR if budgets else None,
    }
    return rows, meta


ERROR = "1 - cosine"  # what --error-budgets bounds for the encoder: 1 - the mean embedding cosine over the passages


def _shown(row: dict[str, Any]) -> str:
    """The terminal line's numbers: the metrics (and the knob value a budget found), or the status and its reason."""
    if not succeeded(row):
        return outcome_text(row, width=None)
    return budget_search.found(row) + (
        f"cosine {row['cosine_mean']:.5f} (min {row['cosine_min']:.5f}), retrieval {row['retrieval_agreement']:.3f}"
    )


def summary(rows: list[dict[str, Any]]) -> list[Block]:
    """model_eval.md: one line per variant and length limit (the table the report shows too), and what was compared."""
    return [model_eval_table(rows), Paragraph(model_eval_note(minilm.MODEL_NAME) + budget_note(rows))]


def write_model_eval(folder: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> list[Path]:
    """model_eval.csv, .json, .md and .png in `folder`; returns the paths."""
    return write_results(
        folder,
        STEM,
        rows,
        meta,
        summary=summary(rows),
        plot=functools.partial(plot_model_eval, model=minilm.MODEL_NAME),
    )
