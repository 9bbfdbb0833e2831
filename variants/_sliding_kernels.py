"""sliding_window's compiled and CUDA backends: flex_attention with a block-sparse band, and xformers.

flex's mask_mod is variants._band's predicate and its block classification reads the same BandLimits;
xformers speaks its own mask language (local-attention biases, no sinks), checked by the CUDA tests.
"""

from __future__ import annotations

import torch
from torch import Tensor

from variants._band import band_limits, in_band
from variants._checks import query_offset, softmax_scale
from variants._gqa import from_xformers_layout, xformers_layout

FLEX_BLOCK = 128  # flex: sparse block size (flex_attention's default tile)
_FLEX_BLOCK_MASKS: dict[tuple, object] = {}  # (N, M, window, causal, sinks, device) -> BlockMask
# Shape family -> its own compiled copy of _flex_padded, built on first use (never at import). A family is what
# dynamo specialises a call on (dtype, device, grad mode, requires_grad, GQA, head dims; sizes where static), so
# each compiles once. Dynamo keeps its cache and its recompile count on the code object: one torch.compile
# serving every family piles up entries until its recompile limit and then runs flex uncompiled, which
# materialises B*H*N*M scores (O(N^2) latency and memory reported as if real).
# On CUDA every length is its own family, compiled static (dynamic=False): flex's Triton kernel drops its boundary
# masks only for lengths known to be multiples of 128 (IS_DIVISIBLE), and no automatic-dynamic graph serves later
# lengths with other kernels than the first's. On CPU, where flex is forward-only and checked rather than timed
# (banded is CPU's auto backend), one dynamic graph serves every square length (N == M) of a family, keeping
# compilations few; a query offset (N < M: decoding, chunked prefill) compiles static, as torch 2.13's inductor
# emits C++ for a dynamic N != M graph that does not compile once the family has been specialised on other sizes
# ("'cur_kvSplitSize8' was not declared", tests/variants/test_contract_offset.py after test_contract.py).
_FLEX_FAMILIES: dict[tuple, object] = {}
# Cache entries one family may hold; past it dynamo raises (fail_on_recompile_limit_hit) instead of running eager
# flex. Static: one expected, one spare for a guard the family key does not name (strides, q, k, v aliasing one
# another). Dynamic: a symbolic graph is specialised again for some sizes (a size of 1, such as B = 1 or the block
# count of a length within one 128-block; duck sizing, which gives equal sizes such as N == M one symbol): a few per
# family, and 16 bounds the compile work one family can cost.
_FLEX_RECOMPILES_PER_FAMILY = {True: 2, False: 16}  # compiled static -> limit


class FlexNotCompiledError(RuntimeError):
    """flex_attention was about to run uncompiled: an error row, never a latency of the unfused O(N^2) path."""


def flex(
    q: Tensor, k: Tensor, v: Tensor, window: int, *, causal: bool, kv_mask: Tensor | None, sinks: int = 0
) -> Tensor:
    """Compiled flex_attention over the band's block-sparse mask; padding through a score_mod; GQA native."""
    B, M = q.shape[0], k.shape[2]
    block_mask = flex_block_mask(q.shape[2], M, window, causal, q.device, sinks=sinks)
    if kv_mask is None:  # one compiled graph serves both cases: an all-true mask costs a load per score
        kv_mask = torch.ones(B, M, dtype=torch.bool, device=q.device)
    family = flex_family(q, k, v)
    compiled = _compiled_for(family)
    with _strict_recompiles(_FLEX_RECOMPILES_PER_FAMILY[family[1]]):
        return compiled(q, k, v, block_mask, kv_mask, softmax_scale(q.shape[-1]), q.shape[1] != k.shape[1])


def flex_family(q: Tensor, k: Tensor, v: Tensor) -> tuple:
    """The shape family of a flex call: what its compiled graph is specialised on (family[1]: compiled static).

    Not the band: window, causal and sinks live in the BlockMask's tensors (and in its mask_mod's captured bounds
    tensor, one code for every band), so every band of a shape runs the same graph.
    """
    static = compiles_static(q, k)
    sizes = (q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2]) if static else ()  # B, H, H_kv, N, M
    grads = (torch.is_grad_enabled(), q.requires_grad, k.requires_grad, v.requires_grad)
    return (str(q.device), static, q.dtype, q.shape[1] != k.shape[1], q.shape[3], v.shape[3], grads, sizes)


