"""sliding_window's compiled and CUDA backends: flex_attention with a block-sparse band, and xformers.

flex's mask_mod is variants._band's predicate and its block classification reads the same BandLimits;
xformers speaks its own mask language (local-attention biases, no sinks), checked by the CUDA tests.
"""

from __future__ import annotations

import torch
from torch import Tensor

from variants._band import band_limits, in_band
from variants._checks import softmax_scale
from variants._gqa import from_xformers_layout, xformers_layout

FLEX_BLOCK = 128  # flex: sparse block size (flex_attention's default tile)
_FLEX_BLOCK_MASKS: dict[tuple, object] = {}  # (N, M, window, causal, sinks, device) -> BlockMask
_FLEX_FN: list = []  # the compiled flex call, built on first use (never at import)
# flex specialises on sequence lengths, heads, dtype and grad mode, so a sweep compiles it once per such
# combination; past dynamo's default limit (8) it would silently fall back to unfused, eager flex.
_FLEX_RECOMPILE_LIMIT = 256


def flex(
    q: Tensor, k: Tensor, v: Tensor, window: int, *, causal: bool, kv_mask: Tensor | None, sinks: int = 0
) -> Tensor:
    """Compiled flex_attention over the band's block-sparse mask; padding through a score_mod; GQA native."""
    B, N, M = q.shape[0], q.shape[2], k.shape[2]
    if not _FLEX_FN:
        _FLEX_FN.append(torch.compile(_flex_padded))
    block_mask = flex_block_mask(N, M, window, causal, q.device, sinks=sinks)
    if kv_mask is None:  # one compiled graph serves both cases: an all-true mask costs a load per score
        kv_mask = torch.ones(B, M, dtype=torch.bool, device=q.device)
    with _recompile_limit(_FLEX_RECOMPILE_LIMIT):
        return _FLEX_FN[0](q, k, v, block_mask, kv_mask, softmax_scale(q.shape[-1]), q.shape[1] != k.shape[1])


def _recompile_limit(limit: int):
    """A context raising dynamo's per-function recompile limit for this call only (older torch: cache_size_limit)."""
    import torch._dynamo.config as dynamo_config

    name = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"
    return dynamo_config.patch(**{name: max(limit, getattr(dynamo_config, name))})


def _flex_padded(q: Tensor, k: Tensor, v: Tensor, block_mask, kv_mask: Tensor, scale: float, gqa: bool) -> Tensor:
    from torch.nn.attention.flex_attention import flex_attention

    def padding(score, b, h, q_idx, kv_idx):
        return torch.where(kv_mask[b, kv_idx], score, float("-inf"))

    return flex_attention(q, k, v, score_mod=padding, block_mask=block_mask, scale=scale, enable_gqa=gqa)


def flex_block_mask(N: int, M: int, window: int, causal: bool, device: torch.device, *, sinks: int = 0):
    """The band's (and sinks') BlockMask, cached; built from block corners, so no N x M tensor is ever made."""
    key = (N, M, window, causal, sinks, str(device))
    if key in _FLEX_BLOCK_MASKS:
        return _FLEX_BLOCK_MASKS[key]
    from torch.nn.attention.flex_attention import BlockMask

    bounds = torch.tensor(
        band_limits(window, causal, sinks), device=device
    )  # a tensor, not Python ints: no recompile per band

    def mask_mod(b, h, q_idx, kv_idx):
        return in_band(q_idx, kv_idx, bounds)

    mask_mod.__name__ = f"sliding_window_{window}{'_causal' if causal else ''}{f'_sinks_{sinks}' if sinks else ''}"
    partial, full = flex_blocks(N, M, window, causal, device, sinks=sinks)
    mask = BlockMask.from_kv_blocks(
        *_ordered(partial), *_ordered(full), BLOCK_SIZE=FLEX_BLOCK, mask_mod=mask_mod, seq_lengths=(N, M)
    )
    _FLEX_BLOCK_MASKS[key] = mask
    return mask


def flex_blocks(N: int, M: int, window: int, causal: bool, device: torch.device, *, sinks: int = 0):
    """(partial, full): bool (QB, KB) of the FLEX_BLOCK-square blocks flex computes, masked or whole.

    From block corners: a block's offsets j - i run over [k0 - q1, k1 - q0], and the window and the visible sinks are
    each one run of offsets, so its extremes decide."""
    lo, hi, _, sink_hi = band_limits(window, causal, sinks)
    S = FLEX_BLOCK
    q0 = torch.arange(0, N, S, device=device)[:, None]  # first row of each query block, (QB, 1)
    k0 = torch.arange(0, M, S, device=device)[None, :]  # first key of each key block, (1, KB)
    q1, k1 = (q0 + S - 1).clamp(max=N - 1), (k0 + S - 1).clamp(max=M - 1)
    whole = (q1 - q0 == S - 1) & (k1 - k0 == S - 1)  # a ragged edge block stays partial, as flex expects
    any_visible = (k1 - q0 > lo) & (k0 - q1 < hi)  # (QB, KB): the window crosses the block
    full = any_visible & (k0 - q1 > lo) & (k1 - q0 < hi) & whole
    if sinks:  # a block both parts cover only together stays partial: exact, just not skipped
        any_visible = any_visible | ((k0 < sinks) & (k0 - q1 < sink_hi))
        full = full | ((k1 < sinks) & (k1 - q0 < sink_hi) & whole)  # every key a sink, visible to every row
    return any_visible & ~full, full


def _ordered(dense: Tensor) -> tuple[Tensor, Tensor]:
    """(QB, KB) bool -> (1, 1, QB) counts and (1, 1, QB, KB) key-block indices, the selected ones first."""
    counts = dense.sum(-1, dtype=torch.int32)
    indices = torch.argsort(dense.to(torch.int8), dim=-1, descending=True, stable=True).to(torch.int32)
    return counts[None, None], indices[None, None]


def xformers(q: Tensor, k: Tensor, v: Tensor, window: int, *, causal: bool) -> Tensor:
    """xformers' memory_efficient_attention with its local bias (N == M, no padding, no sinks: see extra_reasons)."""
    from xformers.ops import fmha  # lazy: importing xformers on a CPU-only build prints warnings

    if causal:  # keys j with i - window < j <= i
        bias = fmha.attn_bias.LowerTriangularFromBottomRightMask().make_local_attention(window)
    else:  # keys j with i - (window - 1) <= j <= i + (window - 1)
        bias = fmha.attn_bias.LocalAttentionFromBottomRightMask(window_left=window - 1, window_right=window - 1)
    # xformers wants (B, N, H, D), or (B, N, H_kv, G, D) for GQA.
    out = fmha.memory_efficient_attention(*xformers_layout(q, k, v), attn_bias=bias, scale=softmax_scale(q.shape[-1]))
    return from_xformers_layout(out)
