"""The causal-LM side of model-eval (`model-eval --model PATH`): each variant swapped into the model's attention layers.

For each sequence length N and variant: windows of N consecutive tokens of the evaluation text
run through the unmodified model (its own attention) and through the model with the variant in
every layer (or the `--layers` chosen; the others run exact dense through the same adapter), and
are compared by
- perplexity of the next token (and the unmodified model's, on the same windows),
- next-token top-1 agreement with the unmodified model,
- KL(dense || variant) of the next-token distributions, mean over positions,
- greedy continuation agreement with dense and decode tokens/s of generate() (harness.studies.lm_generate).
Learnable variants are calibrated per layer on the q, k, v the model's layers receive on
calibration windows (the text's last quarter, never evaluated).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn

from harness.models import hf_model
from harness.measure.calibration import fit, fit_summary
from harness.measure.timer import Stopwatch
from harness.report.render import Block, Paragraph
from harness.report.study_cells import budget_note, kl_text
from harness.report.study_results import LM_EVAL, lm_eval_note, lm_eval_table
from harness.studies import budget_search, lm_generate
from harness.studies.plots import plot_lm_eval
from harness.studies.results_io import write_results
from harness.studies.selection import variant_fields
from harness.report.study_outcomes import FAILURES, failed, outcome_text, succeeded, with_outcome
from variants import AttentionVariant, build_variant, get_variant

STEM = LM_EVAL  # lm_eval.csv/.json/.md/.png


@torch.no_grad()
def _logits(model: nn.Module, ids: Tensor) -> Tensor:
    """Next-token log-probabilities (1, N, V) in float32 for one window (1, N)."""
    return torch.log_softmax(model(input_ids=ids, use_cache=False).logits.float(), dim=-1)


def _window_stats(ids: Tensor, reference: Tensor, candidate: Tensor) -> dict[str, float]:
    """Sums over the N - 1 predicted positions: NLL of the candidate and the reference, top-1 agreement, KL."""
    targets = ids[:, 1:]  # (1, N - 1)
    ref, cand = reference[:, :-1], candidate[:, :-1]  # (1, N - 1, V)
    return {
        "nll": float(-cand.gather(-1, targets[..., None]).sum()),
        "nll_reference": float(-ref.gather(-1, targets[..., None]).sum()),
        "agree": float((ref.argmax(-1) == cand.argmax(-1)).sum()),
        "kl": float((ref.exp() * (ref - cand)).sum()),
        "count": float(targets.numel()),
    }


def calibrated_variants(
    name: str,
    fields: dict[str, Any],
    batches: Callable[[], list[list[tuple[Tensor, Tensor, Tensor]]]],
    *,
    layers: list[int],
    steps: int,
    device: str,
    seed: int,
) -> tuple[dict[int, AttentionVariant], dict[str, Any] | None]:
    """One variant per chosen layer, learnable ones fitted (causal) on that layer's calibration q, k, v."""
    torch.manual_seed(seed)
    learnable = get_variant(name).capabilities.learnable
    out, reports = {}, []
    for layer in layers:
        variant = build_variant(name, **fields).to(device)
        if learnable:
            reports.append(fit(variant, batches()[layer], steps=steps, causal=True))
        out[layer] = variant
    return out, fit_summary(reports, steps) if learnable else None