def compiles_static(q: Tensor, k: Tensor) -> bool:
    """Whether flex compiles this length static (CUDA; a query offset on CPU) or in one dynamic graph for all
    square lengths (CPU): see above."""
    return q.device.type == "cuda" or q.shape[2] != k.shape[2]


def _compiled_for(family: tuple):
    """The family's compiled flex: a copy of _flex_padded (its own code object, so its own dynamo cache)."""
    if family not in _FLEX_FAMILIES:
        import types

        name = f"_flex_padded_{len(_FLEX_FAMILIES)}"  # the name TORCH_LOGS=recompiles shows
        code = _flex_padded.__code__.replace(co_name=name)
        copy = types.FunctionType(code, _flex_padded.__globals__, name)
        _FLEX_FAMILIES[family] = torch.compile(copy, dynamic=not family[1], fullgraph=True)
    return _FLEX_FAMILIES[family]


def _strict_recompiles(limit: int):
    """A context for one call: dynamo's recompile limit set to `limit`, and hitting it an error, not an eager run."""
    import torch._dynamo.config as dynamo_config

    names = {
        "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit": limit,
        "fail_on_recompile_limit_hit"
        if hasattr(dynamo_config, "fail_on_recompile_limit_hit")
        else "fail_on_cache_limit_hit": True,
        "suppress_errors": False,  # dynamo refuses it together with the hard failure
    }
    return dynamo_config.patch(**names)


def _flex_padded(q: Tensor, k: Tensor, v: Tensor, block_mask, kv_mask: Tensor, scale: float, gqa: bool) -> Tensor:
    from torch.nn.attention.flex_attention import flex_attention

    if not torch.compiler.is_compiling():  # dynamo disabled or gave up: never time the eager, O(N^2) flex
        raise FlexNotCompiledError(
            f"flex_attention would run uncompiled on {tuple(q.shape)} (torch.compile disabled or gave up on this "
            "call), materialising B*H*N*M scores; no number is reported. Check TORCHDYNAMO_DISABLE and "
            "TORCH_LOGS=recompiles, or use backend 'banded'"
        )

    def padding(score, b, h, q_idx, kv_idx):
        return torch.where(kv_mask[b, kv_idx], score, float("-inf"))

    return flex_attention(q, k, v, score_mod=padding, block_mask=block_mask, scale=scale, enable_gqa=gqa)


def flex_block_mask(N: int, M: int, window: int, causal: bool, device: torch.device, *, sinks: int = 0):
    """The band's (and sinks') BlockMask, cached; built from block corners, so no N x M tensor is ever made."""
    key = (N, M, window, causal, sinks, str(device))
    if key in _FLEX_BLOCK_MASKS:
        return _FLEX_BLOCK_MASKS[key]
    from torch.nn.attention.flex_attention import BlockMask

    # on flex's row indices (causal: row r sits at position r + M - N); a tensor, not Python ints: no recompile per band
    bounds = torch.tensor(band_limits(window, causal, sinks, query_offset(N, M, causal)), device=device)

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
    each one run of offsets, so its extremes decide. Offsets of key index from query row: causal rows sit at M - N + r."""
    lo, hi, _, sink_hi = band_limits(window, causal, sinks, query_offset(N, M, causal))
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
    """xformers' memory_efficient_attention with its local bias, aligned bottom-right (causal N < M is the contract's;
    non-causal needs N == M), no padding, no sinks: see extra_reasons."""
    from xformers.ops import fmha  # lazy: importing xformers on a CPU-only build prints warnings

    if causal:  # keys j with i - window < j <= i
        bias = fmha.attn_bias.LowerTriangularFromBottomRightMask().make_local_attention(window)
    else:  # keys j with i - (window - 1) <= j <= i + (window - 1)
        bias = fmha.attn_bias.LocalAttentionFromBottomRightMask(window_left=window - 1, window_right=window - 1)
    # xformers wants (B, N, H, D), or (B, N, H_kv, G, D) for GQA.
    out = fmha.memory_efficient_attention(*xformers_layout(q, k, v), attn_bias=bias, scale=softmax_scale(q.shape[-1]))
    return from_xformers_layout(out)
