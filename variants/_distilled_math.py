"""distilled's decode step as one pure tensor function, and the state it updates.

The formulas are in variants/distilled.py's doc; this is what variants._decode_step runs eagerly or compiles, and what
variants._native_steps' kernel computes."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from variants._gqa import group, ungroup
from variants._hedgehog import hedgehog_features

EPS = 1e-6  # floor of the normaliser: a query that sees no real key gets a zero output


def step_sums(q_t: Tensor, k_t: Tensor, v_t: Tensor, kv: Tensor, z: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """One decode step as a pure tensor function (what variants._decode_step compiles): kv (B, H_kv, 1, 2F, D) and z
    (B, H_kv, 1, 2F, 1) gain phi(k_t) v_t^T and phi(k_t) in place; out_t = phi(q_t) kv / phi(q_t).z, (B, H, 1, D)."""
    fk = hedgehog_features(k_t[:, :, None], weight, bias).transpose(-1, -2)  # (B, H_kv, 1, 2F, 1)
    kv.addcmul_(fk, v_t[:, :, None].float())
    z.add_(fk)
    fq = hedgehog_features(group(q_t, kv.shape[1]), weight, bias)  # (B, H_kv, G, 1, 2F)
    out = (fq @ kv) / (fq @ z).clamp_min(EPS)  # (B, H_kv, G, 1, D)
    return ungroup(out).to(q_t.dtype)


@dataclass
class DistilledState:
    """distilled's decode state: running float32 sums over the keys so far, per K/V head (O(F*D), constant in N)."""

    kv: Tensor  # (B, H_kv, 1, 2F, D): sum_j phi(k_j) v_j^T
    z: Tensor  # (B, H_kv, 1, 2F, 1): sum_j phi(k_j)
