"""Softmax in a sliding window, a learned linear attention outside it, one shared normaliser (LoLCATs, Based).

For query i with window keys W(i) (causal: i - window < j <= i; else |i - j| < window) and the other
visible keys O(i) (i a position: causal queries are the last N of the M positions, bottom-right):

    out_i = (sum_W e^(s_ij - m_i) v_j + g_i sum_O phi(q_i).phi(k_j) v_j)
            / (sum_W e^(s_ij - m_i) + g_i sum_O phi(q_i).phi(k_j)),   g_i = e^(log_gamma - m_i),

s_ij = q_i.k_j / sqrt(D), phi Hedgehog's feature map (as in distilled: [softmax(xW + b), softmax(-(xW + b))]
over F learned directions) and gamma a learned scale, so gamma phi(q).phi(k) stands in for e^(s_ij) outside
the window and both parts share one normaliser (Zhang et al., LoLCATs 2024; Arora et al., Based 2024).
m_i = max(max_W s_ij, log_gamma) keeps every exponential <= 1. The window is exact; only the far keys are
approximated, so a narrow window with a cheap map can meet a budget that either part alone misses.

- Cost O(N * (window + C) * (D + F)): query chunks of C rows see the keys of their window span exactly and
  the keys before it through running sums sum_j phi(k_j) v_j^T, sum_j phi(k_j) (non-causal: the sums over
  all keys less the span's). Never an N x M matrix.
- Parameters (W (P, D, F), b (P, 1, F), log_gamma (P,); P = H_kv with per_head, else 1) are created on the
  first call; length-independent, so one fit at a short N serves every N.
- GQA: the G query heads of a K/V head are viewed as (B, H_kv, G, N, D); phi(k) and the sums stay per K/V head.
- kv_mask: padded keys are out of the window's softmax and get phi = 0, v = 0.
- Decoding: a ring buffer of the last `window` keys (variants._ring) and the float32 running sums of the keys that
  left it (state bytes depend on window, F and D, never on N); a step computes phi of the query and the leaving key,
  one pure function run eagerly or compiled into one C++ kernel, or the same step as one hand-written C pass over the
  ring and the sums (config decode_backend; variants._decode_step, variants._native_steps).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from variants._band import band, band_pairs
from variants._checks import check_int, query_offset
from variants._decode import check_context, check_state, check_step, checked_once
from variants._decode_step import DecodeStep
from variants._gqa import group, ungroup
from variants._hedgehog import float_map
from variants._native_steps import window_linear_reason
from variants._native_steps import window_linear_step as native_window_linear_step
from variants._registry import register_variant
from variants._ring import ring_from_context
from variants._window_linear_math import TINY, WindowLinearState, combine, features, keys, window_linear_step, sums
from variants.base import AttentionVariant, Capabilities, QualityKnob, softmax_scale
from variants.distilled import DistilledConfig


@dataclass(frozen=True, kw_only=True)
class WindowLinearConfig(DistilledConfig):
    """distilled's feature-map fields and checks (features, per_head, chunk, init_noise), and the exact band's window."""

    window: int = 64  # exact softmax band, itself included (causal: i-window < j <= i; else |i-j| < window)
    features: int = 32  # F: learned directions of the linear part's feature map (2F features)
    per_head: bool = False  # one map per K/V head (H_kv fixed by the first call) or one shared by all heads
    chunk: int = 64  # C: query rows per block (each block scores its C x (C + span) keys exactly)

    def validate(self) -> None:
        check_int("window", self.window, minimum=1)
        super().validate()


@register_variant("window_linear", config=WindowLinearConfig)
class WindowLinearAttention(AttentionVariant):
    """Exact softmax over a sliding window plus learned linear attention over the keys outside it."""

    capabilities = Capabilities(
        learnable=True,
        gqa=True,
        decode=True,
        causal_offset=True,
        approximates="softmax attention outside a sliding window by linear attention with a learned feature map",
    )
    small_config = {"window": 4, "features": 8, "chunk": 8, "decode_backend": "eager"}  # see distilled's
    flops_tolerance = 0.0  # executed_flops follows forward chunk by chunk
    quality_knob = QualityKnob("window", 16, 8192, at_most_length=True)  # more is more accurate and slower

    @classmethod
    def calibration_length(cls, config: Any, N: int, cap: int) -> int:
        """At least twice the window (within N): the learned map serves only the keys beyond the window, so a fit at a
        length the window covers sees none of them (training error 0, the map untouched)."""
        return min(N, max(cap, 2 * int(dict(config)["window"])))

    def __init__(self, config: WindowLinearConfig | None = None):
        super().__init__(config)
        self.register_parameter("weight", None)  # (P, D, F), created by the first call
        self.register_parameter("bias", None)  # (P, 1, F)
        self.register_parameter("log_gamma", None)  # (P,): gamma phi(q).phi(k) stands in for e^(q.k/sqrt(D))
        self._decode_step = DecodeStep(
            window_linear_step,
            self.config.decode_backend,
            native=native_window_linear_step,
            native_reason=window_linear_reason,
            tokens=3,
        )

    # ---- parameters ---------------------------------------------------------------------
    def materialize(self, H: int, D: int, device: torch.device | str = "cpu") -> None:
        """Create the parameters for H (K/V) heads of dim D (a no-op once created)."""
        if self.weight is not None:
            return
        P, Fd = (H if self.config.per_head else 1), self.config.features
        eye = torch.eye(D, Fd, device=device) * D**-0.25
        self.weight = nn.Parameter(eye.expand(P, D, Fd) + torch.randn(P, D, Fd, device=device) * self.config.init_noise)
        self.bias = nn.Parameter(torch.zeros(P, 1, Fd, device=device))
        # phi(q).phi(k) is about 2/F for unrelated tokens, e^(s) about 1: start gamma at F/2.
        self.log_gamma = nn.Parameter(torch.full((P,), math.log(Fd / 2), device=device))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[no-untyped-def]
        saved = state_dict.get(prefix + "weight")
        if self.weight is None and isinstance(saved, Tensor) and saved.dim() == 3:
            self.materialize(saved.shape[0], saved.shape[1], saved.device)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def extra_reasons(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, kv_mask: Tensor | None, training: bool
    ) -> list[str]:
        if self.weight is None:
            return []
        P, D = self.weight.shape[0], self.weight.shape[1]
        reasons = []
        if q.shape[3] != D:
            reasons.append(f"its feature map was built for head dim D={D}, got D={q.shape[3]}; build a new one")
        if self.config.per_head and k.shape[1] != P:
            reasons.append(f"its per-head feature maps were built for H_kv={P} K/V heads, got H_kv={k.shape[1]}")
        return reasons

    def extra_decode_reasons(self, q: Tensor, k: Tensor, v: Tensor, *, kv_mask: Tensor | None) -> list[str]:
        return self.extra_reasons(q, k, v, causal=True, kv_mask=kv_mask, training=False)

    def flops(self, B: int, H: int, N: int, M: int, D: int, causal: bool, H_kv: int | None = None) -> int:
        """4*D per (query, key) pair of the window, the feature maps (2*D*F per token: queries per query head, keys
        per K/V head), the key sums (2*2F*D per key and K/V head) and each query's read of them (2*2F*D)."""
        H_kv = H if H_kv is None else H_kv
        F = self.config.features
        window = 4 * B * H * D * band_pairs(N, M, self.config.window, causal)
        keys = B * H_kv * M * (2 * D * F + 2 * 2 * F * D)
        queries = B * H * N * (2 * D * F + 2 * 2 * F * D)
        return window + keys + queries

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
        """What forward's matmuls compute, chunk by chunk as forward walks: each chunk of C query rows scores its span of
        L keys exactly and through the feature map (q k^T, phi(q) phi(k)^T, both times v: 4 products of C x L) and reads
        the far sums once; plus phi of every query and key, and the key sums (over every key, and the span's or the
        causal prefix's)."""
        H_kv = H if H_kv is None else H_kv
        F, W, C = self.config.features, self.config.window, self.config.chunk
        total = 2 * B * (H_kv * M + H * N) * D * F  # phi(k), phi(q)
        total += 2 * B * H_kv * 2 * F * M * D  # the sums over every key
        done, offset = 0, query_offset(N, M, causal)
        for s in range(0, N, C):
            e = min(s + C, N)
            b = min(M, e + offset if causal else e + W - 1)
            a = min(max(0, s + offset - W + 1), b)
            c, L = e - s, b - a
            total += 2 * B * H_kv * 2 * F * ((a - done) if causal else L) * D  # the prefix grows, or the span's sums
            done = a if causal else done
            total += 2 * B * H * c * (3 * L * D + 2 * F * L + 2 * F * D + 2 * F)
        return total

    # ---- forward ------------------------------------------------------------------------
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, kv_mask: Tensor | None = None
    ) -> Tensor:
        self.materialize(k.shape[1], q.shape[3], q.device)
        N, M, W, C = q.shape[2], k.shape[2], self.config.window, self.config.chunk
        q5, (k5, v5, real) = group(q.float(), k.shape[1]), keys(k, v, kv_mask)  # (B, H_kv, G|1, N|M, D)
        fk = self._phi(k5, real)  # (B, H_kv, 1, M, 2F)
        total = sums(fk, v5)  # ((B, H_kv, 1, 2F, D), (B, H_kv, 1, 2F, 1)) over every key
        prefix, done = sums(fk[..., :0, :], v5[..., :0, :]), 0  # causal: the sums over keys [0, done)
        offset = query_offset(N, M, causal)  # causal: query row i sits at position i + offset
        out = v5.new_empty(q5.shape)
        for s in range(0, N, C):
            e = min(s + C, N)
            b = min(M, e + offset if causal else e + W - 1)
            a = min(max(0, s + offset - W + 1), b)  # keys [a, b) may be in a window of the chunk; the others are far
            if causal:
                left = sums(fk[..., done:a, :], v5[..., done:a, :])  # keys [done, a): newly out of the window
                prefix, done = (prefix[0] + left[0], prefix[1] + left[1]), a
                far = prefix
            else:
                span = sums(fk[..., a:b, :], v5[..., a:b, :])
                far = (total[0] - span[0], (total[1] - span[1]).clamp_min(0))
            i, j = torch.arange(s, e, device=q.device)[:, None] + offset, torch.arange(a, b, device=q.device)[None, :]
            out[..., s:e, :] = self._chunk(q5[..., s:e, :], k5[..., a:b, :], v5[..., a:b, :], fk[..., a:b, :], i, j,
                                           real[..., a:b], far, causal)  # fmt: skip
        return ungroup(out).to(q.dtype)  # (B, H, N, D)

    def _chunk(self, q, k, v, fk, i, j, real, far, causal):  # type: ignore[no-untyped-def]
        """One chunk's output (_window_linear_math.combine): its span's keys in the window exact, the others linear.

        q (B, H_kv, G, C, D); k, v, fk over the span (B, H_kv, 1, L, ·); i (C, 1), j (1, L) positions; real
        (B, 1, 1, 1, L); far: sums over the keys before the span (causal) or outside it."""
        fq = self._phi(q)  # (B, H_kv, G, C, 2F)
        in_window = band(i, j, window=self.config.window, causal=causal) & real  # (B, 1, 1, C, L)
        outside = ((j <= i) if causal else torch.ones_like(i == j)) & ~in_window & real
        linear = (fq @ fk.transpose(-1, -2)) * outside  # (B, H_kv, G, C, L)
        return combine(q, fq, k, v, in_window, self.log_gamma.float().view(1, -1, 1, 1, 1), far, linear)

    # ---- the calibration hook -----------------------------------------------------------
    def attention_weights(
        self, q: Tensor, k: Tensor, *, causal: bool = False, kv_mask: Tensor | None = None, rows: Tensor | None = None
    ) -> Tensor:
        """The hybrid's attention matrix for query rows `rows` (default all), (B, H, R, M) float32.

        Materialises R x M: for the calibration loss on sampled rows, never in forward.
        """
        self.materialize(k.shape[1], q.shape[3], q.device)
        N, M = q.shape[2], k.shape[2]
        rows = torch.arange(N, device=q.device) if rows is None else rows.to(q.device)
        q5, (k5, _, real) = group(q[:, :, rows].float(), k.shape[1]), keys(k, k, kv_mask)
        fq, fk = self._phi(q5), self._phi(k5, real)
        i, j = rows[:, None] + query_offset(N, M, causal), torch.arange(M, device=q.device)[None, :]  # positions
        in_window = band(i, j, window=self.config.window, causal=causal) & real
        outside = ((j <= i) if causal else torch.ones_like(i == j)) & ~in_window & real
        scores = (q5 @ k5.transpose(-1, -2) * softmax_scale(q.shape[-1])).masked_fill(~in_window, -math.inf)
        log_gamma = self.log_gamma.float().view(1, -1, 1, 1, 1)
        m = torch.maximum(scores.amax(-1, keepdim=True), log_gamma)
        weights = torch.exp(scores - m) + torch.exp(log_gamma - m) * (fq @ fk.transpose(-1, -2)) * outside
        return ungroup(weights / weights.sum(-1, keepdim=True).clamp_min(TINY))

    # ---- decoding: a ring buffer for the window, running sums for the keys that left it -------
    def decode_step_flops(self, B: int, H: int, context: int, D: int, *, H_kv: int | None = None) -> int:
        """One step (_window_linear_math.window_linear_step), whatever the context: per K/V head phi of the key leaving
        the ring (2*D*F, computed for an empty slot too) and its phi(k) v^T into the sums (2*2F*D); per query head
        phi(q) (2*D*F), its read of the sums (2*2F*D and 2*2F) and q k^T and the weights @ v over every ring slot
        (4*window*D: empty slots are masked, not skipped). The entering key's phi waits until it leaves the ring."""
        H_kv, F, W = H if H_kv is None else H_kv, self.config.features, self.config.window
        return B * H_kv * (2 * D * F + 2 * 2 * F * D) + B * H * (2 * D * F + 2 * 2 * F * D + 2 * 2 * F + 4 * W * D)

    def init_state(self, k: Tensor, v: Tensor, *, kv_mask: Tensor | None = None) -> WindowLinearState:
        """The last `window` tokens of the context k, v (B, H_kv, N, D) and the sums over the real ones before them;
        compiles the step (decode_backend) for queries with H_kv heads (GQA's queries compile at their first step)."""
        check_context(k, v, kv_mask)
        self.check_decode(k, k, v, kv_mask=kv_mask)
        self.materialize(k.shape[1], k.shape[3], k.device)
        far = max(0, k.shape[2] - self.config.window)
        k5, v5, real = keys(k[:, :, :far], v[:, :, :far], None if kv_mask is None else kv_mask[:, :far])
        state = WindowLinearState(
            ring_from_context(k, v, kv_mask, self.config.window, 0), *sums(self._phi(k5, real), v5)
        )
        token = k.new_zeros(k.shape[0], k.shape[1], 1, k.shape[3])  # (B, H_kv, 1, D)
        self._decode_step.prepare(token, token, token, *self._step_args(state, 0))
        return state

    def step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: WindowLinearState) -> tuple[Tensor, WindowLinearState]:
        """Move the leaving key into the sums, write the token into the ring, attend (_window_linear_math.window_linear_step)."""
        check_state(state, WindowLinearState, self.name)
        ring = state.ring

        def check() -> None:
            B, Hkv, _, D = ring.k.shape
            check_step(q_t, k_t, v_t, batch=B, kv_heads=Hkv, head_dim=D)
            self.check_decode(q_t, k_t, v_t)

        checked_once(state, q_t, k_t, v_t, check)  # once per sequence, not per token
        p = ring.length
        slot = p % ring.window
        out = self._decode_step(q_t, k_t, v_t, *self._step_args(state, slot))
        if ring.pos.is_cpu:  # through numpy: a third of torch's indexing, which is a fair part of a native step
            ring.pos.numpy()[slot] = p
        else:
            ring.pos[slot] = p
        ring.length = p + 1
        return out, state

    def _step_args(self, state: WindowLinearState, slot: int) -> tuple[Tensor, ...]:
        """window_linear_step's arguments after the token's: the ring, the slot the token takes, the sums, the parameters."""
        ring = state.ring
        weight, bias = float_map(self)
        at = _slots(ring.window, ring.k.device)[slot]  # (1,) int64, a view made once: no tensor made per step
        log_gamma = self._parameters["log_gamma"]  # not Module.__getattr__: this runs every token
        return ring.k, ring.v, ring.real, at, state.kv, state.z, weight, bias, log_gamma

    def _phi(self, x: Tensor, real: Tensor | None = None) -> Tensor:
        """Hedgehog's feature map (_window_linear_math.features) with this module's parameters; 0 at padded keys."""
        return features(x, *float_map(self), real)


@functools.lru_cache(maxsize=16)
def _slots(window: int, device: torch.device) -> tuple[Tensor, ...]:
    """The ring's slot indices 0 .. window - 1, each a (1,) int64 view of one tensor, made once per window and device."""
    return torch.arange(window, device=device).split(1)
