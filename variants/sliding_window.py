"""Sliding-window (local) attention: each query sees only the keys within `window` of it.

Convention (positions aligned at the start, as in the reference):
- causal:     query i sees keys j with i - window < j <= i (itself and the window - 1 before it);
- non-causal: query i sees keys j with |i - j| < window (2 * window - 1 keys in the interior).

Backends compute the same band exactly; they differ in how much of N x M they touch:
- banded:   query blocks of _BLOCK rows attend to the key span around them through fused SDPA,
            never an N x M matrix: O(N * window) time and memory, forward and backward, any device;
- flex:     torch.nn.attention.flex_attention with a block-sparse mask, compiled (forward only on CPU);
- xformers: memory_efficient_attention with xformers' local-attention bias (CUDA only);
- masked:   dense SDPA with an N x M band mask: O(N * M), the baseline that shows what sparsity buys.
"""
from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from variants._checks import check_choice, check_int
from variants._registry import register_variant
from variants.base import AttentionVariant, Capabilities, VariantConfig, softmax_scale

SLIDING_BACKENDS = ("banded", "flex", "xformers", "masked")
_AUTO_ORDER = {  # fastest first per device type; measured on CPU, chosen for generality on CUDA
    "cpu": ("banded", "flex", "masked"),
    "cuda": ("flex", "xformers", "banded", "masked"),
}
_BLOCK = 64  # banded: query rows per block; smaller blocks waste fewer keys but add per-block overhead
_FLEX_BLOCK = 128  # flex: sparse block size (flex_attention's default tile)
_FLEX_BLOCK_MASKS: dict[tuple, object] = {}  # (N, M, window, causal, device) -> BlockMask
_FLEX_FN: list = []  # the compiled flex call, built on first use (never at import)


@dataclass(frozen=True, kw_only=True)
class SlidingWindowConfig(VariantConfig):
    window: int = 256  # keys each query sees, itself included (causal: i-window < j <= i; else |i-j| < window)
    # auto | banded (blocked SDPA, O(N*w)) | flex (compiled) | xformers (CUDA) | masked (dense, O(N^2))
    backend: str = "auto"

    def validate(self) -> None:
        check_int("window", self.window, minimum=1)
        check_choice("backend", self.backend, ("auto",) + SLIDING_BACKENDS)


@register_variant("sliding_window", config=SlidingWindowConfig)
class SlidingWindowAttention(AttentionVariant):
    """Exact softmax attention restricted to a band of `window` keys around each query (Longformer, Mistral)."""

    capabilities = Capabilities(exact=True)
    backends = SLIDING_BACKENDS
    small_config = {"window": 8}

    def resolve_backend(self, q: Tensor, *, training: bool = False) -> str:
        """config.backend, or for "auto" the fastest available here (the order differs on CPU and CUDA)."""
        if self.config.backend != "auto":
            return self.config.backend
        order = _AUTO_ORDER.get(q.device.type, ("banded", "masked"))
        return next((b for b in order if not self.backend_reasons(b, q, training=training)), "banded")

    def backend_reasons(self, backend: str, q: Tensor, *, training: bool) -> list[str]:
        device = q.device.type
        if backend == "flex":
            if device not in ("cpu", "cuda"):
                return [f"runs on cpu or cuda, got device {device!r}"]
            if device == "cpu" and training:
                return ["has no backward pass on CPU (PyTorch's flex_attention is forward-only there); "
                        "use backend 'banded' for training on CPU"]
            if device == "cuda" and importlib.util.find_spec("triton") is None:
                return ["needs triton to compile flex_attention on CUDA: pip install triton"]
        if backend == "xformers":
            if device != "cuda":
                return [f"needs a CUDA device (xformers' kernels are GPU-only), got {device!r}"]
            if importlib.util.find_spec("xformers") is None:
                return ["needs the xformers package: pip install xformers"]
        return []

    def extra_reasons(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, kv_mask: Tensor | None, training: bool
    ) -> list[str]:
        if self.resolve_backend(q, training=training) != "xformers":
            return []
        reasons = []
        if kv_mask is not None:
            reasons.append("(xformers) takes no key padding mask with a local-attention bias; "
                           "use backend 'flex' or 'banded'")
        if q.shape[2] != k.shape[2]:
            reasons.append("(xformers) aligns local attention at the bottom right, so it needs N == M; "
                           "use 'flex' or 'banded'")
        if q.dtype == torch.float32 and not causal:
            reasons.append("(xformers) serves a two-sided local bias only with its Flash kernels (float16/bfloat16); "
                           "got float32")
        if q.dtype == torch.float32 and causal and training:
            reasons.append("(xformers) has no float32 backward for causal local attention (cutlass lacks it)")
        return reasons

    def pattern(self, query_idx: Tensor, key_idx: Tensor) -> Tensor:
        """The band |i - j| < window as bool (R, M); with causal=True the reference adds j <= i."""
        return (query_idx[:, None] - key_idx[None, :]).abs() < self.config.window

    def flops(self, B: int, H: int, N: int, M: int, D: int, causal: bool) -> int:
        """4*D FLOPs per visible (query, key) pair of the band: the useful work, the same for every backend."""
        return 4 * B * H * D * band_pairs(N, M, self.config.window, causal)

    def prepare(self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, kv_mask: Tensor | None = None,
                training: bool = False) -> float:
        """flex: build the block mask and compile (forward, and backward when training); seconds spent."""
        if self.resolve_backend(q, training=training) != "flex":
            return 0.0
        start = time.perf_counter()
        q, k, v = (t.detach().requires_grad_(training) for t in (q, k, v))
        # Dynamo guards on grad mode, so a forward is compiled both under no_grad and without it.
        for grad_mode in (True,) if training else (False, True):
            with torch.set_grad_enabled(grad_mode):
                out = _flex(q, k, v, self.config.window, causal=causal, kv_mask=kv_mask)
                if training:
                    out.sum().backward()
        if q.device.type == "cuda":
            torch.cuda.synchronize(q.device)
        return time.perf_counter() - start

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, kv_mask: Tensor | None = None) -> Tensor:
        backend = self.active_backend(q, k, v)
        window = self.config.window
        if backend == "banded":
            return _banded(q, k, v, window, causal=causal, kv_mask=kv_mask)
        if backend == "flex":
            return _flex(q, k, v, window, causal=causal, kv_mask=kv_mask)
        if backend == "xformers":
            return _xformers(q, k, v, window, causal=causal)
        return _masked(q, k, v, window, causal=causal, kv_mask=kv_mask)


