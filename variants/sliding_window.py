"""Sliding-window (local) attention: each query sees only the keys within `window` of it.

Convention (positions aligned at the start, as in the reference):
- causal:     query i sees keys j with i - window < j <= i (itself and the window - 1 before it);
- non-causal: query i sees keys j with |i - j| < window (2 * window - 1 keys in the interior);
- sinks:      the first `sinks` keys are visible to every query as well (StreamingLLM's attention
              sinks), still subject to causality (j <= i) and padding.
i is a query's position: under causal with fewer queries than keys (N < M) the queries are the last N of the M
positions (bottom-right: row r sits at M - N + r), so the window ends at each query's own key, as in a decode step.

The band is declared once, in variants._band (`band`, the predicate every backend but xformers calls).
Backends compute the same band exactly; they differ in how much of N x M they touch:
- banded:   query blocks of b rows (variants._banded) attend to the key span around them through fused SDPA,
            never an N x M matrix: O(N * window) time and memory, forward and backward, any device;
- flex:     torch.nn.attention.flex_attention with a block-sparse mask, compiled (forward only on CPU);
- xformers: memory_efficient_attention with xformers' local-attention bias (CUDA only);
- masked:   dense SDPA with an N x M band mask: O(N * M), the baseline that shows what sparsity buys.

GQA: banded stacks each K/V head's G query heads as rows of a block; flex and masked pass
enable_gqa; xformers takes its 5-D layout. Learned sink logits (a model's per-head ``sink_logits``, gpt-oss's s_aux; not
the ``sinks`` tokens above) run on masked only, the sink an extra zero-valued key: "auto" takes masked for them. Decoding keeps the sinks and a ring buffer of the last
`window` keys (variants._ring), so the state does not grow with N; it runs on SDPA whatever the backend.
"""

from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from variants._band import band, band_pairs
from variants._banded import _BLOCK_CHOICES, _FASTEST_BLOCK, _banded, _block_key, _choose_block, banded_block  # noqa: F401 - tests import them here
from variants._checks import check_choice, check_int, query_offset
from variants._decode import check_context, check_state, check_step, checked_once
from variants._decode_step import ONE_QUERY_DECODE_BACKENDS, DecodeStep
from variants._gqa import sdpa
from variants._model_features import capped_attention, sdpa_with_sinks
from variants._native import attend_one_query
from variants._registry import register_variant
from variants._ring import SlidingWindowState, over_slots, ring_from_context, ring_step
from variants._sliding_kernels import FLEX_BLOCK
from variants._sliding_kernels import flex as _flex
from variants._sliding_kernels import flex_blocks as _flex_blocks
from variants._sliding_kernels import flex_block_mask as _flex_block_mask  # noqa: F401 - tests import it here
from variants._sliding_kernels import xformers as _xformers
from variants.base import AttentionVariant, Capabilities, QualityKnob, VariantConfig, softmax_scale
from variants.reference import PatternFn, PatternWeights, visibility

SLIDING_BACKENDS = ("banded", "flex", "xformers", "masked")
_AUTO_ORDER = {  # fastest first per device type; measured on CPU, chosen for generality on CUDA
    "cpu": ("banded", "flex", "masked"),
    "cuda": ("flex", "xformers", "banded", "masked"),
}


@dataclass(frozen=True, kw_only=True)
class SlidingWindowConfig(VariantConfig):
    window: int = 256  # the band's reach, itself included (causal: i-window < j <= i; else |i-j| < window)
    # auto | banded (blocked SDPA, O(N*w)) | flex (compiled) | xformers (CUDA) | masked (dense, O(N^2))
    backend: str = "auto"
    sinks: int = 0  # attention sinks: keys 0..sinks-1 are visible to every query besides its band (j <= i if causal)
    # a step over the ring: native (variants._native's one-query kernel: CPU, float32) | eager (SDPA) | auto (native
    # where it takes the call); "added": out of cell ids at its default
    decode_backend: str = field(default="auto", metadata={"added": True})

    def validate(self) -> None:
        check_int("window", self.window, minimum=1)
        check_choice("backend", self.backend, ("auto",) + SLIDING_BACKENDS)
        check_int("sinks", self.sinks, minimum=0)
        check_choice("decode_backend", self.decode_backend, ONE_QUERY_DECODE_BACKENDS)


