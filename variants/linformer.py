"""Linformer (Wang et al. 2020): keys and values projected along the sequence from M down to k rows.

out = softmax(q (E k)^T / sqrt(D)) (F v), with learned E, F of shape (k, max_seq_len): O(N*k*D)
time and memory instead of O(N*M*D).

- M < max_seq_len keys use the first M columns of E and F (the projections are per position,
  so a Linformer is fitted for the lengths it is calibrated on; columns beyond the calibration
  length keep their initial values). M > max_seq_len is refused with a reason.
- causal=True is refused: every projected row mixes all M keys, future ones included.
- GQA (k, v with H_kv < H heads): E and F project the H_kv K/V heads (share="none": one per K/V
  head, heads = H_kv), and the G query heads of a group attend to their head's k projected rows
  through SDPA's enable_gqa; nothing is repeated.
- Decoding is refused: not causal, and the projections need the whole sequence.
- kv_mask: padded keys and values are zeroed before the projection, so they contribute nothing.
  Caveat: the k projected rows all stay in the softmax, so padding changes how much weight the
  real keys get (a zero projected key still scores 0, not -inf); outputs match an unpadded
  Linformer over the real keys only when E and F happen to be zero at the padded positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable

import torch
from torch import Tensor, nn

from variants._checks import check_choice, check_int
from variants._gqa import group, sdpa, ungroup
from variants._registry import register_variant
from variants.base import AttentionVariant, Capabilities, QualityKnob, VariantConfig, softmax_scale

SHARE_MODES = ("none", "kv", "headwise")
INIT_MODES = ("scaled_random", "paper")


@dataclass(frozen=True, kw_only=True)
class LinformerConfig(VariantConfig):
    k: int = 64  # projected length: keys and values are projected from M down to k rows
    max_seq_len: int = 4096  # columns of E and F: the longest key length this Linformer serves
    share: str = "headwise"  # none (E_h, F_h per head) | headwise (one E, one F for all heads) | kv (E = F, all heads)
    heads: int = 1  # K/V heads H_kv the projections are built for (H_kv = H without GQA); used only by share="none"
    init: str = "scaled_random"  # scaled_random: E ~ N(0, 1/L), F ~ N(0, 1/L^2) (L = max_seq_len) | paper: xavier_uniform, gain 1/sqrt(2) (fairseq's Linformer)

    def validate(self) -> None:
        check_int("k", self.k, minimum=1)
        check_int("max_seq_len", self.max_seq_len, minimum=1)
        if self.k > self.max_seq_len:
            raise ValueError(
                f"k must be <= max_seq_len (a projection from max_seq_len={self.max_seq_len} down to k rows), "
                f"got k={self.k}; lower k or raise max_seq_len"
            )
        check_choice("share", self.share, SHARE_MODES)
        check_int("heads", self.heads, minimum=1)
        check_choice("init", self.init, INIT_MODES)


@register_variant("linformer", config=LinformerConfig)
class LinformerAttention(AttentionVariant):
    """Linformer: learned low-rank projections E, F of keys and values along the sequence, O(N*k*D)."""

    capabilities = Capabilities(
        causal=False,
        learnable=True,
        gqa=True,
        approximates="softmax attention over k learned projections of the M keys and values (Linformer)",
    )

    @classmethod
    def calibration_length(cls, config: Any, N: int, cap: int) -> int:
        return N  # E and F have a column per position: a fit at 256 leaves later columns untrained

    small_config = {"k": 8, "max_seq_len": 128}
    flops_tolerance = 0.0  # projections and SDPA over k rows, counted exactly
    # more is more accurate and slower; 256: the largest k of the paper's GLUE results
    quality_knob = QualityKnob("k", 16, 256, at_most_length=True)
    length_fields = ("max_seq_len",)  # E, F sized for the N measured unless a user sets it
    signed_weights = True  # its weights over the original keys are softmax weights times F, whose entries are signed

    @classmethod
    def config_for_length(cls, config: dict[str, Any], M: int, *, fixed: Iterable[str] = ()) -> dict[str, Any]:
        """max_seq_len = M (at least k, which it must cover) unless a user set it."""
        out = super().config_for_length(config, M, fixed=fixed)
        if "max_seq_len" not in set(fixed):
            out["max_seq_len"] = max(M, int(out.get("k", 1)))
        return out

    def __init__(self, config: LinformerConfig | None = None):
        super().__init__(config)
        cfg = self.config
        P = cfg.heads if cfg.share == "none" else 1
        L = cfg.max_seq_len
        # Parameters are stored at unit scale and multiplied by a fixed scale in forward, so one
        # Adam learning rate suits every max_seq_len (and every learnable variant in a sweep).
        self.e_scale = L**-0.5  # E k: a projected key row of L unit-variance keys has unit variance
        self.f_scale = self.e_scale if cfg.share == "kv" else 1.0 / L  # F v: the magnitude of a mean of values
        self.E = nn.Parameter(_init_projection(P, cfg.k, L, cfg.init) / self.e_scale)  # (P, k, L)
        if cfg.share == "kv":
            self.register_parameter("F", None)  # F is E (key-value sharing)
        else:
            self.F = nn.Parameter(_init_projection(P, cfg.k, L, cfg.init, std=self.f_scale) / self.f_scale)

    def extra_reasons(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, kv_mask: Tensor | None, training: bool
    ) -> list[str]:
        cfg = self.config
        reasons = []
        if causal:
            reasons.append(
                "causal=True is unsupported: every projected key/value row mixes all M keys, future "
                "ones included, so no query can be kept from seeing the future"
            )
        M = k.shape[2]
        if M > cfg.max_seq_len:
            reasons.append(
                f"key length M={M} exceeds max_seq_len={cfg.max_seq_len}: E and F have max_seq_len "
                f"columns, one per position; build with max_seq_len >= {M}"
            )
        if cfg.share == "none" and k.shape[1] != cfg.heads:
            reasons.append(
                f"share='none' builds one E, F per K/V head for heads={cfg.heads}, got H={q.shape[1]} query heads "
                f"and H_kv={k.shape[1]} K/V heads; build with heads={k.shape[1]} or share='headwise'"
            )
        return reasons

    def extra_decode_reasons(self, q: Tensor, k: Tensor, v: Tensor, *, kv_mask: Tensor | None) -> list[str]:
        return [
            "linformer cannot decode: it is not causal, and every projected row E k, F v mixes the whole "
            "sequence, so a new token changes all of them"
        ]

    def flops(self, B: int, H: int, N: int, M: int, D: int, causal: bool, *, H_kv: int | None = None) -> int:
        """Projections E k and F v (2*k*M*D each, per K/V head) plus attention over k rows (2*N*k*D twice, per query
        head). The same count is what runs."""
        K, Hkv = self.config.k, H if H_kv is None else H_kv
        return 4 * B * Hkv * K * M * D + 4 * B * H * N * K * D

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, kv_mask: Tensor | None = None
    ) -> Tensor:
        if kv_mask is not None:
            real = kv_mask[:, None, :, None]  # (B, 1, M, 1)
            # where, not multiply: a padded inf/nan must not leak through 0 * inf.
            k = torch.where(real, k, torch.zeros((), dtype=k.dtype, device=k.device))
            v = torch.where(real, v, torch.zeros((), dtype=v.dtype, device=v.device))
        M = k.shape[2]
        E = self.E[..., :M].to(k.dtype)  # (P, k, M): the first M positions, at unit scale
        Fm = E if self.F is None else self.F[..., :M].to(v.dtype)
        # Scale the small (B, H, k, D) results rather than copy the (P, k, M) projections.
        k_proj = _project(E, k) * self.e_scale  # (B, H_kv, k, D)
        v_proj = _project(Fm, v) * self.f_scale  # (B, H_kv, k, D)
        return sdpa(q, k_proj, v_proj)  # (B, H, N, D), scale 1/sqrt(D)

    def attention_weights(
        self, q: Tensor, k: Tensor, *, causal: bool = False, kv_mask: Tensor | None = None, rows: Tensor | None = None
    ) -> Tensor:
        """The effective weights over the M original keys for query rows `rows` (default all), (B, H, R, M) float32:
        softmax(q (E k)^T / sqrt(D)) times F (scaled, zero at padded keys), since forward is that softmax times F v.
        Signed (F is), so they rank keys but are no distribution."""
        B, Hkv, M = k.shape[0], k.shape[1], k.shape[2]
        rows = torch.arange(q.shape[2], device=q.device) if rows is None else rows.to(q.device)
        real = torch.ones(B, M, dtype=torch.bool, device=k.device) if kv_mask is None else kv_mask
        k = torch.where(real[:, None, :, None], k.float(), 0.0)
        E = self.E[..., :M].float()  # (P, K, M)
        Fm = (E if self.F is None else self.F[..., :M].float()) * self.f_scale
        k_proj = _project(E, k) * self.e_scale  # (B, H_kv, K, D)
        scores = group(q[:, :, rows].float(), Hkv) @ k_proj[:, :, None].transpose(-1, -2)  # (B, H_kv, G, R, K)
        probs = torch.softmax(scores * softmax_scale(q.shape[-1]), dim=-1)
        weights = probs @ Fm.view(1, Fm.shape[0], 1, *Fm.shape[1:])  # (B, H_kv, G, R, M)
        return ungroup(weights * real[:, None, None, None, :])


def _project(P: Tensor, x: Tensor) -> Tensor:
    """Apply (1 or H_kv, k, M) projections along the sequence of x (B, H_kv, M, D): (B, H_kv, k, D).

    An explicit bmm over a broadcast (stride-0) projection: torch.matmul's broadcasting path
    transposes x into a copy when the projection requires grad, a large cost at long M.
    """
    B, H, M, D = x.shape
    K = P.shape[1]
    Pb = P.expand(B * H, K, M) if P.shape[0] == 1 else P.expand(B, H, K, M).reshape(B * H, K, M)
    return torch.bmm(Pb, x.reshape(B * H, M, D)).view(B, H, K, D)


def _init_projection(P: int, K: int, L: int, init: str, std: float | None = None) -> Tensor:
    """A (P, K, L) projection: the paper's (fairseq's xavier_uniform, gain 1/sqrt(2)) or N(0, std^2).

    std defaults to 1/sqrt(L): a projected row of L unit-variance keys keeps unit variance, so the
    scores stay O(1) at every length. For F the caller passes 1/L, so a projected value has the
    magnitude of a mean of L values and an uncalibrated Linformer returns a small, bounded output
    instead of one that grows with the length.
    """
    weight = torch.empty(P, K, L)
    if init == "paper":
        for p in range(P):
            nn.init.xavier_uniform_(weight[p], gain=1 / math.sqrt(2))
    else:
        nn.init.normal_(weight, std=L**-0.5 if std is None else std)
    return weight
