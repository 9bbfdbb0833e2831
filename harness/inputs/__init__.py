"""Seeded input distributions: q, k, v generators registered by name, like variants.

Every generator is a function ``fn(B, H, N, M, D, *, generator, device, **params) -> (q, k, v)``
returning float32 tensors (B, H, N, D), (B, H, M, D), (B, H, M, D) drawn only from `generator`,
so a (name, params, shape, seed) always gives the same tensors: within a cell every variant sees
the same q, k, v. Its params are the generator's keyword-only parameters with defaults, given in
an inputs string like ``"gaussian:scale=4"``.

GQA: a generator with a keyword-only ``kv_heads`` parameter draws its structure (a head's direction, type, basis)
per K/V head and returns k, v with kv_heads heads; the G = H // kv_heads query heads of a group share their K/V head's
structure and differ in their own q draws, as in a GQA model. A generator without it (real activations) gets
every G-th head's K/V kept.

A generator may declare ``max_seq_len`` and an ``availability()`` check that returns a reason
when it cannot run here (e.g. a missing optional extra); the sweep records ``unsupported`` rows.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from harness.inputs.registry import (  # noqa: F401 - the package's API (and InputGenerator for type hints)
    QKV,
    InputGenerator,
    get_inputs,
    list_inputs,
    make_inputs,
    parse_inputs,
    register_inputs,
)


def _randn(*shape: int, generator: torch.Generator, device: torch.device) -> Tensor:
    return torch.randn(*shape, generator=generator, device=device)


# ---- built-in distributions ---------------------------------------------------------------------
@register_inputs("gaussian")
def gaussian(
    B: int, H: int, N: int, M: int, D: int, *, generator, device, scale: float = 1.0, kv_heads: int | None = None
) -> QKV:
    """iid N(0, 1) q, k, v; `scale` multiplies q, so logits have std ~scale: 1 diffuse, 4+ peaked."""
    Hkv = H if kv_heads is None else kv_heads
    q = _randn(B, H, N, D, generator=generator, device=device) * scale
    k = _randn(B, Hkv, M, D, generator=generator, device=device)
    v = _randn(B, Hkv, M, D, generator=generator, device=device)
    return q, k, v


@register_inputs("local")
def local(
    B: int,
    H: int,
    N: int,
    M: int,
    D: int,
    *,
    generator,
    device,
    scale: float = 12.0,
    noise: float = 0.3,
    base: float = 64.0,
    kv_heads: int | None = None,
) -> QKV:
    """Rotary-rotated copies of one vector per head: logits peak at i == j and fall with |i-j| (windows like it).

    q_i = R(i) (u + noise), k_j = R(j) (u + noise) with RoPE rotations of base `base`, so
    q_i . k_j ~ sum_f |u_f|^2 cos((i-j) theta_f): largest on the diagonal. `scale` sets the peak
    logit (|u|^2 / sqrt(D)); `base` sets how fast the correlation decays with distance.
    """
    Hkv = H if kv_heads is None else kv_heads
    u = _randn(B, Hkv, 1, D, generator=generator, device=device)  # one direction per K/V head
    u = u / u.norm(dim=-1, keepdim=True) * math.sqrt(scale * math.sqrt(D))  # |u|^2 / sqrt(D) = scale
    jitter = noise * u.norm(dim=-1, keepdim=True) / math.sqrt(D)  # per-coordinate noise relative to |u|
    uq, jq = per_query_head(u, H), per_query_head(jitter, H)  # (B, H, 1, D): the group's direction
    q = _rotate(uq + jq * _randn(B, H, N, D, generator=generator, device=device), base)
    k = _rotate(u + jitter * _randn(B, Hkv, M, D, generator=generator, device=device), base)
    v = _randn(B, Hkv, M, D, generator=generator, device=device)
    return q, k, v


@register_inputs("global")
def global_(
    B: int,
    H: int,
    N: int,
    M: int,
    D: int,
    *,
    generator,
    device,
    n_global: int = 4,
    fraction: float = 0.5,
    strength: float = 6.0,
    kv_heads: int | None = None,
) -> QKV:
    """Gaussian, plus `n_global` keys spread over the sequence that a `fraction` of queries match strongly (windows miss them).

    Matching queries get a shared direction g added; the global keys are g scaled so their logit
    is ~`strength` above the rest. The first global key sits at position 0 (visible under causal).
    """
    Hkv = H if kv_heads is None else kv_heads
    q, k, v = gaussian(B, H, N, M, D, generator=generator, device=device, kv_heads=Hkv)
    g = _randn(B, Hkv, 1, D, generator=generator, device=device)
    g = g / g.norm(dim=-1, keepdim=True)  # (B, H_kv, 1, D) unit direction per K/V head
    positions = torch.linspace(0, M - 1, max(1, min(n_global, M)), device=device).round().long().unique()
    matching = torch.rand(B, H, N, 1, generator=generator, device=device) < fraction  # (B, H, N, 1)
    amplitude = math.sqrt(strength * math.sqrt(D))  # (a g) . (a g) / sqrt(D) = strength
    q = q + matching * amplitude * per_query_head(g, H)
    k[:, :, positions] = amplitude * g.expand(B, Hkv, len(positions), D)
    return q, k, v


@register_inputs("lowrank")
def lowrank(
    B: int,
    H: int,
    N: int,
    M: int,
    D: int,
    *,
    generator,
    device,
    rank: int = 8,
    scale: float = 1.0,
    kv_heads: int | None = None,
) -> QKV:
    """q and k confined to one random `rank`-dimensional subspace per head (Linformer likes it); v gaussian."""
    rank, Hkv = max(1, min(int(rank), D)), H if kv_heads is None else kv_heads
    # (B, H_kv, D, r) orthonormal, one per K/V head
    basis, _ = torch.linalg.qr(_randn(B, Hkv, D, rank, generator=generator, device=device))
    coeff_scale = math.sqrt(D / rank)  # keep |q|^2 ~ D as in the gaussian case
    q_basis = per_query_head(basis, H).transpose(-1, -2)
    q = _randn(B, H, N, rank, generator=generator, device=device) @ q_basis * coeff_scale * scale
    k = _randn(B, Hkv, M, rank, generator=generator, device=device) @ basis.transpose(-1, -2) * coeff_scale
    v = _randn(B, Hkv, M, D, generator=generator, device=device)
    return q, k, v


def per_query_head(x: Tensor, H: int) -> Tensor:
    """(B, H_kv, ...) -> (B, H, ...): each K/V head's tensor for the G = H // H_kv query heads of its group."""
    return x.repeat_interleave(H // x.shape[1], dim=1)


def _rotate(x: Tensor, base: float) -> Tensor:
    """RoPE: rotate feature pairs of x (B, H, L, D) by position * theta_f, theta_f = base^(-2f/D)."""
    L, D = x.shape[-2], x.shape[-1]
    half = D // 2
    theta = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) * 2 / D)  # (D/2,)
    angle = torch.arange(L, device=x.device, dtype=torch.float32)[:, None] * theta  # (L, D/2)
    cos, sin = angle.cos(), angle.sin()
    x1, x2 = x[..., :half], x[..., half : 2 * half]
    rotated = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return torch.cat([rotated, x[..., 2 * half :]], dim=-1)  # odd D: the last feature is not rotated