@register_variant("sliding_window", config=SlidingWindowConfig)
class SlidingWindowAttention(PatternWeights, AttentionVariant):
    """Exact softmax attention restricted to a band of `window` keys around each query (Longformer, Mistral)."""

    capabilities = Capabilities(exact=True, gqa=True, decode=True, causal_offset=True, sink_logits=True, softcap=True)
    backends = SLIDING_BACKENDS
    # the band's O(N * M) mask gains one sink column, or its scores are materialised and capped
    feature_backends = {"sink_logits": ("masked",), "softcap": ("masked",)}
    small_config = {"window": 8}
    # more is more accurate and slower; searched with and without 4 sinks (StreamingLLM's count): on heads that park
    # mass on the first tokens, 4 sinks let a much narrower window meet a budget
    quality_knob = QualityKnob("window", 16, 8192, at_most_length=True, searched_with=(("sinks", (0, 4)),))
    flops_tolerance = 0.0  # executed_flops counts the banded and masked backends' SDPA scores exactly

    def __init__(self, config: SlidingWindowConfig | None = None):
        super().__init__(config)
        self._decode_step = DecodeStep(over_slots, self.config.decode_backend, native=attend_one_query, compiles=False)

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
        if q.shape[2] != k.shape[2] and not causal:
            reasons.append(
                "(xformers) aligns local attention at the bottom right, so a non-causal call needs N == M (the contract "
                "aligns a non-causal band at the start); use 'flex' or 'banded'"
            )
        if q.dtype == torch.float32 and not causal:
            reasons.append(
                "(xformers) serves a two-sided local bias only with its Flash kernels (float16/bfloat16); got float32"
            )
        if q.dtype == torch.float32 and causal and training:
            reasons.append("(xformers) has no float32 backward for causal local attention (cutlass lacks it)")
        return reasons

    def windowed(self, window: int) -> "SlidingWindowAttention":
        """Within a model's own causal window: the narrower of the two bands (sinks and backend kept)."""
        narrower = min(window, self.config.window)
        return self if narrower == self.config.window else type(self)(replace(self.config, window=narrower))

    def pattern(self, query_idx: Tensor, key_idx: Tensor) -> Tensor:
        """The non-causal band and sinks as bool (R, M); the reference's visibility adds j <= i when causal."""
        return band(
            query_idx[:, None], key_idx[None, :], window=self.config.window, causal=False, sinks=self.config.sinks
        )

    def flops(self, B: int, H: int, N: int, M: int, D: int, causal: bool, *, H_kv: int | None = None) -> int:
        """4*D FLOPs per visible (query, key) pair of the band and sinks: the useful work, the same for every backend."""
        return 4 * B * H * D * band_pairs(N, M, self.config.window, causal, sinks=self.config.sinks)

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
        """4*D FLOPs per (query, key) score the backend computes ("auto": banded, the CPU choice):
        - banded: each block of b queries scores its L = b + (window - 1) (twice that non-causal) keys, plus the sinks;
        - masked: all N x M; flex: every block its block mask keeps (partial or whole), FLEX_BLOCK square;
        - xformers: the band (its kernel's tiling is not modelled).
        """
        window, S = self.config.window, min(self.config.sinks, M)
        backend = backend or self.config.backend
        backend = "banded" if backend == "auto" else backend
        if backend == "banded":
            b = min(banded_block(N, window, D, causal, S), N)  # the size prepare() measured fastest, else the default
            L = b + (window - 1) * (1 if causal else 2)
            scores = -(-N // b) * b * (L + S)
        elif backend == "masked":
            scores = N * M
        elif backend == "flex":
            partial, full = _flex_blocks(N, M, window, causal, torch.device("cpu"), sinks=S)
            scores = int((partial | full).sum()) * FLEX_BLOCK**2
        else:
            return self.flops(B, H, N, M, D, causal, H_kv=H_kv)
        return 4 * B * H * D * scores

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
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        causal: bool = False,
        kv_mask: Tensor | None = None,
        softcap: float | None = None,
        sink_logits: Tensor | None = None,
    ) -> Tensor:
        if sink_logits is not None or softcap is not None:  # masked only (feature_backends): "auto" or "masked" here
            features = {"softcap": softcap, "sink_logits": sink_logits}
            return _masked(q, k, v, self.pattern, causal=causal, kv_mask=kv_mask, **features)
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
        return ring_step(q_t, k_t, v_t, state, self._decode_step), state

    def decode_step_flops(self, B: int, H: int, context: int, D: int, *, H_kv: int | None = None) -> int:
        """One step (variants._ring.ring_step), whatever the context: SDPA of the query over every slot of its ring, the
        sinks + window slots (4*D each: q k^T and the weights @ v; empty slots and sinks inside the band are masked, not
        skipped)."""
        return 4 * B * H * D * (self.config.sinks + self.config.window)


def _masked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    pattern: PatternFn,
    *,
    causal: bool,
    kv_mask: Tensor | None,
    softcap: float | None = None,
    sink_logits: Tensor | None = None,
) -> Tensor:
    """Dense SDPA over exactly what the reference sees (pattern, causality, padding) as a bool mask: O(N * M).
    sink_logits (H,): each head's sink logit joins the denominator (an extra zero-valued key); softcap: the scores
    materialised and capped (capped_attention)."""
    N, M = q.shape[2], k.shape[2]
    positions = torch.arange(N, device=q.device) + query_offset(N, M, causal)  # causal: the last N positions
    keep = visibility(positions, M, causal=causal, kv_mask=kv_mask, pattern=pattern)  # (B|1, 1, N, M)
    if softcap is not None:
        return capped_attention(q, k, v, keep, softcap, sink_logits)
    if sink_logits is not None:  # a row that sees no key gets zeros: its weights all go to the zero-valued sink
        return sdpa_with_sinks(q, k, v, keep, sink_logits, softmax_scale(q.shape[-1]))
    out = sdpa(q, k, v, attn_mask=keep, scale=softmax_scale(q.shape[-1]))
    if kv_mask is not None or N > M:
        out = out.masked_fill(~keep.any(-1)[..., None], 0.0)
    return out
