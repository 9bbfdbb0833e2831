"""The attention-weight metric beside the output error: recall of the exact top-k keys on the sampled query rows.

For each sampled row that is a real token, the TOP_K keys exact attention weighs most (float64; fewer where the row
sees fewer keys) are compared with the TOP_K the variant weighs most (its ``attention_weights`` on those rows): the
recall is the share of the exact ones it also ranks in its top k, over every (row, head) scored.

Why recall and not KL: Linformer's effective weights over the keys are signed (softmax weights times F), where KL and
cross-entropy are undefined; a ranking is defined for every variant that gives weights. Why k = 8: the keys that carry
most of a peaked row's mass on `llm` inputs (a sink head's first tokens, a retrieval head's target, a local head's
nearest keys) fit in 8, and 8 is not so few that one near-tie decides a row. On near-uniform rows (`gaussian`) the top
8 are arbitrary, so the recall there says as little as the output error does.

A variant whose attention_weights declines (returns None; the AttentionVariant default, a plugin's) gets None.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from variants import attention_weights

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