@dataclass
class AtLength:
    """What every variant at one length N shares: the model, its evaluation windows and how a variant is fitted; the
    calibration windows and each layer's q, k, v on them are made on first use, once."""

    model: nn.Module
    own: str  # the model's own attention implementation, set back after each swap
    stream: list[int]  # the text's token ids
    N: int
    windows: list[Tensor]  # the evaluation windows, (1, N) each
    n_calibration: int
    chosen: list[int]  # the layers a variant is swapped into
    n_layers: int
    steps: int
    device: str
    seed: int
    tokens: int = 0  # tokens generated after each evaluation window (0: no generation columns)
    cache: dict[str, Any] = field(default_factory=dict)

    @functools.cached_property
    def dense_continuations(self) -> list[list[int]]:
        """Dense's greedy continuation of each evaluation window, generated once per length, on first use."""
        return lm_generate.dense_continuations(self.model, self.own, self.windows, self.tokens)

    @functools.cached_property
    def dense_calibration_continuations(self) -> list[list[int]]:
        """Dense's greedy continuation of each calibration window (what a disagreement budget is searched against)."""
        return lm_generate.dense_continuations(self.model, self.own, self.calibration_windows(), self.tokens)

    def calibration_windows(self) -> list[Tensor]:
        """The calibration windows (the text's last quarter, never evaluated), (1, N) each."""
        if "windows" not in self.cache:
            found = hf_model.token_windows(self.stream, self.N, self.n_calibration, calibration=True)
            self.cache["windows"] = [torch.tensor([w], device=self.device) for w in found]
        return self.cache["windows"]

    def batches(self) -> list[list[tuple[Tensor, Tensor, Tensor]]]:
        """Each layer's (q, k, v) on the calibration windows."""
        if "qkv" not in self.cache:  # captured once per length, only if a learnable variant asks
            per_layer: list[list[tuple[Tensor, Tensor, Tensor]]] = [[] for _ in range(self.n_layers)]
            for ids in self.calibration_windows():
                for layer, qkv in zip(per_layer, hf_model.capture_qkv(self.model, lambda: _logits(self.model, ids))):
                    layer.append(qkv)
            self.cache["qkv"] = per_layer
        return self.cache["qkv"]

    def error_of(self, name: str, metric: str) -> Callable[[dict[str, Any]], float]:
        """fields -> the budget's error (budget_search.ERRORS[metric]) of `name` with them, on the calibration windows."""

        def error(fields: dict[str, Any]) -> float:
            per_layer, _ = calibrated_variants(
                name, fields, self.batches, layers=self.chosen, steps=self.steps, device=self.device, seed=self.seed
            )
            if metric == "disagreement":  # greedy continuations after the calibration windows, against dense's
                windows, reference = self.calibration_windows(), lambda: self.dense_calibration_continuations
                at = (self.model, self.own, per_layer, self.chosen, windows, self.tokens, reference, self.device)
                return 1 - lm_generate.agreement_or_refusal(*at)
            totals = _totals(self.model, self.own, per_layer, self.chosen, self.calibration_windows())
            return budget_search.budget_error(totals, metric)

        return error


def rows_at(
    at: AtLength,
    variants: list[str],
    *,
    shape: dict[str, int],
    overrides: dict[str, dict[str, Any]],
    budgets: tuple[float, ...],
    metric: str,
    log: Callable[[str], None] | None,
) -> list[dict[str, Any]]:
    """The rows of every (variant, budget) at this length, each logged as it is made."""
    rows = []
    for name in variants:
        fields = variant_fields(name, at.N, overrides.get(name))
        cost_shape = (1, shape["H"], at.N, at.N, shape["D"], True)
        searcher = budget_search.Searcher(
            name, fields, cost_shape, shape["H_kv"], budget_search.ERRORS[metric], at.error_of(name, metric)
        )
        for budget in budget_search.budgets_for(name, budgets, overrides.get(name)):
            row = _evaluate(at, name, fields, budget, searcher)
            rows.append(row)
            if log:
                log(f"N={at.N:<6d} {budget_search.label(row):15s} {_shown(row)}")
    return rows


