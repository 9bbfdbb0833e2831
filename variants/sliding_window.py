"""Sliding-window (local) attention: each query sees only the keys within `window` of it.

Convention (positions aligned at the start, as in the reference):
- causal:     query i sees keys j with i - window < j <= i (itself and the window - 1 before it);
- non-causal: query i sees keys j with |i - j| < window (2 * window - 1 keys in the interior);
- sinks:      the first `sinks` keys are visible to every query as well (StreamingLLM's attention
              sinks), still subject to causality (j <= i) and padding.

The band is declared once, in variants._band (`band`, the predicate every backend but xformers calls).
Backends compute the same band exactly; they differ in how much of N x M they touch:
- banded:   query blocks of _BLOCK rows attend to the key span around them through fused SDPA,
            never an N x M matrix: O(N * window) time and memory, forward and backward, any device;
- flex:     torch.nn.attention.flex_attention with a block-sparse mask, compiled (forward only on CPU);
- xformers: memory_efficient_attention with xformers' local-attention bias (CUDA only);
- masked:   dense SDPA with an N x M band mask: O(N * M), the baseline that shows what sparsity buys.

GQA: banded stacks each K/V head's G query heads as rows of a block; flex and masked pass
enable_gqa; xformers takes its 5-D layout. Decoding keeps the sinks and a ring buffer of the last
`window` keys (variants._ring), so the state does not grow with N; it runs on SDPA whatever the backend.
"""

from __future__ import annotations

import functools
import importlib.util
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from variants._band import band, band_pairs
from variants._checks import check_choice, check_int
from variants._decode import check_context, check_state, check_step, checked_once
from variants._gqa import sdpa
from variants._registry import register_variant
from variants._ring import SlidingWindowState, ring_from_context, ring_step
from variants._sliding_kernels import flex as _flex
from variants._sliding_kernels import flex_block_mask as _flex_block_mask  # noqa: F401 - tests import it here
from variants._sliding_kernels import xformers as _xformers
from variants.base import AttentionVariant, Capabilities, QualityKnob, VariantConfig, softmax_scale
from variants.reference import PatternFn, visibility

SLIDING_BACKENDS = ("banded", "flex", "xformers", "masked")
_AUTO_ORDER = {  # fastest first per device type; measured on CPU, chosen for generality on CUDA
    "cpu": ("banded", "flex", "masked"),
    "cuda": ("flex", "xformers", "banded", "masked"),
}
_BLOCK = 64  # banded: query rows per block; smaller blocks waste fewer keys but add per-block overhead
_BLOCK_CHOICES = (32, 64, 128)  # banded: the sizes prepare() times on the cell's inputs, per device
# banded: the block measured fastest per (device, dtype, N, window, D, causal, sinks); _BLOCK where none was
_FASTEST_BLOCK: dict[tuple, int] = {}


@dataclass(frozen=True, kw_only=True)
class SlidingWindowConfig(VariantConfig):
    window: int = 256  # the band's reach, itself included (causal: i-window < j <= i; else |i-j| < window)
    # auto | banded (blocked SDPA, O(N*w)) | flex (compiled) | xformers (CUDA) | masked (dense, O(N^2))
    backend: str = "auto"
    sinks: int = 0  # attention sinks: keys 0..sinks-1 are visible to every query besides its band (j <= i if causal)

    def validate(self) -> None:
        check_int("window", self.window, minimum=1)
        check_choice("backend", self.backend, ("auto",) + SLIDING_BACKENDS)
        check_int("sinks", self.sinks, minimum=0)