def band_pairs(N: int, M: int, window: int, causal: bool) -> int:
    """Number of (query, key) pairs inside the band (before padding): the work an exact band needs."""
    i = torch.arange(N, dtype=torch.int64)
    lo = (i - window + 1).clamp(min=0)
    hi = (i if causal else i + window - 1).clamp(max=M - 1)
    return int((hi - lo + 1).clamp(min=0).sum())


def _banded(q: Tensor, k: Tensor, v: Tensor, window: int, *, causal: bool, kv_mask: Tensor | None) -> Tensor:
    """Blocks of b queries, each attending (fused SDPA) to the L = b + span keys that can reach it."""
    B, H, N, D = q.shape
    M = k.shape[2]
    b = min(_BLOCK, N)
    nb = -(-N // b)
    P = window - 1  # keys before a query that it may see
    L = b + P + (0 if causal else P)  # keys a block of b queries may see
    Mp = (nb - 1) * b + L  # padded key length: key position j sits at index j + P
    qb = F.pad(q, (0, 0, 0, nb * b - N)).view(B, H, nb, b, D)
    kw, vw = (_windows(t, P, Mp, L, b) for t in (k, v))  # (B, H, nb, L, D) overlapping views
    rel = torch.arange(L, device=q.device)[None, :] - P - torch.arange(b, device=q.device)[:, None]  # j - i, (b, L)
    band = (rel > -window) & ((rel <= 0) if causal else (rel < window))  # (b, L), the same in every block
    outs = []
    for i in range(B):  # per batch row, so k/v windows stay views and the padding mask is per row
        real = torch.zeros(Mp, dtype=torch.bool, device=q.device)
        n_real = min(M, Mp - P)
        real[P : P + n_real] = True if kv_mask is None else kv_mask[i, :n_real]
        keep = (band[None] & real.unfold(0, L, b)[:, None, :])[None]  # (1, nb, b, L): 4-D keeps SDPA's fused CPU kernel
        out = F.scaled_dot_product_attention(qb[i], kw[i], vw[i], attn_mask=keep, scale=softmax_scale(D))  # (H, nb, b, D)
        if kv_mask is not None or N > M:  # a query with no visible key gets zeros, as in the reference
            out = out.masked_fill(~keep.any(-1)[..., None], 0.0)
        outs.append(out)
    return torch.stack(outs).reshape(B, H, nb * b, D)[:, :, :N]


def _windows(t: Tensor, P: int, Mp: int, L: int, b: int) -> Tensor:
    """(B, H, M, D) -> (B, H, nb, L, D): block n's L keys start at padded index n*b (a view, no copy)."""
    M = t.shape[2]
    padded = F.pad(t, (0, 0, P, max(0, Mp - P - M)))[:, :, :Mp]  # (B, H, Mp, D)
    return padded.unfold(2, L, b).transpose(-1, -2)


def _masked(q: Tensor, k: Tensor, v: Tensor, window: int, *, causal: bool, kv_mask: Tensor | None) -> Tensor:
    """Dense SDPA with the N x M band (and causal, padding) as a bool mask: O(N * M)."""
    N, M = q.shape[2], k.shape[2]
    i = torch.arange(N, device=q.device)[:, None]
    j = torch.arange(M, device=q.device)[None, :]
    keep = ((i - j).abs() < window) & ((j <= i) if causal else True)  # (N, M)
    keep = keep[None, None] if kv_mask is None else keep[None, None] & kv_mask[:, None, None, :]  # (B|1, 1, N, M)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=softmax_scale(q.shape[-1]))
    if kv_mask is not None or N > M:
        out = out.masked_fill(~keep.any(-1)[..., None], 0.0)
    return out


def _flex(q: Tensor, k: Tensor, v: Tensor, window: int, *, causal: bool, kv_mask: Tensor | None) -> Tensor:
    """Compiled flex_attention over the band's block-sparse mask; padding through a score_mod."""
    B, N, M = q.shape[0], q.shape[2], k.shape[2]
    if not _FLEX_FN:
        _FLEX_FN.append(torch.compile(_flex_padded))
    block_mask = _flex_block_mask(N, M, window, causal, q.device)
    if kv_mask is None:  # one compiled graph serves both cases: an all-true mask costs a load per score
        kv_mask = torch.ones(B, M, dtype=torch.bool, device=q.device)
    return _FLEX_FN[0](q, k, v, block_mask, kv_mask, softmax_scale(q.shape[-1]))


def _flex_padded(q: Tensor, k: Tensor, v: Tensor, block_mask, kv_mask: Tensor, scale: float) -> Tensor:
    from torch.nn.attention.flex_attention import flex_attention

    def padding(score, b, h, q_idx, kv_idx):
        return torch.where(kv_mask[b, kv_idx], score, float("-inf"))

    return flex_attention(q, k, v, score_mod=padding, block_mask=block_mask, scale=scale)


def _flex_block_mask(N: int, M: int, window: int, causal: bool, device: torch.device):
    """The band's BlockMask, cached; built from block corners, so no N x M tensor is ever made."""
    key = (N, M, window, causal, str(device))
    if key in _FLEX_BLOCK_MASKS:
        return _FLEX_BLOCK_MASKS[key]
    from torch.nn.attention.flex_attention import BlockMask

    bounds = torch.tensor([-window, 1 if causal else window], device=device)  # a tensor: no recompile per window

    def band(b, h, q_idx, kv_idx):
        rel = kv_idx - q_idx
        return (rel > bounds[0]) & (rel < bounds[1])

    band.__name__ = f"sliding_window_{window}{'_causal' if causal else ''}"
    S = _FLEX_BLOCK
    q0 = torch.arange(0, N, S, device=device)[:, None]  # first row of each query block, (QB, 1)
    k0 = torch.arange(0, M, S, device=device)[None, :]  # first key of each key block, (1, KB)
    q1, k1 = (q0 + S - 1).clamp(max=N - 1), (k0 + S - 1).clamp(max=M - 1)
    lo, hi = -window, (1 if causal else window)
    any_visible = (k1 - q0 > lo) & (k0 - q1 < hi)  # (QB, KB): the band crosses the block
    whole = (q1 - q0 == S - 1) & (k1 - k0 == S - 1)  # a ragged edge block stays partial, as flex expects
    full = any_visible & (k0 - q1 > lo) & (k1 - q0 < hi) & whole
    partial = any_visible & ~full
    mask = BlockMask.from_kv_blocks(*_ordered(partial), *_ordered(full), BLOCK_SIZE=S, mask_mod=band, seq_lengths=(N, M))
    _FLEX_BLOCK_MASKS[key] = mask
    return mask


def _ordered(dense: Tensor) -> tuple[Tensor, Tensor]:
    """(QB, KB) bool -> (1, 1, QB) counts and (1, 1, QB, KB) key-block indices, the selected ones first."""
    counts = dense.sum(-1, dtype=torch.int32)
    indices = torch.argsort(dense.to(torch.int8), dim=-1, descending=True, stable=True).to(torch.int32)
    return counts[None, None], indices[None, None]


def _xformers(q: Tensor, k: Tensor, v: Tensor, window: int, *, causal: bool) -> Tensor:
    """xformers' memory_efficient_attention with its local bias (N == M, no padding: see extra_reasons)."""
    from xformers.ops import fmha  # lazy: importing xformers on a CPU-only build prints warnings

    if causal:  # keys j with i - window < j <= i
        bias = fmha.attn_bias.LowerTriangularFromBottomRightMask().make_local_attention(window)
    else:  # keys j with i - (window - 1) <= j <= i + (window - 1)
        bias = fmha.attn_bias.LocalAttentionFromBottomRightMask(window_left=window - 1, window_right=window - 1)
    # xformers wants (B, N, H, D).
    out = fmha.memory_efficient_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_bias=bias,
                                          scale=softmax_scale(q.shape[-1]))
    return out.transpose(1, 2)
