"""Accuracy against exact float64 attention on sampled query rows: of one call (grads too), of a searched knob value.

The output is checked first (shape, dtype, device): a wrong one is an error row, never a score
computed from broadcasting or an IndexError later.

The call is also the cell's warm-up: its seconds are a first estimate of the latency.

Scoring an error-budget search's candidate value (score_value; the search is harness.measure.tuning): the candidate
built, calibrated when learnable (with the run's calibration budget: the same fit the matched cell then uses, cached by
harness.measure.calibration), cast to the cell's dtype and called on TUNING_SEEDS input batches drawn with calibration
seeds at the cell's N (padding masks with those seeds too); its error on the sampled query rows is the worst over those
batches. The evaluation seed is never scored here. In float32, a variant that gives its attention weights is scored by
them on the sampled rows applied to v (weights_accuracy: R x M work, not the N-row call; the weights contract holds
them to the call's output); the cell measured at the value found is always the real call.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
from torch import Tensor

from harness.error_metrics import metric_error
from harness.inputs import make_inputs
from harness.inputs.padding import padding_mask
from harness.measure.calibration import calibrated
from harness.measure.context import MeasureContext
from harness.measure.reference import nonfinite, output_errors, reference_rows, reference_with_grads, rel_l2, sampled
from harness.measure.reference import topk_recall
from harness.measure.settings import CALIBRATION_SEED_OFFSET, DTYPES, MeasureSettings
from harness.measure.timer import Stopwatch
from harness.schema import Cell
from variants import NotSupportedError, build_variant
from variants._gqa import weighted_values

TUNING_SEEDS = 4  # seeds scored per value, the worst counting (2 left the evaluation seed 15% above at N=8192)
# the dtype whose searches score a value by the variant's attention weights on the sampled rows (when it gives them)
SCORED_BY_WEIGHTS = "float32"


@dataclass
class Accuracy:
    """The outcome of the checked call: row fields, why the output is non-finite (or None), the call's seconds."""

    fields: dict[str, Any] = field(default_factory=dict)
    nonfinite: str | None = None
    call_s: float = 0.0
    reference: Tensor | None = None  # float64 (B, H, R, D) on the sampled rows: a timed call's output is scored too
    rows: Tensor | None = None  # the sampled query rows (R,)
    valid: Tensor | None = None  # (B, R): which sampled rows are real tokens


class BadOutput(Exception):
    """The variant returned something other than a (B, H, N, Dv) tensor of the inputs' dtype on their device."""


def check_output(out: Any, q: Tensor, v: Tensor) -> None:
    """Raise BadOutput saying what was returned and what was expected, before anything is scored or broadcast."""
    expected = (*q.shape[:3], v.shape[-1])  # (B, H, N, Dv)
    want = f"expected a tensor of shape {tuple(expected)}, {q.dtype} on {q.device} (q's B, H, N with v's last dim)"
    if not isinstance(out, Tensor):
        raise BadOutput(f"the variant returned a {type(out).__name__}; {want}")
    if tuple(out.shape) != expected or out.dtype != q.dtype or out.device != q.device:
        raise BadOutput(f"the variant returned shape {tuple(out.shape)}, {out.dtype} on {out.device}; {want}")