@register_variant("sliding_window", config=SlidingWindowConfig)
class SlidingWindowAttention(AttentionVariant):
    """Exact softmax attention restricted to a band of `window` keys around each query (Longformer, Mistral)."""

    capabilities = Capabilities(exact=True, gqa=True, decode=True)
    backends = SLIDING_BACKENDS
    small_config = {"window": 8}
    quality_knob = QualityKnob("window", 16, 8192, at_most_length=True)  # more is more accurate and slower

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
                return [
                    "has no backward pass on CPU (PyTorch's flex_attention is forward-only there); "
                    "use backend 'banded' for training on CPU"
                ]
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
        if self.config.sinks:
            reasons.append(
                f"(xformers) has no attention sinks in its local-attention bias, got sinks={self.config.sinks}; "
                "use backend 'banded', 'flex' or 'masked'"
            )
        if kv_mask is not None:
            reasons.append(
                "(xformers) takes no key padding mask with a local-attention bias; use backend 'flex' or 'banded'"
            )
        if q.shape[2] != k.shape[2]:
            reasons.append(
                "(xformers) aligns local attention at the bottom right, so it needs N == M; use 'flex' or 'banded'"
            )
        if q.dtype == torch.float32 and not causal:
            reasons.append(
                "(xformers) serves a two-sided local bias only with its Flash kernels (float16/bfloat16); got float32"
            )
        if q.dtype == torch.float32 and causal and training:
            reasons.append("(xformers) has no float32 backward for causal local attention (cutlass lacks it)")
        return reasons

    def pattern(self, query_idx: Tensor, key_idx: Tensor) -> Tensor:
        """The non-causal band and sinks as bool (R, M); the reference's visibility adds j <= i when causal."""
        return band(
            query_idx[:, None], key_idx[None, :], window=self.config.window, causal=False, sinks=self.config.sinks
        )

    def flops(self, B: int, H: int, N: int, M: int, D: int, causal: bool) -> int:
        """4*D FLOPs per visible (query, key) pair of the band and sinks: the useful work, the same for every backend."""
        return 4 * B * H * D * band_pairs(N, M, self.config.window, causal, sinks=self.config.sinks)

    def prepare(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        causal: bool = False,
        kv_mask: Tensor | None = None,
        training: bool = False,
    ) -> float:
        """flex: build the block mask and compile (forward, and backward when training); banded: time each of
        _BLOCK_CHOICES on these inputs (forward) and keep the fastest for this device and shape; seconds spent."""
        backend = self.resolve_backend(q, training=training)
        if backend == "banded":
            return _choose_block(q, k, v, self.config.window, causal=causal, kv_mask=kv_mask, sinks=self.config.sinks)
        if backend != "flex":
            return 0.0
        start = time.perf_counter()
        q, k, v = (t.detach().requires_grad_(training) for t in (q, k, v))
        # Dynamo guards on grad mode, so a forward is compiled both under no_grad and without it.
        for grad_mode in (True,) if training else (False, True):
            with torch.set_grad_enabled(grad_mode):
                out = _flex(q, k, v, self.config.window, causal=causal, kv_mask=kv_mask, sinks=self.config.sinks)
                if training:
                    out.sum().backward()
        if q.device.type == "cuda":
            torch.cuda.synchronize(q.device)
        return time.perf_counter() - start

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, kv_mask: Tensor | None = None
    ) -> Tensor:
        backend = self.active_backend(q, k, v)
        window, sinks = self.config.window, self.config.sinks
        if backend == "banded":
            return _banded(q, k, v, window, causal=causal, kv_mask=kv_mask, sinks=sinks)
        if backend == "flex":
            return _flex(q, k, v, window, causal=causal, kv_mask=kv_mask, sinks=sinks)
        if backend == "xformers":
            return _xformers(q, k, v, window, causal=causal)
        return _masked(q, k, v, self.pattern, causal=causal, kv_mask=kv_mask)

    # ---- decoding: sinks + a ring buffer of the last `window` keys ----------------------------
    def init_state(self, k: Tensor, v: Tensor, *, kv_mask: Tensor | None = None) -> SlidingWindowState:
        """The sinks and the last `window` tokens of the context k, v (B, H_kv, N, D): O(sinks + window) memory."""
        check_context(k, v, kv_mask)
        self.check_decode(k, k, v, kv_mask=kv_mask)
        return ring_from_context(k, v, kv_mask, self.config.window, self.config.sinks)

    def step(
        self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: SlidingWindowState
    ) -> tuple[Tensor, SlidingWindowState]:
        """Write the token into the ring (and the sinks, while p < sinks) and attend to band + sinks."""
        check_state(state, SlidingWindowState, self.name)

        def check() -> None:
            check_step(q_t, k_t, v_t, batch=state.k.shape[0], kv_heads=state.k.shape[1], head_dim=state.k.shape[3])
            self.check_decode(q_t, k_t, v_t)

        checked_once(state, q_t, k_t, v_t, check)  # once per sequence, not per token
        return ring_step(q_t, k_t, v_t, state), state


