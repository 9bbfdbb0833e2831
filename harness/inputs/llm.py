"""`llm`: q, k, v whose heads attend like the heads measured in pretrained LLMs, in published proportions.

Each K/V head gets one of four types, drawn per seed (the query heads of a GQA group share their K/V head's type and
structure and differ in their own q draws):

- ``sink`` (share `sink`): most of the mass on the first token (an attention sink, StreamingLLM), the rest local;
- ``local`` (the remainder): mass falling with distance, a decay length drawn log-uniformly in [4, `max_decay`] per
  head, plus a weaker sink (StreamingLLM's streaming heads: sinks and recent tokens);
- ``retrieval`` (share `retrieval`): each query copies one key's content from anywhere before it, a sharp peak far
  back (the copy-paste heads of Wu et al.);
- ``diffuse`` (share `diffuse`): low-contrast scores, high entropy over the whole context.

Proportions (the defaults): Wu et al., "Retrieval Head Mechanistically Explains Long-Context Factuality" (2024,
arXiv:2404.15574): fewer than 5% of heads are retrieval heads in every model family studied -> retrieval 0.05.
DuoAttention (Xiao et al. 2024, arXiv:2410.10819): the heads that need the full context (retrieval heads in its sense)
are about a quarter of an MHA model's (Llama-2-7B; half of a GQA model's), the rest streaming heads (sinks + recent
tokens) -> full-context heads 0.25 = retrieval 0.05 + diffuse 0.20, streaming heads 0.75. StreamingLLM (Xiao et al.
2023, arXiv:2309.17453): heads beyond the first two layers put a large share of their mass on the initial tokens, and
keeping 4 sink tokens restores a window's perplexity -> every streaming head has a sink, dominant (sink mass > 0.5) in
a third of them -> sink 0.25, local 0.50. docs/accuracy.md shows the entropy and distance profile per type.

Seeds vary the content (the head types, decay lengths, directions, targets and v), not only the type draw. RoPE with
base `base` (10000, Llama's) rotates q and k of sink, local and diffuse heads; a retrieval head matches content, as
in the slowly rotating dimensions a pretrained model uses for it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from harness.inputs import QKV, _randn, _rotate, per_query_head, register_inputs

HEAD_TYPES = ("sink", "local", "retrieval", "diffuse")  # the order of the type codes llm_head_types returns


@register_inputs("llm")
def llm(
    B: int,
    H: int,
    N: int,
    M: int,
    D: int,
    *,
    generator,
    device,
    base: float = 10000.0,
    sink: float = 0.25,
    retrieval: float = 0.05,
    diffuse: float = 0.20,
    max_decay: float = 256.0,
    scale: float = 10.0,
    kv_heads: int | None = None,
) -> QKV:
    """Heads like a pretrained LLM's: sinks, local heads of many decay lengths, retrieval heads, diffuse heads (RoPE base 10000).

    Shares of K/V heads per type: `sink`, `retrieval`, `diffuse`, local the rest; `max_decay` the longest local decay
    length; `scale` the peak logit of the structured heads.
    """
    Hkv = H if kv_heads is None else kv_heads
    types = llm_head_types(B, Hkv, generator=generator, device=device, sink=sink, retrieval=retrieval, diffuse=diffuse)
    g = dict(generator=generator, device=device)
    half = D // 2
    # Local structure: per K/V head, energy on the RoPE pairs that turn at least once per decay length (theta >= 1 / l),
    # so q_i . k_j falls over |i - j| ~ l; the slowest pair is kept for the sink direction.
    theta = base ** (-torch.arange(half, device=device, dtype=torch.float32) * 2 / D)  # (D/2,)
    decay = torch.exp(torch.rand(B, Hkv, 1, 1, **g) * math.log(max_decay / 4)) * 4  # (B, H_kv, 1, 1) in [4, max_decay]
    pairs = (theta >= 1 / decay) & (torch.arange(half, device=device) < half - 1)  # (B, H_kv, 1, D/2)
    pairs[..., 0] = True  # the fastest pair always, so every head has some locality
    u = _randn(B, Hkv, 1, D, **g) * torch.cat([pairs, pairs, torch.zeros_like(pairs[..., : D - 2 * half])], -1)
    u = u / u.norm(dim=-1, keepdim=True).clamp_min(1e-6) * math.sqrt(scale * math.sqrt(D))  # peak logit = scale
    code = per_query_head(types, H)[..., None, None]  # (B, H, 1, 1)
    kcode = types[..., None, None]  # (B, H_kv, 1, 1)
    contrast = torch.where(code == 3, 0.15, 1.0)  # diffuse heads: low-contrast scores
    jitter = 0.3 * math.sqrt(scale / math.sqrt(D))  # per-coordinate noise, relative to |u|
    q = _rotate(contrast * per_query_head(u, H) + jitter * _randn(B, H, N, D, **g), base)  # (B, H, N, D)
    k = _rotate(u + jitter * _randn(B, Hkv, M, D, **g), base)  # (B, H_kv, M, D)
    # Retrieval: keys carry random content c_j, and query i copies that of a target t(i) <= i anywhere before it.
    content = _randn(B, Hkv, M, D, **g)  # (B, H_kv, M, D), |c|^2 ~ D
    target = (torch.rand(B, H, N, **g) * (torch.arange(N, device=device).clamp(max=M - 1) + 1)).long()  # (B, H, N)
    copied = per_query_head(content, H).gather(2, target[..., None].expand(-1, -1, -1, D))  # (B, H, N, D)
    sharp = scale / math.sqrt(D)  # the target's logit: scale
    q = torch.where(code == 2, sharp * copied + 0.5 * _randn(B, H, N, D, **g), q)
    k = torch.where(kcode == 2, content, k)
    # Sinks: key 0 gets a large component on the slowest RoPE pair, which every query shares (not rotated).
    sink_logit = torch.where(kcode == 0, scale + 1 + 2 * torch.rand(B, Hkv, 1, 1, **g), scale - 4.0)  # (B, H_kv, 1, 1)
    sink_logit = torch.where(kcode == 3, 0.0, sink_logit)
    direction = torch.zeros(D, device=device)
    direction[half - 1] = 1.0  # the slowest pair's first coordinate
    amplitude = math.sqrt(math.sqrt(D))  # q's and k_0's coefficients, so a*b / sqrt(D) = sink_logit
    q = q + per_query_head(amplitude * torch.ones_like(sink_logit), H) * direction
    k[:, :, 0] = k[:, :, 0] + (sink_logit[..., 0] / amplitude * math.sqrt(D)) * direction
    v = _randn(B, Hkv, M, D, **g)
    return q, k, v


def llm_head_types(
    B: int, Hkv: int, *, generator, device, sink: float = 0.25, retrieval: float = 0.05, diffuse: float = 0.20
) -> Tensor:
    """Type codes (B, H_kv) per K/V head, indices into HEAD_TYPES, drawn with the given shares (local the rest).

    The first draw of llm's generator, so a caller with the same seed gets the same types (the docs' profile figure)."""
    shares = torch.tensor([sink, 0.0, retrieval, diffuse], device=device)
    if bool((shares < 0).any()) or float(shares.sum()) > 1:
        raise ValueError(
            f"llm: sink={sink}, retrieval={retrieval}, diffuse={diffuse} must be shares in [0, 1] summing to at most 1 "
            "(local heads take the rest)"
        )
    shares[1] = 1 - shares.sum()
    draws = torch.rand(B, Hkv, generator=generator, device=device)
    return torch.bucketize(draws, shares.cumsum(0)[:-1].contiguous(), right=True)  # (B, H_kv)
