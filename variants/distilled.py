"""A linear-attention student trained to mimic softmax attention (Hedgehog, ICLR 2024; LoLCATs, 2024).

out_i = sum_j phi(q_i).phi(k_j) v_j / sum_j phi(q_i).phi(k_j), with a trainable feature map phi(x) = [softmax(x W + b),
softmax(-(x W + b))] over F learned directions (Hedgehog's map, 2F features), W initialised to a scaled identity
D^-1/4 * I (D x F) so phi(q).phi(k) starts as a smooth function of q.k. No N x M matrix: O(N*F*D) time and memory.

- Length-independent: phi acts on one token, so a student fitted at N=1024 serves every N.
- Parameters are created on the first call (their shape needs D, and H_kv when per_head=True); later calls with another
  D or H_kv are refused with a reason.
- GQA (k, v with H_kv < H heads): phi is applied on the K/V heads, one map per K/V head when per_head=True; a group's G
  query heads use their K/V head's map; the (2F, D) sums are per K/V head, never repeated (q as (B, H_kv, G, N, D)).
- Decoding: the state is the running sums kv = sum_j phi(k_j) v_j^T (B, H_kv, 2F, D) and z = sum_j phi(k_j)
  (B, H_kv, 2F, 1) in float32, O(F*D) whatever N; a step adds one key and reads the sums, matching the causal forward's
  row for that token up to float32 rounding; one pure function, run eagerly or compiled (variants._distilled_math,
  variants._decode_step), or the same step as one hand-written C pass over the sums (variants._native_steps).
- Numerically stable in float16/bfloat16: phi is computed in float32 and is a softmax, so every feature lies in [0, 1]
  (no exp overflow, whatever the scale of q and k); the sums over keys (and the causal prefix sums) accumulate in
  float32; the normaliser is >= 0 and clamped away from 0, and only the final output is cast back to q's dtype.
- causal: chunked prefix sums. Keys before a chunk enter through a running (2F, D) state; keys inside the chunk through
  a (C x C) lower-triangular block. With N < M queries (the last N positions, bottom-right) the first M - N keys enter
  the state before the first chunk. Extra memory beyond the output: O(C*(F + C)) per chunk without autograd; with
  autograd the saved per-chunk states, O(N*F*D / C).
- kv_mask: padded keys get phi(k) = 0 and v = 0, so they contribute to neither sum.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from variants._checks import check_choice, check_int, query_offset
from variants._decode import check_context, check_state, check_step, checked_once
from variants._decode_step import DECODE_BACKENDS, DecodeStep
from variants._distilled_math import EPS, DistilledState, step_sums
from variants._gqa import group, ungroup
from variants._hedgehog import float_map, hedgehog_features
from variants._native_steps import distilled_reason, distilled_step
from variants._registry import register_variant
from variants.base import AttentionVariant, Capabilities, QualityKnob, VariantConfig

_BLOCK = 1024  # tokens per pass of the non-causal sums (bounds the float32 feature buffers)


@dataclass(frozen=True, kw_only=True)
class DistilledConfig(VariantConfig):
    features: int = 128  # F: learned directions; phi has 2F entries ([softmax(xW), softmax(-xW)]); 64 fits too coarsely (see the issue-4 note)
    per_head: bool = True  # one feature map per K/V head (H_kv fixed by the first call) or one shared by all heads
    chunk: int = 64  # C: causal prefix sums run over chunks of C queries (C x C block inside each)
    init_noise: float = 0.01  # std of the noise added to the scaled-identity W, to break ties
    # native (hand-written kernel: CPU, float32), eager, compiled (AOTInductor) or auto: native where the kernel takes
    # the call, else compiled on CPU, else eager (variants._decode_step); "added": out of cell ids at its default
    decode_backend: str = field(default="auto", metadata={"added": True})

    def validate(self) -> None:
        check_int("features", self.features, minimum=1)
        if not isinstance(self.per_head, bool):
            raise TypeError(f"per_head must be a bool, got {self.per_head!r}")
        check_int("chunk", self.chunk, minimum=1)
        if isinstance(self.init_noise, bool) or not isinstance(self.init_noise, (int, float)) or self.init_noise < 0:
            raise ValueError(f"init_noise must be a number >= 0, got {self.init_noise!r}")
        check_choice("decode_backend", self.decode_backend, DECODE_BACKENDS)


@register_variant("distilled", config=DistilledConfig)
class DistilledAttention(AttentionVariant):
    """Linear attention with a learned feature map distilled from softmax attention, O(N*F*D)."""

    capabilities = Capabilities(
        learnable=True,
        gqa=True,
        decode=True,
        causal_offset=True,
        approximates="softmax attention by linear attention phi(q).phi(k) with a learned softmax feature map (Hedgehog)",
    )
    small_config = {"features": 16, "chunk": 8, "decode_backend": "eager"}  # compiling: test_decode_step.py
    flops_tolerance = 0.0  # every matmul of the forward is in executed_flops
    quality_knob = QualityKnob("features", 16, 512)  # more is more accurate and slower

    def __init__(self, config: DistilledConfig | None = None):
        super().__init__(config)
        self.register_parameter("weight", None)  # (H_kv or 1, D, F), created by the first call
        self.register_parameter("bias", None)  # (H_kv or 1, 1, F)
        self._decode_step = DecodeStep(
            step_sums, self.config.decode_backend, native=distilled_step, native_reason=distilled_reason, tokens=3
        )

    # ---- parameters ---------------------------------------------------------------------
    def materialize(self, H: int, D: int, device: torch.device | str = "cpu") -> None:
        """Create the feature-map parameters for H (K/V) heads of dim D (a no-op once created)."""
        if self.weight is not None:
            return
        P, Fd = (H if self.config.per_head else 1), self.config.features
        eye = torch.eye(D, Fd, device=device) * D**-0.25  # q.k / sqrt(D) splits as D^-1/4 on each side
        noise = torch.randn(P, D, Fd, device=device) * self.config.init_noise
        self.weight = nn.Parameter(eye.expand(P, D, Fd) + noise)
        self.bias = nn.Parameter(torch.zeros(P, 1, Fd, device=device))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[no-untyped-def]
        # A fresh student has no parameters yet: create them with the saved shapes, then load.
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
            reasons.append(f"its feature map was built for head dim D={D}, got D={q.shape[3]}; build a new student")
        if self.config.per_head and k.shape[1] != P:
            reasons.append(
                f"its per-head feature maps were built for H_kv={P} K/V heads, got H_kv={k.shape[1]} "
                f"(q has H={q.shape[1]})"
            )
        return reasons

    def flops(self, B: int, H: int, N: int, M: int, D: int, causal: bool, *, H_kv: int | None = None) -> int:
        """Per K/V head: phi(k) (2*M*D*F) and sum_j phi(k_j) v_j^T (2*M*2F*D); per query head: phi(q) (2*N*D*F),
        phi(q) against the sums (2*N*2F*D) and the normaliser (2*N*2F). The algorithm's count, the same with and
        without causal=True (a prefix sum adds no multiplications); executed_flops adds the causal chunks' blocks."""
        F, F2, Hkv = self.config.features, 2 * self.config.features, H if H_kv is None else H_kv
        return B * (Hkv * (2 * M * D * F + 2 * M * F2 * D) + H * (2 * N * D * F + 2 * N * F2 * D + 2 * N * F2))

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
        """flops, plus for causal=True each chunk's C x C block within it: phi(q) phi(k)^T (2*C*C*2F), block @ v
        (2*C*C*D), per query head."""
        useful = self.flops(B, H, N, M, D, causal, H_kv=H_kv)
        if not causal:
            return useful
        C = self.config.chunk
        blocks = sum(min(C, N - s) ** 2 for s in range(0, N, C))
        return useful + B * H * blocks * 2 * (2 * self.config.features + D)

    def decode_step_flops(self, B: int, H: int, context: int, D: int, *, H_kv: int | None = None) -> int:
        """A step (step_sums) is flops with one query and one key, whatever the context: phi(k_t) into the sums."""
        return self.flops(B, H, 1, 1, D, False, H_kv=H_kv)

    # ---- the calibration hook -----------------------------------------------------------
    def attention_weights(
        self, q: Tensor, k: Tensor, *, causal: bool = False, kv_mask: Tensor | None = None, rows: Tensor | None = None
    ) -> Tensor:
        """The student's attention matrix phi(q)phi(k)^T / normaliser for query rows `rows` (default all),
        (B, H, R, M) float32.

        Materialises R x M: for the calibration loss (on sampled rows), never in forward.
        """
        self.materialize(k.shape[1], q.shape[3], q.device)
        rows = torch.arange(q.shape[2], device=q.device) if rows is None else rows.to(q.device)
        # (B, H_kv, G, R, 2F), (B, H_kv, 1, M, 2F)
        fq, fk = self._phi(group(q[:, :, rows], k.shape[1])), self._phi(k[:, :, None], kv_mask)
        scores = ungroup(fq @ fk.transpose(-1, -2))  # (B, H, R, M), >= 0
        if causal:  # the queries are the last N positions
            positions = rows + query_offset(q.shape[2], k.shape[2], causal)
            scores = scores * (torch.arange(k.shape[2], device=q.device)[None, :] <= positions[:, None])
        return scores / scores.sum(-1, keepdim=True).clamp_min(EPS)

    # ---- forward ------------------------------------------------------------------------
    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, kv_mask: Tensor | None = None
    ) -> Tensor:
        self.materialize(k.shape[1], q.shape[3], q.device)
        v32 = v.float()
        if kv_mask is not None:
            v32 = torch.where(kv_mask[:, None, :, None], v32, torch.zeros((), device=v.device))
        # 5-D from here on: (B, H_kv, G, L, ·) for queries, (B, H_kv, 1, L, ·) for keys and values.
        q5, k5, v5 = group(q, k.shape[1]), k[:, :, None], v32[:, :, None]
        out = self._causal(q5, k5, v5, kv_mask) if causal else self._full(q5, k5, v5, kv_mask)
        return ungroup(out).to(q.dtype)  # (B, H, N, D)

    # ---- decoding: the running sums --------------------------------------------------------
    def extra_decode_reasons(self, q: Tensor, k: Tensor, v: Tensor, *, kv_mask: Tensor | None) -> list[str]:
        """A built student decodes only with the head dim and K/V heads its feature maps were made for."""
        return self.extra_reasons(q, k, v, causal=True, kv_mask=kv_mask, training=False)

    def init_state(self, k: Tensor, v: Tensor, *, kv_mask: Tensor | None = None) -> DistilledState:
        """The sums phi(k_j) v_j^T and phi(k_j) over the real context keys k, v (B, H_kv, N, D); compiles the step."""
        check_context(k, v, kv_mask)
        self.check_decode(k, k, v, kv_mask=kv_mask)
        self.materialize(k.shape[1], k.shape[3], k.device)
        v32 = v.float() if kv_mask is None else torch.where(kv_mask[:, None, :, None], v.float(), 0.0)
        state = DistilledState(**self._sums_over(k[:, :, None], v32[:, :, None], kv_mask))
        token = k.new_zeros(k.shape[0], k.shape[1], 1, k.shape[3])  # (B, H_kv, 1, D); GQA's queries compile at step 1
        self._decode_step.prepare(token, token, token, state.kv, state.z, *float_map(self))
        return state

    def step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: DistilledState) -> tuple[Tensor, DistilledState]:
        """Add phi(k_t) v_t^T and phi(k_t) to the sums, then out_t = phi(q_t) kv / phi(q_t).z (step_sums)."""
        check_state(state, DistilledState, self.name)

        def check() -> None:
            B, Hkv, _, _, D = state.kv.shape
            check_step(q_t, k_t, v_t, batch=B, kv_heads=Hkv, head_dim=D)
            self.check_decode(q_t, k_t, v_t)

        checked_once(state, q_t, k_t, v_t, check)  # once per sequence, not per token
        return self._decode_step(q_t, k_t, v_t, state.kv, state.z, *float_map(self)), state

    def _sums_over(self, k5: Tensor, v5: Tensor, kv_mask: Tensor | None) -> dict[str, Tensor]:
        """{"kv": sum_j phi(k_j) v_j^T, "z": sum_j phi(k_j)}, (B, H_kv, 1, 2F, D or 1), over k5, v5 (B, H_kv, 1, L, D)."""
        B, Hkv, _, _, D = v5.shape
        F2 = 2 * self.config.features
        sums = {"kv": v5.new_zeros(B, Hkv, 1, F2, D), "z": v5.new_zeros(B, Hkv, 1, F2, 1)}
        self._add_keys(sums, k5, v5, kv_mask)
        return sums

    def _add_keys(self, sums: dict[str, Tensor], k5: Tensor, v5: Tensor, kv_mask: Tensor | None) -> None:
        """sums["kv"] += phi(k)^T v and sums["z"] += sum phi(k) for k5, v5 (B, H_kv, 1, L, D), in _BLOCK slices."""
        for part in _spans(k5.shape[3]):
            fk = self._phi(k5[:, :, :, part], None if kv_mask is None else kv_mask[:, part])  # (B, H_kv, 1, L, 2F)
            sums["kv"] = sums["kv"] + fk.transpose(-1, -2) @ v5[:, :, :, part]
            sums["z"] = sums["z"] + fk.sum(-2).unsqueeze(-1)

    def _full(self, q: Tensor, k: Tensor, v: Tensor, kv_mask: Tensor | None) -> Tensor:
        """Non-causal: kv = sum_j phi(k_j) v_j^T and z = sum_j phi(k_j), then phi(q_i) kv / phi(q_i).z.

        Both passes go over _BLOCK tokens at a time (_spans), so the float32 features never exist for the whole
        sequence at once (a working set that stays in cache, and O(_BLOCK*F) extra memory)."""
        B, Hkv, _, _, D = v.shape
        sums = self._sums_over(k, v, kv_mask)  # per K/V head
        out = v.new_empty(B, Hkv, q.shape[2], q.shape[3], D)  # slices written in place: no final concatenation
        for part in _spans(q.shape[3]):
            fq = self._phi(q[:, :, :, part])  # (B, H_kv, G, L, 2F)
            out[:, :, :, part] = (fq @ sums["kv"]) / (fq @ sums["z"]).clamp_min(EPS)  # (B, H_kv, G, L, D)
        return out

    def _causal(self, q: Tensor, k: Tensor, v: Tensor, kv_mask: Tensor | None) -> Tensor:
        """Causal, chunk by chunk: a running (2F, D) state for earlier chunks, a C x C block within.

        A loop over chunks rather than a cumsum over all of them: the cumsum's (N/C, 2F, D)
        tensor runs out of cache at long N, which made the time grow faster than N. With N < M queries (the last N
        positions) the M - N keys before them start the state.
        """
        B, Hkv, _, M, D = v.shape
        N, C = q.shape[3], self.config.chunk
        offset = M - N  # the position of query row 0
        before = None if kv_mask is None else kv_mask[:, :offset]
        sums = self._sums_over(k[:, :, :, :offset], v[:, :, :, :offset], before)
        state, z = sums["kv"], sums["z"]  # sums of phi(k_j) v_j^T and phi(k_j) over the keys before the chunk
        out = v.new_empty(B, Hkv, q.shape[2], N, D)
        for s in range(0, N, C):
            t = s + offset  # the chunk's first position
            mask = None if kv_mask is None else kv_mask[:, t : t + C]
            fq = self._phi(q[:, :, :, s : s + C])  # (B, H_kv, G, C, 2F)
            fk = self._phi(k[:, :, :, t : t + C], mask)  # (B, H_kv, 1, C, 2F)
            vc = v[:, :, :, t : t + C]  # (B, H_kv, 1, C, D)
            block = (fq @ fk.transpose(-1, -2)).tril()  # (B, H_kv, G, C, C): keys j <= i inside the chunk
            num = fq @ state + block @ vc  # (B, H_kv, G, C, D)
            den = fq @ z + block.sum(-1, keepdim=True)  # (B, H_kv, G, C, 1)
            out[:, :, :, s : s + C] = num / den.clamp_min(EPS)
            state = state + fk.transpose(-1, -2) @ vc
            z = z + fk.sum(-2).unsqueeze(-1)
        return out

    def _phi(self, x: Tensor, kv_mask: Tensor | None = None) -> Tensor:
        """Hedgehog's feature map (variants._hedgehog) on x (B, H_kv, G or 1, L, D) -> (B, H_kv, G or 1, L, 2F); K/V
        head h's map (weight (P, D, F), P = H_kv or 1) serves its group."""
        phi = hedgehog_features(x, *float_map(self))
        if kv_mask is not None:
            # padded keys: phi = 0, by where, not multiply: an inf/nan padded key must not leak through 0 * nan
            phi = torch.where(kv_mask[:, None, None, :, None], phi, torch.zeros((), device=phi.device))
        return phi


def _spans(length: int) -> list[slice]:
    """A non-causal pass's _BLOCK-token slices; one of all tokens under torch.export (a loop would fix N)."""
    if torch.compiler.is_exporting():
        return [slice(None)]
    return [slice(s, s + _BLOCK) for s in range(0, length, _BLOCK)]
