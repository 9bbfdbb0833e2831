"""The exact float64 reference on sampled query rows, and the errors against it: of the output, and of the weights.

A cell is scored on R sampled query rows (sample_rows: the first, the last and R - 2 drawn by the seed), against exact
attention in float64 on those rows (variants.reference_attention: the full attention, or the variant's own pattern),
computed REFERENCE_CHUNK_BYTES of scores at a time so the check's memory stays below the measured call's; in train mode
with the gradients of q, k, v for a seeded output gradient on those rows. Errors: rel L2, max abs and mean cosine on the
rows that are real tokens; the trivial answers' (uniform attention, a zero output) beside them.

The attention-weight metric beside the output error (topk_recall): for each sampled row that is a real token, the
TOP_K keys exact attention weighs most (float64; fewer where the row sees fewer keys) against the TOP_K the variant
weighs most (its ``attention_weights`` on those rows): the share of the exact ones it also ranks in its top k, over
every (row, head) scored. Recall and not KL: Linformer's effective weights are signed (softmax weights times F), where
KL and cross-entropy are undefined; a ranking is defined for every variant that gives weights. k = 8: the keys that
carry most of a peaked row's mass on `llm` inputs (a sink head's first tokens, a retrieval head's target, a local
head's nearest keys) fit in 8, and 8 is not so few that one near-tie decides a row; on near-uniform rows (`gaussian`)
the top 8 are arbitrary, so the recall there says as little as the output error does. A variant whose
attention_weights declines (None: the AttentionVariant default, a plugin's) gets None.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from variants import attention_weights, reference_attention


# float64 scores per reference chunk (query rows are processed in chunks): bounds the accuracy
# check's own memory so the process's peak stays that of the cell measured, not of the gold.
REFERENCE_CHUNK_BYTES = {"cpu": 1 << 24, "cuda": 1 << 28}


def sample_rows(N: int, R: int, seed: int) -> Tensor:
    """R query rows of N, sorted: the first, the last and R - 2 drawn by `seed` (all N when R >= N)."""
    if R >= N:
        return torch.arange(N)
    g = torch.Generator().manual_seed(seed + N)
    middle = torch.randperm(N - 2, generator=g)[: R - 2] + 1
    return torch.cat([torch.tensor([0]), middle.sort().values, torch.tensor([N - 1])])


def sampled(q: Tensor, k: Tensor, error_rows: int, seed: int, kv_mask: Tensor | None) -> tuple[Tensor, int, Tensor]:
    """The sampled query rows (R,), the rows per reference chunk (REFERENCE_CHUNK_BYTES of float64 scores), and which
    sampled rows are real tokens (B, R)."""
    B, H, N, M = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    rows = sample_rows(N, error_rows, seed).to(q.device)
    chunk = max(1, REFERENCE_CHUNK_BYTES[q.device.type] // (B * H * M * 8))
    valid = kv_mask[:, rows] if kv_mask is not None else torch.ones(B, len(rows), dtype=torch.bool, device=q.device)
    return rows, chunk, valid


def reference_rows(
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
    q64, k64, v64 = (t.double() for t in (q, k, v))
    with torch.no_grad():
        parts = [
            reference_attention(
                q64, k64, v64, causal=causal, kv_mask=kv_mask, pattern=pattern, rows=rows[i : i + chunk]
            )
            for i in range(0, len(rows), chunk)
        ]
    return torch.cat(parts, dim=2)


@dataclass(frozen=True)
class TrivialErrors:
    """The errors of two trivial answers on a cell's sampled rows (row fields): uniform attention and a zero output."""

    uniform_rel_l2_error: float
    uniform_cosine: float
    zero_rel_l2_error: float


def baseline_errors(
    q: Tensor, k: Tensor, v: Tensor, *, causal: bool, error_rows: int, seed: int, kv_mask: Tensor | None = None
) -> TrivialErrors:
    """The errors two trivial answers score against exact attention on the rows check_accuracy samples (same seed):
    uniform attention (the mean of v over the keys each row sees, causality and padding respected: exact attention with
    q = 0) and a zero output. A variant not clearly below the uniform error has learnt nothing about q."""
    rows, chunk, valid = sampled(q, k, error_rows, seed, kv_mask)
    ref, uniform = (
        reference_rows(x, k, v, rows, chunk, causal, kv_mask, None) for x in (q, torch.zeros_like(q))
    )  # (B, H, R, D) each
    scored = output_errors(uniform, ref, valid)
    zero = output_errors(torch.zeros_like(ref), ref, valid)["rel_l2_error"]
    return TrivialErrors(scored["rel_l2_error"], scored["cosine"], zero)


def reference_with_grads(
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


TOP_K = 8


def topk_recall(
    attn: Any,
    q: Tensor,
    k: Tensor,
    *,
    causal: bool,
    rows: Tensor,
    valid: Tensor,
    chunk: int,
    kv_mask: Tensor | None = None,
    pattern: Any = None,
) -> float | None:
    """The recall of the exact top-TOP_K keys (see the module doc) on `rows` (R,), scoring the rows `valid` (B, R)
    marks; `chunk` rows at a time (the reference's memory bound); `pattern`: score against the variant's own pattern."""
    fn = getattr(attn, "attention_weights", None)
    if not callable(fn):
        return None
    hits = total = 0
    for i in range(0, len(rows), chunk):
        part = rows[i : i + chunk]
        with torch.no_grad():
            mine = fn(q, k, causal=causal, kv_mask=kv_mask, rows=part)
            if mine is None:
                return None
            exact = attention_weights(
                q.double(), k.double(), causal=causal, kv_mask=kv_mask, pattern=pattern, rows=part
            )
        h, t = _hits(mine.double(), exact, valid[:, i : i + chunk])
        hits, total = hits + h, total + t
    return hits / total if total else None


def _hits(mine: Tensor, exact: Tensor, valid: Tensor) -> tuple[int, int]:
    """(exact top keys the variant also ranks in its top, exact top keys) over the valid rows of (B, H, R, M) weights."""
    top = min(TOP_K, exact.shape[-1])
    wanted = (exact > 0).sum(-1).clamp_max(top)  # (B, H, R): a row seeing fewer keys has fewer top keys
    rank = torch.arange(top, device=exact.device)
    exact_top, mine_top = exact.topk(top, dim=-1).indices, mine.topk(top, dim=-1).indices  # (B, H, R, top)
    counted = rank < wanted[..., None]  # the first `wanted` of each top list count
    found = (exact_top[..., :, None] == mine_top[..., None, :]) & counted[..., None, :]  # (B, H, R, top, top)
    hit = found.any(-1) & counted & valid[:, None, :, None]
    return int(hit.sum()), int((counted & valid[:, None, :, None]).sum())