def run_lm_eval(
    path: str,
    variants: list[str],
    seq_lens: list[int],
    *,
    text: str,
    n_eval: int,
    n_calibration: int,
    steps: int,
    layers: list[int] | None = None,
    device: str = "cpu",
    seed: int = 0,
    overrides: dict[str, dict[str, Any]] | None = None,
    budgets: tuple[float, ...] = (),
    metric: str = "kl",
    generate_tokens: int = lm_generate.DEFAULT_TOKENS,
    tokenizer: str = "model",  # hf_model.TOKENIZERS: the model's own (one that does not load is a ValueError) or bytes
    log: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows for every (seq_len, variant, budget) and meta (model shape, tokenizer, reference perplexity per length).

    budgets: error budgets on `metric` (a key of budget_search.ERRORS), searched on the calibration windows (budget_search).
    generate_tokens: tokens greedily generated after each evaluation window (lm_generate; 0: none).
    """
    if budgets and metric == "disagreement" and generate_tokens < 1:
        raise ValueError("a disagreement budget bounds generated tokens: generate_tokens must be >= 1")
    model = hf_model.load_pretrained(path, device=device, causal_lm=True)
    shape = hf_model.attention_shape(model)
    chosen = list(range(shape["layers"])) if layers is None else layers
    stream, tokenizer_class = hf_model.token_ids(path, text, int(model.config.vocab_size), tokenizer=tokenizer)
    used = hf_model.TOKENIZER_RECORDED[tokenizer]
    own = model.config._attn_implementation
    shown_layers = "all" if layers is None else ",".join(map(str, layers))
    rows = []
    for N in seq_lens:
        windows = [
            torch.tensor([w], device=device) for w in hf_model.token_windows(stream, N, n_eval, calibration=False)
        ]
        at = AtLength(
            model, own, stream, N, windows, n_calibration, chosen, shape["layers"], steps, device, seed, generate_tokens
        )
        found = rows_at(at, variants, shape=shape, overrides=overrides or {}, budgets=budgets, metric=metric, log=log)
        rows += [{"model": path, "layers": shown_layers, "tokenizer": used, **row} for row in found]
    meta = {"model": path, "kind": "causal-lm", **shape, "tokenizer": used, "tokenizer_class": tokenizer_class}
    meta.update(text_tokens=len(stream))
    meta.update(seq_lens=seq_lens, texts=n_eval, calibration_texts=n_calibration, calibration_steps=steps)
    meta.update(error_budgets=list(budgets), error_metric=metric if budgets else None, generate_tokens=generate_tokens)
    return rows, meta


def _totals(model, own, per_layer, layers, windows) -> dict[str, float]:
    """_window_stats summed over `windows`: each through the unmodified model, then with per_layer swapped in."""
    totals: dict[str, float] = {}
    for ids in windows:
        model.set_attn_implementation(own)
        reference = _logits(model, ids)
        with hf_model.swapped(
            model, lambda i: per_layer[i], layers=layers
        ):  # each forward checked: every layer swapped
            candidate = _logits(model, ids)
        for key, value in _window_stats(ids, reference, candidate).items():
            totals[key] = totals.get(key, 0.0) + value
    return totals


def _shown(row: dict[str, Any]) -> str:
    """The terminal line's numbers: the metrics (and the knob value a budget found), or the status and its reason."""
    if not succeeded(row):
        return outcome_text(row, width=None)
    line = budget_search.found(row) + (
        f"perplexity {row['perplexity']:.4f} (model {row['perplexity_reference']:.4f}), top-1 "
        f"{row['top1_agreement']:.4f}, KL {kl_text(row['kl_mean'])}"
    )
    return line + (f", {lm_generate.generation_text(row)}" if row.get("generation_status") else "")


def _evaluate(
    at: AtLength, name: str, fields: dict[str, Any], budget: float | None, searcher: budget_search.Searcher
) -> dict[str, Any]:
    """One row: `name` with `fields` (or, with a budget, the config searcher finds for it) on the evaluation windows."""
    row: dict[str, Any] = {"variant": name, "config": None, "budget": budget, "seq_len": at.N, "texts": len(at.windows)}
    row.update(status="ok", reason=None, perplexity=None, perplexity_reference=None, perplexity_increase=None)
    row.update(top1_agreement=None, kl_mean=None, calibration=None, calibration_s=None, eval_s=None, device=at.device)
    row.update(tuning=None, tuning_s=None, **lm_generate.empty_fields())
    try:
        fields, unreachable = budget_search.apply_match(row, name, fields, budget, searcher)
        if unreachable is not None:
            return unreachable
        row["config"] = build_variant(name, **fields).config.to_dict()
        with Stopwatch(at.device) as fit:
            per_layer, row["calibration"] = calibrated_variants(
                name, fields, at.batches, layers=at.chosen, steps=at.steps, device=at.device, seed=at.seed
            )
        row["calibration_s"] = fit.seconds if row["calibration"] else None
        with Stopwatch(at.device) as evaluation:
            totals = _totals(at.model, at.own, per_layer, at.chosen, at.windows)
        row["eval_s"] = evaluation.seconds
    except FAILURES as exc:
        return failed(row, exc)
    if not all(math.isfinite(v) for v in totals.values()):
        return with_outcome(row, "nonfinite", "a log-probability is NaN or inf")
    if at.tokens:  # the KV cache's generation columns and the own state's
        dense = lambda: at.dense_continuations  # noqa: E731 - generated on first use, once per length (cached)
        fields = (at.model, at.own, per_layer, at.chosen, at.windows, at.tokens, dense, at.device)
        row.update(lm_generate.generation_fields(*fields, state=True))
    count = totals["count"]
    ppl, ppl_ref = math.exp(totals["nll"] / count), math.exp(totals["nll_reference"] / count)
    row.update(perplexity=ppl, perplexity_reference=ppl_ref, perplexity_increase=ppl / ppl_ref - 1)
    return {**row, "top1_agreement": totals["agree"] / count, "kl_mean": totals["kl"] / count}


def summary(rows: list[dict[str, Any]], model: str) -> list[Block]:
    """lm_eval.md: the table the report shows too, and what was compared."""
    return [lm_eval_table(rows), Paragraph(lm_eval_note(model) + budget_note(rows))]


def write_lm_eval(folder: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> list[Path]:
    """lm_eval.csv, .json, .md and .png in `folder`; returns the paths."""
    model = Path(str(meta["model"])).name or str(meta["model"])
    return write_results(
        folder, STEM, rows, meta, summary=summary(rows, model), plot=functools.partial(plot_lm_eval, model=model)
    )
