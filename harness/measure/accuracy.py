"""Accuracy of one call against exact float64 attention on sampled query rows (and of dq, dk, dv in train mode).

The output is checked first (shape, dtype, device): a wrong one is an error row, never a score
computed from broadcasting or an IndexError later.

The call is also the cell's warm-up: its seconds are a first estimate of the latency.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import Tensor

from harness.measure.timer import Stopwatch
from harness.measure.weights import topk_recall
from variants._gqa import weighted_values

# float64 scores per reference chunk (query rows are processed in chunks): bounds the accuracy
# check's own memory so the process's peak stays that of the cell measured, not of the gold.
REFERENCE_CHUNK_BYTES = {"cpu": 1 << 24, "cuda": 1 << 28}


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


def sample_rows(N: int, R: int, seed: int) -> Tensor:
    """R query rows of N, sorted: the first, the last and R - 2 drawn by `seed` (all N when R >= N)."""
    if R >= N:
        return torch.arange(N)
    g = torch.Generator().manual_seed(seed + N)
    middle = torch.randperm(N - 2, generator=g)[: R - 2] + 1
    return torch.cat([torch.tensor([0]), middle.sort().values, torch.tensor([N - 1])])


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
) -> Accuracy:
    """One call of `attn` scored against float64 on sampled rows; `reference` "pattern" scores against its own pattern.

    kv_mask (B, M) goes to the call and the reference; only sampled rows that are real tokens are scored. `wrap` puts
    the call under the cell's memory tricks (harness.measure.tricks.tricked), so autocast's error is in the scores.
    `weights`: also score the variant's attention weights on those rows (topk_recall, harness.measure.weights).
    """

    def call(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return attn(q, k, v, causal=causal, kv_mask=kv_mask)

    call = wrap(call) if wrap is not None else call

    N = q.shape[2]
    rows, chunk, valid = _sampled(q, k, error_rows, seed, kv_mask)
    pattern = attn.pattern if reference == "pattern" else None
    B, H, R, D = q.shape[0], q.shape[1], len(rows), q.shape[3]
    result = Accuracy(rows=rows, valid=valid)
    # the reference first, from q, k, v before the variant has seen them in this stage (harness.measure.guard checks
    # after the cell that nothing wrote into them)
    if training:
        g = torch.randn(B, H, R, D, generator=torch.Generator(device=q.device).manual_seed(seed + 7), device=q.device)
        # padded query rows are unspecified: no gradient flows from them; the reference gets these same (rounded)
        # values, so bf16 rounding of g is no error
        g = (g * valid[:, None, :, None]).to(q.dtype)
        result.reference, ref_grads = _reference_with_grads(q, k, v, g, rows, chunk, causal, kv_mask, pattern)
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
        if result.nonfinite:
            return result
        result.fields.update(
            grad_rel_l2_q=rel_l2(grads[0], ref_grads[0]),
            grad_rel_l2_k=rel_l2(grads[1], ref_grads[1]),
            grad_rel_l2_v=rel_l2(grads[2], ref_grads[2]),
            grad_check_seq_len=N,
        )
    else:
        result.reference = _reference_rows(q, k, v, rows, chunk, causal, kv_mask, pattern)
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
    rows, chunk, valid = _sampled(q, k, error_rows, seed, kv_mask)
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
    result.reference = _reference_rows(q, k, v, rows, chunk, causal, kv_mask, pattern)
    result.nonfinite = nonfinite(mine.transpose(1, 2)[valid])  # padded query rows are unspecified
    if result.nonfinite is None:
        result.fields.update(output_errors(mine, result.reference, valid))
    return result


def _sampled(q: Tensor, k: Tensor, error_rows: int, seed: int, kv_mask: Tensor | None) -> tuple[Tensor, int, Tensor]:
    """The sampled query rows (R,), the rows per reference chunk (REFERENCE_CHUNK_BYTES of float64 scores), and which
    sampled rows are real tokens (B, R)."""
    B, H, N, M = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    rows = sample_rows(N, error_rows, seed).to(q.device)
    chunk = max(1, REFERENCE_CHUNK_BYTES[q.device.type] // (B * H * M * 8))
    valid = kv_mask[:, rows] if kv_mask is not None else torch.ones(B, len(rows), dtype=torch.bool, device=q.device)
    return rows, chunk, valid


def _reference_rows(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    rows: Tensor,
    chunk: int,
    causal: bool,
    kv_mask: Tensor | None,
    pattern: Any,
) -> Tensor:
    """Exact float64 attention on the sampled rows, `chunk` rows at a time: (B, H, R, D)."""
    from variants import reference_attention

    q64, k64, v64 = (t.double() for t in (q, k, v))
    with torch.no_grad():
        parts = [
            reference_attention(
                q64, k64, v64, causal=causal, kv_mask=kv_mask, pattern=pattern, rows=rows[i : i + chunk]
            )
            for i in range(0, len(rows), chunk)
        ]
    return torch.cat(parts, dim=2)


def baseline_errors(
    q: Tensor, k: Tensor, v: Tensor, *, causal: bool, error_rows: int, seed: int, kv_mask: Tensor | None = None
) -> dict[str, Any]:
    """The errors two trivial answers score against exact attention on the rows check_accuracy samples (same seed):
    uniform attention (the mean of v over the keys each row sees, causality and padding respected: exact attention with
    q = 0) and a zero output. A variant not clearly below the uniform error has learnt nothing about q."""
    rows, chunk, valid = _sampled(q, k, error_rows, seed, kv_mask)
    ref, uniform = (
        _reference_rows(x, k, v, rows, chunk, causal, kv_mask, None) for x in (q, torch.zeros_like(q))
    )  # (B, H, R, D) each
    scored = output_errors(uniform, ref, valid)
    return {
        "uniform_rel_l2_error": scored["rel_l2_error"],
        "uniform_cosine": scored["cosine"],
        "zero_rel_l2_error": output_errors(torch.zeros_like(ref), ref, valid)["rel_l2_error"],
    }


def _reference_with_grads(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    rows: Tensor,
    chunk: int,
    causal: bool,
    kv_mask: Tensor | None,
    pattern: Any,
) -> tuple[Tensor, list[Tensor]]:
    """Exact float64 attention on the sampled rows (B, H, R, D) and its gradients w.r.t. q, k, v for output grads g."""
    from variants import reference_attention

    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    ref_grads = [torch.zeros_like(t) for t in (q64, k64, v64)]
    refs = []
    for i in range(0, len(rows), chunk):
        ref = reference_attention(
            q64, k64, v64, causal=causal, kv_mask=kv_mask, pattern=pattern, rows=rows[i : i + chunk]
        )
        for total, part in zip(
            ref_grads, torch.autograd.grad(ref, (q64, k64, v64), grad_outputs=g[:, :, i : i + chunk].double())
        ):
            total += part
        refs.append(ref.detach())
    return torch.cat(refs, dim=2), ref_grads


def score_output(accuracy: Accuracy, out: Tensor) -> dict[str, Any]:
    """rel L2, max abs and cosine of an output (B, H, N, D) of the checked call, or of a timed one, against the checked
    call's reference on its sampled rows."""
    return output_errors(out.detach()[:, :, accuracy.rows].double(), accuracy.reference, accuracy.valid)


