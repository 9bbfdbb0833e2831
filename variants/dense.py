"""Dense (exact) softmax attention: the textbook formula and the fused kernels that compute it.

GQA (k, v with H_kv heads): sdpa passes enable_gqa, reference groups the query heads onto their
K/V head, xformers takes its 5-D BMGHK layout with K/V expanded at stride 0; none copies K/V.
Causal with fewer queries than keys (N < M, the last N positions: bottom-right) runs on every backend: sdpa through
a bool mask (its is_causal aligns top-left), xformers' bottom-right causal bias, the textbook's offset triangle.
Model features: logit softcapping runs on the textbook backend only (fused SDPA and xformers cannot cap scores; "auto"
takes the textbook path for a softcap call, a named sdpa or xformers is refused); sink logits on sdpa (the sink as a
zero-valued extra key whose bias is its logit: a float mask of N x (M + 1)) and the textbook backend. int8 scores
(int8_scores=True) on the textbook backend: Q and K quantized per token and head, QK^T summed by torch._int_mm in int32
and rescaled to float32 (variants._int8_scores), the softmax in float32, P @ V in v's dtype.
Decoding keeps a KV cache (preallocated, doubling; variants._decode.KVCache) and runs each new query over the cached
keys by the hand-written one-query kernel (variants._native: CPU, float32; config decode_backend) or through the
configured backend.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

import torch
from torch import Tensor

from variants._checks import check_choice, query_offset
from variants._decode import KVCacheDecoding
from variants._decode_step import ONE_QUERY_DECODE_BACKENDS, DecodeStep
from variants._gqa import from_xformers_layout, group, sdpa, ungroup, xformers_layout
from variants._int8_scores import int8_scores as int8_qk
from variants._model_features import feature_backend, given_features, sdpa_with_sinks, softcapped, softmax_with_sinks
from variants._native import attend_one_query
from variants._registry import register_variant
from variants.base import dense_flops, AttentionVariant, Capabilities, VariantConfig, softmax_scale
from variants.reference import PatternWeights, visibility
from variants.sliding_window import SlidingWindowAttention, SlidingWindowConfig

DENSE_BACKENDS = ("sdpa", "xformers", "reference")  # fastest first: "auto" takes the first that works


@dataclass(frozen=True, kw_only=True)
class DenseConfig(VariantConfig):
    backend: str = "auto"  # auto | sdpa (torch fused SDPA) | xformers (CUDA) | reference (einsum, N x M scores)
    # a decode step over the KV cache: native (variants._native's one-query kernel: CPU, float32) | eager (forward on
    # `backend`) | auto (native where it takes the call); "added": out of cell ids at its default
    decode_backend: str = field(default="auto", metadata={"added": True})

    def validate(self) -> None:
        check_choice("backend", self.backend, ("auto",) + DENSE_BACKENDS)
        check_choice("decode_backend", self.decode_backend, ONE_QUERY_DECODE_BACKENDS)


@register_variant("dense", config=DenseConfig)
class DenseAttention(PatternWeights, KVCacheDecoding, AttentionVariant):
    """Exact softmax attention, O(N*M) memory for the scores (the fused backends avoid storing them)."""

    capabilities = Capabilities(
        exact=True, gqa=True, decode=True, causal_offset=True, softcap=True, sink_logits=True, int8_scores=True
    )
    backends = DENSE_BACKENDS
    feature_backends = {"softcap": ("reference",), "sink_logits": ("sdpa", "reference"), "int8_scores": ("reference",)}
    flops_tolerance = 0.0  # the CPU count is exact: fused SDPA's two matmuls, or the textbook's two

    def __init__(self, config: DenseConfig | None = None):
        super().__init__(config)
        # "auto" runs the kernel only under the auto backend: a named backend is what the user asked each step to run
        native = self.config.decode_backend == "native" or self.config.backend == "auto"
        self._decode_step = DecodeStep(
            self._over_cache, self.config.decode_backend, native=attend_one_query if native else None, compiles=False
        )

    def executed_flops(
        self,
        B: int,
        H: int,
        N: int,
        M: int,
        D: int,
        causal: bool,
        *,
        H_kv: int | None = None,
        backend: str | None = None,
    ) -> int:
        """The fused backends skip the tiles above the diagonal (the convention's half); the textbook backend
        computes all N x M scores and masks them, as sdpa does under a query offset (N < M: a bool mask)."""
        backend = backend or self.config.backend
        skips = backend == "xformers" or (backend != "reference" and N == M)
        return dense_flops(B, H, N, M, D, causal and skips)

    def backend_reasons(self, backend: str, q: Tensor, *, training: bool) -> list[str]:
        if backend == "xformers":
            if q.device.type != "cuda":
                return [f"needs a CUDA device (xformers' kernels are GPU-only), got {q.device.type!r}"]
            if importlib.util.find_spec("xformers") is None:
                return ["needs the xformers package: pip install xformers"]
        return []

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        causal: bool = False,
        kv_mask: Tensor | None = None,
        softcap: float | None = None,
        sink_logits: Tensor | None = None,
        int8_scores: bool | None = None,
    ) -> Tensor:
        features = given_features(softcap, sink_logits, int8_scores)
        backend = feature_backend(self.feature_backends, self.active_backend(q, k, v), features)
        if backend == "sdpa":
            return _sdpa(q, k, v, causal=causal, kv_mask=kv_mask, sink_logits=sink_logits)
        if backend == "xformers":
            return _xformers(q, k, v, causal=causal, kv_mask=kv_mask)
        return _textbook(q, k, v, causal=causal, kv_mask=kv_mask, **features)

    def windowed(self, window: int) -> AttentionVariant:
        """Dense attention within a causal window is sliding_window's band, computed exactly (its auto backend)."""
        return SlidingWindowAttention(SlidingWindowConfig(window=window))

    # ---- decoding: a KV cache (init_state, step: KVCacheDecoding) -------------------------
    def _over_cache(self, q_t: Tensor, k: Tensor, v: Tensor, kv_mask: Tensor | None) -> Tensor:
        """A step's attention in torch: the new query (the last position) over every cached key, on `backend`."""
        return self.forward(q_t, k, v, causal=True, kv_mask=kv_mask)

    def extra_decode_reasons(self, q: Tensor, k: Tensor, v: Tensor, *, kv_mask: Tensor | None) -> list[str]:
        """A step runs the configured backend, so its refusals (e.g. xformers off CUDA) apply too."""
        backend = self.resolve_backend(q, training=False)
        return [f"backend {backend!r} {r}" for r in self.backend_reasons(backend, q, training=False)]


def _textbook(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool,
    kv_mask: Tensor | None,
    softcap: float | None = None,
    sink_logits: Tensor | None = None,
    int8_scores: bool | None = None,
) -> Tensor:
    """softmax(q k^T / sqrt(D) + bias) v with the N x M scores materialised (nanoGPT's slow path).

    One pass per step: the scale folded into q (N*D, not N*M), the additive -inf bias added in place, and only when
    some query row sees no key (a padded first key when causal, an all-padded sequence) those rows set to 0 before the
    softmax and after it (zeros, with finite gradients).
    GQA: the G query heads of a K/V head are stacked as rows, (B, H_kv, G*N, D), so K/V are not repeated.
    softcap caps the scores before the bias; sink_logits (H,) join each head's softmax denominator; int8_scores computes
    q k^T from int8 q (scale folded in) and k, float32 scores.
    """
    B, H, N, D = q.shape
    Hkv, M = k.shape[1], k.shape[2]
    qg = group(q * softmax_scale(D), Hkv).flatten(2, 3)  # (B, H_kv, G*N, D)
    scores = int8_qk(qg, k) if int8_scores else torch.matmul(qg, k.transpose(-2, -1))  # (B, H_kv, G*N, M)
    scores = softcapped(scores.view(B, H, N, M), softcap)  # (B, H, N, M)
    bias = _additive_mask(N, M, causal=causal, kv_mask=kv_mask, dtype=scores.dtype, device=q.device)  # (B|1, 1, N|1, M)
    if bias is not None:
        scores += bias  # -inf, not -1e20: -1e20 overflows float16
    blind = None  # rows that see no key: softmax over nothing is NaN, forward and backward
    if _some_row_sees_nothing(query_offset(N, M, causal) if causal else None, kv_mask):
        blind = torch.isneginf(bias).all(-1, keepdim=True)  # (B or 1, 1, N or 1, 1)
        scores = scores.masked_fill(blind, 0.0)  # finite there, and no gradient flows back through them
    weights = softmax_with_sinks(scores, sink_logits, dtype=torch.float32)
    if blind is not None:
        weights = weights.masked_fill(blind, 0.0)  # zeros, as the reference gives
    out = torch.matmul(weights.to(v.dtype).view(B, Hkv, -1, M), v)  # (B, H_kv, G*N, D)
    return ungroup(out.view(B, Hkv, H // Hkv, N, D))  # (B, H, N, D)


def _additive_mask(
    N: int, M: int, *, causal: bool, kv_mask: Tensor | None, dtype: torch.dtype, device: torch.device
) -> Tensor | None:
    """0 where a key is visible, -inf where not: (B or 1, 1, N or 1, M), built in one pass; None when all are visible.
    Causal: row i sees keys j <= i + M - N (bottom-right)."""
    bias = None
    if causal:
        above = 1 + query_offset(N, M, causal)  # the first diagonal row 0 may not see
        bias = torch.full((N, M), float("-inf"), dtype=dtype, device=device).triu_(above)[None, None]  # (1, 1, N, M)
    if kv_mask is not None:
        padding = torch.zeros(kv_mask.shape, dtype=dtype, device=device).masked_fill_(~kv_mask, float("-inf"))
        padding = padding[:, None, None, :]  # (B, 1, 1, M)
        bias = padding if bias is None else bias + padding
    return bias


def _some_row_sees_nothing(causal_offset: int | None, kv_mask: Tensor | None) -> bool:
    """Whether a query row has no visible key. causal_offset (None: not causal): causal row 0 sees keys 0..offset only,
    so a batch row whose first offset + 1 keys are padded; not causal: an all-padded batch row."""
    if kv_mask is None:
        return False
    seen_by_row_0 = kv_mask if causal_offset is None else kv_mask[:, : causal_offset + 1]
    return not bool(seen_by_row_0.any(dim=1).all())


def _sdpa(
    q: Tensor, k: Tensor, v: Tensor, *, causal: bool, kv_mask: Tensor | None, sink_logits: Tensor | None
) -> Tensor:
    N, M = q.shape[2], k.shape[2]
    causal = causal and N > 1  # one query is the last position: it sees every key (a decode step)
    if sink_logits is not None:  # the sink as one more, zero-valued key: the mask becomes N x (M + 1) floats
        keep = _keep_mask(q, k, causal=causal, kv_mask=kv_mask)
        return sdpa_with_sinks(q, k, v, keep, sink_logits, softmax_scale(q.shape[-1]))
    if kv_mask is None and (not causal or N == M):
        return sdpa(q, k, v, is_causal=causal)
    # SDPA cannot take is_causal and attn_mask together, and its is_causal aligns top-left (N < M would hide the keys
    # of the last M - N positions): fold causality, bottom-right, into the bool mask.
    keep = _keep_mask(q, k, causal=causal, kv_mask=kv_mask)
    return sdpa(q, k, v, attn_mask=keep)


def _xformers(q: Tensor, k: Tensor, v: Tensor, *, causal: bool, kv_mask: Tensor | None) -> Tensor:
    import xformers.ops as xops  # lazy: importing xformers on a CPU-only build prints warnings

    bias = None
    if kv_mask is not None:
        bias = _additive_bias(q, k, causal=causal, kv_mask=kv_mask)
    elif causal:  # N < M: bottom-right, the last N positions
        bias = (
            xops.LowerTriangularMask()
            if q.shape[2] == k.shape[2]
            else xops.fmha.attn_bias.LowerTriangularFromBottomRightMask()
        )
    # xformers wants (B, N, H, D), or (B, N, H_kv, G, D) for GQA.
    out = xops.memory_efficient_attention(*xformers_layout(q, k, v), attn_bias=bias)
    return from_xformers_layout(out)


def _keep_mask(q: Tensor, k: Tensor, *, causal: bool, kv_mask: Tensor | None) -> Tensor | None:
    """The reference's visibility for all N query rows: bool (B or 1, 1, N or 1, M), or None when all keys are visible."""
    N, M = q.shape[2], k.shape[2]
    positions = torch.arange(N, device=q.device) + query_offset(N, M, causal)  # causal: the last N positions
    return visibility(positions, M, causal=causal, kv_mask=kv_mask)


def _additive_bias(q: Tensor, k: Tensor, *, causal: bool, kv_mask: Tensor) -> Tensor:
    """An additive bias for xformers, its last dim padded to a multiple of 8 as it requires.

    (B, H, N, M), or (B, H_kv, G, N, M) for GQA's 5-D layout.
    """
    B, H, N, M = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    heads = (H,) if k.shape[1] == H else (k.shape[1], H // k.shape[1])
    M8 = (M + 7) // 8 * 8
    storage = torch.zeros(B, *heads, N, M8, dtype=q.dtype, device=q.device)
    bias = storage[..., :M]
    keep = _keep_mask(q, k, causal=causal, kv_mask=kv_mask)  # (B or 1, 1, N, M)
    if len(heads) == 2:
        keep = keep[:, :, None]  # (B or 1, 1, 1, N, M)
    bias.masked_fill_(~keep.expand(bias.shape), float("-inf"))
    return bias