def _block_key(q: Tensor, window: int, causal: bool, sinks: int) -> tuple:
    return (str(q.device), q.dtype, q.shape[2], window, q.shape[3], causal, sinks)


def _choose_block(
    q: Tensor, k: Tensor, v: Tensor, window: int, *, causal: bool, kv_mask: Tensor | None, sinks: int
) -> float:
    """Time the banded forward at each of _BLOCK_CHOICES (the best of two calls after one warm-up) and keep the fastest
    for this device and shape in _FASTEST_BLOCK; returns the seconds spent (a set-up cost, outside timing)."""
    start, key = time.perf_counter(), _block_key(q, window, causal, sinks)
    if key in _FASTEST_BLOCK:
        return 0.0
    sync = (lambda: torch.cuda.synchronize(q.device)) if q.device.type == "cuda" else (lambda: None)
    seconds = {}
    with torch.no_grad():
        for b in _BLOCK_CHOICES:
            times = []
            for _ in range(3):
                sync()
                t0 = time.perf_counter()
                _banded(q, k, v, window, causal=causal, kv_mask=kv_mask, sinks=sinks, block=b)
                sync()
                times.append(time.perf_counter() - t0)
            seconds[b] = min(times[1:])
    _FASTEST_BLOCK[key] = min(seconds, key=seconds.__getitem__)
    return time.perf_counter() - start