def output_errors(mine: Tensor, ref: Tensor, valid: Tensor | None = None) -> dict[str, Any]:
    """rel L2, max abs and mean cosine of outputs (B, H, R, D) against the reference, on the rows `valid` (B, R) marks."""
    R = mine.shape[2]
    if valid is not None and not bool(valid.all()):
        mine, ref = (t.transpose(1, 2)[valid] for t in (mine, ref))  # (valid rows, H, D)
    return dict(
        rel_l2_error=rel_l2(mine, ref),
        max_abs_error=float((mine - ref.double()).abs().max()),
        cosine=float(torch.nn.functional.cosine_similarity(mine, ref.double(), dim=-1).mean()),
        error_rows=R,
    )


def nonfinite(*tensors: Tensor) -> str | None:
    """What is non-finite in the output (and gradients), or None."""
    names = ("output", "dq", "dk", "dv")
    for name, t in zip(names, tensors):
        nan, inf = int(torch.isnan(t).sum()), int(torch.isinf(t).sum())
        if nan or inf:
            return f"{name} has {nan} NaN and {inf} inf values of {t.numel()}"
    return None


def rel_l2(a: Tensor, b: Tensor) -> float:
    """||a - b|| / ||b|| in float64."""
    b = b.double()
    return float((a.double() - b).norm() / b.norm().clamp_min(1e-300))
