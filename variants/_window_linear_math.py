"""window_linear's tensor math as plain functions, shared by its forward and its decode step.

Its keys and key sums, its feature map, the combine of the exact window with the linear far part, and the decode step
itself as one pure function (what variants._decode_step compiles). The formulas are in variants/window_linear.py's doc."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from variants._checks import softmax_scale
from variants._gqa import group, ungroup
from variants._hedgehog import hedgehog_features
from variants._ring import SlidingWindowState

TINY = 1e-30  # floor of the normaliser: a query that sees no real key gets a zero output


@dataclass
class WindowLinearState:
    """window_linear's decode state: the window's ring buffer and float32 sums over the keys that left it (constant in
    N)."""

    ring: SlidingWindowState  # the last `window` keys and values (variants._ring)
    kv: Tensor  # (B, H_kv, 1, 2F, D): sum_j phi(k_j) v_j^T over the far keys
    z: Tensor  # (B, H_kv, 1, 2F, 1): sum_j phi(k_j)


def keys(k: Tensor, v: Tensor, kv_mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """k, v (B, H_kv, M, D) as (B, H_kv, 1, M, D) float32, zero at padded keys; which keys are real, (B, 1, 1, 1, M)."""
    B, M = k.shape[0], k.shape[2]
    real = (torch.ones(B, M, dtype=torch.bool, device=k.device) if kv_mask is None else kv_mask)[:, None, None, None, :]
    k5, v5 = (torch.where(real[:, :, :, 0, :, None], t.float()[:, :, None], 0.0) for t in (k, v))
    return k5, v5, real


def sums(fk: Tensor, v5: Tensor) -> tuple[Tensor, Tensor]:
    """(sum_j phi(k_j) v_j^T (B, H_kv, 1, 2F, D), sum_j phi(k_j) (B, H_kv, 1, 2F, 1)) over the keys given."""
    return fk.transpose(-1, -2) @ v5, fk.sum(-2).unsqueeze(-1)


def features(x: Tensor, weight: Tensor, bias: Tensor, real: Tensor | None = None) -> Tensor:
    """Hedgehog's feature map on x (B, H_kv, G or 1, L, D) -> (B, H_kv, G or 1, L, 2F); 0 at padded keys (real
    (B, 1, 1, 1, L)); weight, bias as variants._hedgehog.float_map gives them."""
    phi = hedgehog_features(x, weight, bias)
    return phi if real is None else torch.where(real[..., 0, :, None], phi, 0.0)


def combine(
    q: Tensor,
    fq: Tensor,
    k: Tensor,
    v: Tensor,
    in_window: Tensor,
    log_gamma: Tensor,
    far: tuple[Tensor, Tensor],
    linear: Tensor | None = None,
) -> Tensor:
    """Queries' output: exact softmax over the window keys, gamma phi.phi over the rest, one normaliser.

    q (B, H_kv, G, C, D) and its features fq; k, v the span's keys (B, H_kv, 1, L, D); in_window (B, 1, 1, C or 1, L);
    log_gamma (1, P, 1, 1, 1); far: the (kv, z) sums over the far keys; linear (B, H_kv, G, C, L): phi(q).phi(k) at the
    span's keys outside the window (None: every span key is in it, a decode step's ring)."""
    scores = (q @ k.transpose(-1, -2) * softmax_scale(q.shape[-1])).masked_fill(~in_window, -math.inf)
    m = torch.maximum(scores.amax(-1, keepdim=True), log_gamma)  # (B, H_kv, G, C, 1)
    exact, g = torch.exp(scores - m), torch.exp(log_gamma - m)
    num, den = fq @ far[0], fq @ far[1]  # the far keys' linear part
    if linear is not None:  # the span's keys outside the window join it
        num, den = num + linear @ v, den + linear.sum(-1, keepdim=True)
    num, den = exact @ v + g * num, exact.sum(-1, keepdim=True) + g * den
    return num / den.clamp_min(TINY)  # (B, H_kv, G, C, D)


def window_linear_step(
    q_t: Tensor,
    k_t: Tensor,
    v_t: Tensor,
    ring_k: Tensor,
    ring_v: Tensor,
    ring_real: Tensor,
    slot: Tensor,
    kv: Tensor,
    z: Tensor,
    weight: Tensor,
    bias: Tensor,
    log_gamma: Tensor,
) -> Tensor:
    """One decode step as a pure tensor function: the key leaving ring slot `slot` ((1,) int64) joins the sums kv, z
    (its phi is 0 if the slot is empty or padded), the token takes the slot (ring_k, ring_v (B, H_kv, W, D), ring_real
    (B, W) updated in place), and q_t (B, H, 1, D) attends: every ring key is in its window. Returns (B, H, 1, D)."""
    k5, v5, real = keys(ring_k.index_select(2, slot), ring_v.index_select(2, slot), ring_real.index_select(1, slot))
    fk = features(k5, weight, bias, real).transpose(-1, -2)  # (B, H_kv, 1, 2F, 1)
    kv.addcmul_(fk, v5)  # in place: += phi(k) v^T, the state's own sums (no new tensors per step)
    z.add_(fk)
    ring_k.index_copy_(2, slot, k_t)
    ring_v.index_copy_(2, slot, v_t)
    ring_real.index_fill_(1, slot, True)
    q5 = group(q_t.float(), ring_k.shape[1])  # (B, H_kv, G, 1, D)
    # The ring as it is (no copy in float32): its empty and padded slots hold zeros (ring_from_context), masked here.
    k5, v5, real = ring_k.float()[:, :, None], ring_v.float()[:, :, None], ring_real[:, None, None, None, :]
    gamma = log_gamma.float().view(1, -1, 1, 1, 1)
    out = combine(q5, features(q5, weight, bias), k5, v5, real, gamma, (kv, z))  # (B, H_kv, G, 1, D)
    return ungroup(out).to(q_t.dtype)