def _banded(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    window: int,
    *,
    causal: bool,
    kv_mask: Tensor | None,
    sinks: int = 0,
    block: int | None = None,
) -> Tensor:
    """Blocks of b queries, each attending (fused SDPA) to the L = b + span keys that can reach it (and the sinks).

    GQA: the G query heads of a K/V head are stacked as the G*b rows of a block, so K/V are not repeated. q is a view
    when N is a multiple of b and G = 1; K/V are padded once per call (one copy each); without padding the block
    mask is cached per shape (_band_keep). b: `block`, else the size prepare() measured fastest, else _BLOCK.
    """
    B, H, N, D = q.shape
    Hkv, M = k.shape[1], k.shape[2]
    G = H // Hkv
    b = min(block or _FASTEST_BLOCK.get(_block_key(q, window, causal, sinks), _BLOCK), N)
    nb = -(-N // b)
    P = window - 1  # keys before a query that it may see
    L = b + P + (0 if causal else P)  # keys a block of b queries may see
    Mp = (nb - 1) * b + L  # padded key length: key position j sits at index j + P
    qp = q if nb * b == N else F.pad(q, (0, 0, 0, nb * b - N))
    qb = qp.view(B, Hkv, G, nb, b, D).transpose(2, 3).reshape(B, Hkv, nb, G * b, D)  # a view when G = 1
    kw, vw = (_windows(t, P, Mp, L, b) for t in (k, v))  # (B, H_kv, nb, L, D) overlapping views
    S = min(sinks, M)
    if S:  # sink keys go in front of every block's window: (B, H_kv, nb, S + L, D), a copy
        kw, vw = (torch.cat([t[:, :, None, :S].expand(-1, -1, nb, -1, -1), w], dim=3) for t, w in ((k, kw), (v, vw)))
    if kv_mask is None:  # one mask for every batch row, cached per shape
        keep = _band_keep(N, M, b, window, causal, S, G, q.device)
        flat = (t.flatten(0, 1) for t in (qb, kw, vw))  # (B*H_kv, nb, rows, D): 4-D keeps SDPA's fused CPU kernel
        out = F.scaled_dot_product_attention(*flat, attn_mask=keep, scale=softmax_scale(D))
        if N > M:  # a query with no visible key gets zeros, as in the reference
            out = out.masked_fill(~keep.any(-1)[..., None], 0.0)
    else:
        outs = []
        for n in range(B):  # per batch row, so k/v windows stay views and the padding mask is per row
            keep = _band_keep(N, M, b, window, causal, S, G, q.device, kv_mask[n])
            # (H_kv, nb, G*b, D)
            out = F.scaled_dot_product_attention(qb[n], kw[n], vw[n], attn_mask=keep, scale=softmax_scale(D))
            outs.append(out.masked_fill(~keep.any(-1)[..., None], 0.0))  # no visible key: zeros
        out = torch.stack(outs)
    out = out.view(B, Hkv, nb, G, b, D).transpose(2, 3)  # (B, H_kv, G, nb, b, D)
    return out.reshape(B, H, nb * b, D)[:, :, :N]


@functools.lru_cache(maxsize=8)
def _cached_keep(N: int, M: int, b: int, window: int, causal: bool, S: int, G: int, device: torch.device) -> Tensor:
    return _band_keep_uncached(N, M, b, window, causal, S, G, device, None)


def _band_keep(
    N: int, M: int, b: int, window: int, causal: bool, S: int, G: int, device: torch.device, real: Tensor | None = None
) -> Tensor:
    """The banded blocks' bool mask (1, nb, G*b, S + L): band, sinks and padding (`real`, (M,) of one batch row)."""
    if real is None:
        return _cached_keep(N, M, b, window, causal, S, G, device)
    return _band_keep_uncached(N, M, b, window, causal, S, G, device, real)


def _band_keep_uncached(
    N: int, M: int, b: int, window: int, causal: bool, S: int, G: int, device: torch.device, real_keys: Tensor | None
) -> Tensor:
    nb, P = -(-N // b), window - 1
    L = b + P + (0 if causal else P)
    Mp = (nb - 1) * b + L
    # Block n's query r sits at padded index r + P of its L keys; the window depends only on j - i, so block 0's
    # (b, L) picture holds for every block.
    window_seen = band(
        torch.arange(b, device=device)[:, None] + P,
        torch.arange(L, device=device)[None, :],
        window=window,
        causal=causal,
    )  # (b, L)
    real = torch.zeros(Mp, dtype=torch.bool, device=device)
    n_real = min(M, Mp - P)
    real[P : P + n_real] = True if real_keys is None else real_keys[:n_real]
    keep = window_seen[None] & real.unfold(0, L, b)[:, None, :]  # (nb, b, L)
    if S:
        i = torch.arange(nb * b, device=device).view(nb, b, 1)  # query positions
        j = torch.arange(S, device=device)
        in_window = band(i, j, window=window, causal=causal)  # (nb, b, S): shown by the window part already
        sink_seen = band(i, j, window=window, causal=causal, sinks=S) & ~in_window  # so no key counts twice
        keep = torch.cat([sink_seen & (True if real_keys is None else real_keys[:S]), keep], dim=-1)  # (nb, b, S + L)
    return keep.repeat(1, G, 1)[None]  # (1, nb, G*b, S + L): 4-D keeps SDPA's fused CPU kernel


def _windows(t: Tensor, P: int, Mp: int, L: int, b: int) -> Tensor:
    """(B, H, M, D) -> (B, H, nb, L, D): block n's L keys start at padded index n*b (the one copy is the padding)."""
    M = t.shape[2]
    padded = F.pad(t, (0, 0, P, max(0, Mp - P - M)))[:, :, :Mp]  # (B, H, Mp, D)
    return padded.unfold(2, L, b).transpose(-1, -2)


def _masked(q: Tensor, k: Tensor, v: Tensor, pattern: PatternFn, *, causal: bool, kv_mask: Tensor | None) -> Tensor:
    """Dense SDPA over exactly what the reference sees (pattern, causality, padding) as a bool mask: O(N * M)."""
    N, M = q.shape[2], k.shape[2]
    # (B|1, 1, N, M)
    keep = visibility(torch.arange(N, device=q.device), M, causal=causal, kv_mask=kv_mask, pattern=pattern)
    out = sdpa(q, k, v, attn_mask=keep, scale=softmax_scale(q.shape[-1]))
    if kv_mask is not None or N > M:
        out = out.masked_fill(~keep.any(-1)[..., None], 0.0)
    return out