def check_accuracy(
    attn: Any,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool,
    training: bool,
    error_rows: int,
    seed: int,
    reference: str = "full",
    kv_mask: Tensor | None = None,
    wrap: Callable[[Callable], Callable] | None = None,
    weights: bool = True,
    features: Mapping[str, Any] | None = None,
) -> Accuracy:
    """One call of `attn` scored against float64 on sampled rows; `reference` "pattern" scores against its own pattern.

    kv_mask (B, M) goes to the call and the reference; only sampled rows that are real tokens are scored. `wrap` puts
    the call under the cell's memory tricks (harness.measure.prefill.tricked), so autocast's error is in the scores.
    `weights`: also score the variant's attention weights on those rows (topk_recall, harness.measure.reference).
    `features`: the call features the call carries (int8_scores=True: harness.measure.scores_quant).
    """

    def call(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return attn(q, k, v, causal=causal, kv_mask=kv_mask, **(features or {}))

    call = wrap(call) if wrap is not None else call

    rows, chunk, valid = sampled(q, k, error_rows, seed, kv_mask)
    pattern = attn.pattern if reference == "pattern" else None
    result = Accuracy(rows=rows, valid=valid)
    # the reference first, from q, k, v before the variant has seen them in this stage (harness.measure.context checks
    # after the cell that nothing wrote into them)
    if training:
        out = _checked_train_call(call, q, k, v, result, chunk, causal, kv_mask, pattern, seed)
    else:
        result.reference = reference_rows(q, k, v, rows, chunk, causal, kv_mask, pattern)
        with Stopwatch(q.device) as watch, torch.no_grad():
            out = call(q, k, v)
        result.call_s = watch.seconds
        check_output(out, q, v)
        result.nonfinite = nonfinite(out)
    if result.nonfinite:
        return result
    result.fields.update(score_output(result, out))
    if weights:
        recall = topk_recall(
            attn, q, k, causal=causal, rows=rows, valid=valid, chunk=chunk, kv_mask=kv_mask, pattern=pattern
        )
        result.fields["topk_recall"] = recall
    return result


def _checked_train_call(
    call: Callable[[Tensor, Tensor, Tensor], Tensor],
    q: Tensor,
    k: Tensor,
    v: Tensor,
    result: Accuracy,
    chunk: int,
    causal: bool,
    kv_mask: Tensor | None,
    pattern: Any,
    seed: int,
) -> Tensor:
    """The checked call in train mode: forward and backward from a seeded gradient on the sampled rows, its output,
    the gradients' errors against float64 (into `result.fields`), the reference and the call's seconds into `result`."""
    rows, valid = result.rows, result.valid
    B, H, R, D = q.shape[0], q.shape[1], len(rows), q.shape[3]
    g = torch.randn(B, H, R, D, generator=torch.Generator(device=q.device).manual_seed(seed + 7), device=q.device)
    # padded query rows are unspecified: no gradient flows from them; the reference gets these same (rounded)
    # values, so bf16 rounding of g is no error
    g = (g * valid[:, None, :, None]).to(q.dtype)
    result.reference, ref_grads = reference_with_grads(q, k, v, g, rows, chunk, causal, kv_mask, pattern)
    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
    with Stopwatch(q.device) as watch:
        out = call(qg, kg, vg)
        check_output(out, q, v)
        grad_out = torch.zeros_like(out)
        grad_out[:, :, rows] = g
        grads = torch.autograd.grad(out, (qg, kg, vg), grad_outputs=grad_out, allow_unused=True)
    result.call_s = watch.seconds
    # unused input: zero gradient
    grads = tuple(torch.zeros_like(t) if g is None else g for g, t in zip(grads, (qg, kg, vg)))
    out = out.detach()
    result.nonfinite = nonfinite(out, *grads)
    if not result.nonfinite:
        result.fields.update(
            grad_rel_l2_q=rel_l2(grads[0], ref_grads[0]),
            grad_rel_l2_k=rel_l2(grads[1], ref_grads[1]),
            grad_rel_l2_v=rel_l2(grads[2], ref_grads[2]),
            grad_check_seq_len=q.shape[2],
        )
    return out


def weights_accuracy(
    attn: Any,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool,
    error_rows: int,
    seed: int,
    reference: str = "full",
    kv_mask: Tensor | None = None,
) -> Accuracy | None:
    """check_accuracy's forward scores, the output on the sampled rows taken as the variant's attention_weights on
    those rows applied to v: R x M work instead of the N-row call (None when the variant declines to give weights).

    The weights contract (tests/variants/test_weights_contract.py) holds every variant's weights applied to v to its
    own output within 1e-4, so in float32 these are the call's scores; an error-budget search scores values this way.
    """
    rows, chunk, valid = sampled(q, k, error_rows, seed, kv_mask)
    mine = []
    with torch.no_grad():
        for i in range(0, len(rows), chunk):  # the reference's chunks: R x M weights never held at once
            weights = attn.attention_weights(q, k, causal=causal, kv_mask=kv_mask, rows=rows[i : i + chunk])
            if weights is None:
                return None
            mine.append(weighted_values(weights.double(), v))
    mine = torch.cat(mine, dim=2)  # (B, H, R, D)
    pattern = attn.pattern if reference == "pattern" else None
    result = Accuracy(rows=rows, valid=valid)
    result.reference = reference_rows(q, k, v, rows, chunk, causal, kv_mask, pattern)
    result.nonfinite = nonfinite(mine.transpose(1, 2)[valid])  # padded query rows are unspecified
    if result.nonfinite is None:
        result.fields.update(output_errors(mine, result.reference, valid))
    return result


def score_output(accuracy: Accuracy, out: Tensor) -> dict[str, Any]:
    """rel L2, max abs and cosine of an output (B, H, N, D) of the checked call, or of a timed one, against the checked
    call's reference on its sampled rows."""
    return output_errors(out.detach()[:, :, accuracy.rows].double(), accuracy.reference, accuracy.valid)


def scoring_seeds(seed: int, calibration_batches: int) -> list[int]:
    """The seeds a search scores on: after the calibration batches' (a fitted variant is scored on inputs it was not
    fitted on), never the evaluation seed `seed`."""
    return [seed + CALIBRATION_SEED_OFFSET + calibration_batches + i for i in range(TUNING_SEEDS)]


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


def scoring_batches(
    cell: Cell, seeds: list[int], inputs: tuple[str, dict[str, Any]], device: torch.device
) -> list[tuple]:
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
