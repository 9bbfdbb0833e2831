"""Chunked exact attention: query chunks x key chunks merged by an online softmax, never N x M scores.

The forward keeps, per query row, a running max and sum of exponentials (Rabe & Staats 2021;
FlashAttention), so each step holds one (query_chunk x key_chunk) tile. The backward is a custom
autograd Function that recomputes each tile from q, k, v and the saved log-sum-exp, so training
stores O(N * D), not the N x M probabilities. Causal calls skip key chunks wholly above the diagonal; with fewer
queries than keys (N < M) the queries are the last N positions (bottom-right), the diagonal shifted by M - N.
Config `window` > 0 restricts each query to sliding_window's band (variants._band; a model's own sliding window, which
`windowed` sets): tiles wholly outside it are skipped, forward and backward, and the rest are masked.

GQA: the G query heads of a K/V head are stacked as the rows of one tile, (B, H_kv, G*cq, D), so
K/V are never repeated; the causal mask uses each row's own position (rows repeat per head).
Model features: a softcap caps each tile's scores before its mask (the backward multiplies by the cap's derivative,
1 - tanh^2); sink logits join each row's running denominator after its last key chunk (the sink's gradient is
-P_sink * rowsum(dO * O)).
Decoding keeps a KV cache (variants._decode.KVCache, preallocated, doubling) and runs each new
query through this online-softmax forward over the cached keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from variants._band import band, band_pairs
from variants._checks import check_int, query_offset
from variants._decode import KVCacheDecoding
from variants._gqa import group
from variants._model_features import softcapped
from variants._registry import register_variant
from variants.base import AttentionVariant, Capabilities, VariantConfig, softmax_scale
from variants.reference import PatternWeights

NEG_INF = float("-inf")


@dataclass(frozen=True, kw_only=True)
class ChunkedConfig(VariantConfig):
    query_chunk: int = 1024  # query rows per tile; a tile holds B*H*query_chunk*key_chunk scores
    key_chunk: int = 1024  # keys per tile; 1024 x 1024 keeps a CPU tile at 4 MiB per head and a GPU busy
    # 0: every key; else sliding_window's band of `window` keys (a model's own window); "added": out of ids at 0
    window: int = field(default=0, metadata={"added": True})

    def validate(self) -> None:
        check_int("query_chunk", self.query_chunk, minimum=1)
        check_int("key_chunk", self.key_chunk, minimum=1)
        check_int("window", self.window, minimum=0)


@register_variant("chunked", config=ChunkedConfig)
class ChunkedAttention(PatternWeights, KVCacheDecoding, AttentionVariant):
    """Exact softmax attention in query x key chunks with an online softmax: O(N*c) memory, forward and backward."""

    capabilities = Capabilities(exact=True, gqa=True, decode=True, causal_offset=True, softcap=True, sink_logits=True)
    small_config = {"query_chunk": 8, "key_chunk": 16}
    flops_tolerance = 0.0  # executed_flops counts the tiles the loop computes

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
        """4*D per score of every tile computed: causal stops each query chunk's keys at its last row and a window
        starts them at the key chunk of its first row's earliest key, so the tiles that cross an edge are computed
        whole (the convention's flops() counts half of N x M, or the band's pairs)."""
        offset, c = query_offset(N, M, causal), self.config
        keys = 0
        for qs, qe in _spans(N, c.query_chunk):
            first, last = _key_range(qs + offset, qe + offset, M, causal, c.window)
            keys += (qe - qs) * max(0, last - first // c.key_chunk * c.key_chunk)
        return 4 * B * H * D * keys

    def flops(self, B: int, H: int, N: int, M: int, D: int, causal: bool, *, H_kv: int | None = None) -> int:
        """The convention's count (dense's), or with a window 4*D per visible pair of its band (sliding_window's)."""
        if not self.config.window:
            return super().flops(B, H, N, M, D, causal, H_kv=H_kv)
        return 4 * B * H * D * band_pairs(N, M, self.config.window, causal)

    def pattern(self, query_idx: Tensor, key_idx: Tensor) -> Tensor | None:
        """Every key, or with a window its non-causal band as bool (R, M) (the reference adds j <= i when causal)."""
        if not self.config.window:
            return None
        return band(query_idx[:, None], key_idx[None, :], window=self.config.window, causal=False)

    def windowed(self, window: int) -> "ChunkedAttention":
        """Within a model's own causal window: the narrower of it and this config's (tiles outside it skipped)."""
        narrower = min(window, self.config.window or window)
        return self if narrower == self.config.window else type(self)(replace(self.config, window=narrower))

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
        # Half-precision inputs are computed in float32 (the running sums need it), then cast back.
        dtype = torch.promote_types(q.dtype, torch.float32)
        sinks = None if sink_logits is None else sink_logits.to(dtype)
        chunks = (self.config.query_chunk, self.config.key_chunk, self.config.window)
        out = _ChunkedAttention.apply(q.to(dtype), k.to(dtype), v.to(dtype), kv_mask, causal, *chunks, softcap, sinks)
        return out.to(q.dtype)


class _ChunkedAttention(torch.autograd.Function):
    """out = softmax(q k^T / sqrt(D) + mask) v, forward and backward tile by tile."""

    @staticmethod
    def forward(ctx, q, k, v, kv_mask, causal, query_chunk, key_chunk, window, softcap, sinks):  # type: ignore[override]
        out, lse = _chunked_forward(q, k, v, kv_mask, causal, (query_chunk, key_chunk, window), softcap, sinks)
        ctx.save_for_backward(q, k, v, out, lse, sinks)
        ctx.kv_mask, ctx.causal, ctx.chunks, ctx.softcap = kv_mask, causal, (query_chunk, key_chunk, window), softcap
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):  # type: ignore[override]
        q, k, v, out, lse, sinks = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        delta = (grad_out * out).sum(-1)  # (B, H, N): rowsum(dO * O) = rowsum(dP * P)
        dq, dk, dv = _chunked_backward(q, k, v, lse, delta, grad_out, ctx.kv_mask, ctx.causal, ctx.chunks, ctx.softcap)
        d_sinks = None
        if sinks is not None and ctx.needs_input_grad[-1]:  # a sink's dP is 0 (no value): dS = P_sink * (0 - delta)
            d_sinks = -((sinks[None, :, None] - lse).exp() * delta).sum((0, 2))  # (H,)
        return dq, dk, dv, None, None, None, None, None, None, d_sinks


def _spans(length: int, chunk: int) -> list[tuple[int, int]]:
    return [(s, min(s + chunk, length)) for s in range(0, length, chunk)]


def _key_range(start: int, end: int, M: int, causal: bool, window: int) -> tuple[int, int]:
    """The keys [first, last) the queries at positions start .. end - 1 may see: causal stops at the last one's
    position; a window (0: none) starts at the first one's earliest key and, not causal, ends window - 1 after the
    last one."""
    first = max(0, start - window + 1) if window else 0
    if causal:
        return first, min(M, end)
    return first, (min(M, end - 1 + window) if window else M)


def _grouped(x: Tensor, kv_heads: int) -> Tensor:
    """(B, H, c, D) -> (B, H_kv, G*c, D): a K/V head's G query heads stacked as rows (a copy if G > 1)."""
    return x if x.shape[1] == kv_heads else group(x, kv_heads).flatten(2, 3)


def _ungrouped(x: Tensor, heads: int) -> Tensor:
    """(B, H_kv, G*c, ...) -> (B, H, c, ...), the inverse of _grouped."""
    B, Hkv, R = x.shape[:3]
    return x.reshape(B, heads, R * Hkv // heads, *x.shape[3:])


def _sink_rows(sinks: Tensor, kv_heads: int, cq: int) -> Tensor:
    """sinks (H,) -> (1, H_kv, G*cq): each stacked row's head's sink logit, in _grouped's row order."""
    return sinks.view(1, kv_heads, -1, 1).expand(-1, -1, -1, cq).reshape(1, kv_heads, -1)


def _mask_tile_(s: Tensor, qs: int, cq: int, ks: int, kv_mask: Tensor | None, causal: bool, window: int = 0) -> Tensor:
    """Set invisible scores of the tile s (B, H_kv, G*cq, ck) at query positions qs.., keys ks.. to -inf, in place.

    Row r of the tile is query position qs + r % cq: the G query heads of a K/V head are stacked. A position, not a
    row index: under causal, query row i sits at i + M - N. A window (0: none) hides the keys outside its band.
    """
    ck = s.shape[-1]
    if kv_mask is not None:
        s.masked_fill_(~kv_mask[:, None, None, ks : ks + ck], NEG_INF)
    crosses_diagonal = causal and ks + ck - 1 > qs
    if crosses_diagonal or window:
        rows = torch.arange(qs, qs + cq, device=s.device).repeat(s.shape[-2] // cq)[:, None]  # (G*cq, 1)
        keys = torch.arange(ks, ks + ck, device=s.device)[None, :]
        hidden = keys > rows if crosses_diagonal else torch.zeros((), dtype=torch.bool, device=s.device)
        if window:
            hidden = hidden | ~band(rows, keys, window=window, causal=False)
        s.masked_fill_(hidden, NEG_INF)
    return s


def _chunked_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    kv_mask: Tensor | None,
    causal: bool,
    chunks: tuple[int, int, int],
    softcap: float | None = None,
    sinks: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Output (B, H, N, D) and log-sum-exp (B, H, N) (-inf for a row that sees no key and no sink). chunks: the
    config's (query_chunk, key_chunk, window)."""
    query_chunk, key_chunk, window = chunks
    B, H, N, D = q.shape
    Hkv, M = k.shape[1], k.shape[2]
    scale, offset = softmax_scale(D), query_offset(N, M, causal)
    out = torch.empty_like(q)
    lse = torch.empty(B, H, N, dtype=q.dtype, device=q.device)
    for qs, qe in _spans(N, query_chunk):
        qc = _grouped(q[:, :, qs:qe], Hkv) * scale  # (B, H_kv, G*cq, D)
        row_max = torch.full(qc.shape[:3], NEG_INF, dtype=q.dtype, device=q.device)  # (B, H_kv, G*cq)
        row_sum = torch.zeros_like(row_max)
        acc = torch.zeros_like(qc)
        first, last = _key_range(qs + offset, qe + offset, M, causal, window)  # no chunk above the diagonal
        for ks, ke in _spans(last, key_chunk):
            if ke <= first:  # wholly before the window
                continue
            scores = softcapped(qc @ k[:, :, ks:ke].transpose(-1, -2), softcap)  # (B, H_kv, G*cq, ck)
            s = _mask_tile_(scores, qs + offset, qe - qs, ks, kv_mask, causal, window)
            new_max = torch.maximum(row_max, s.amax(-1))
            shift = new_max.masked_fill(new_max == NEG_INF, 0.0)  # a row that sees nothing yet: exp(-inf) = 0
            p = s.sub_(shift[..., None]).exp_()
            alpha = (row_max - shift).exp_()
            row_sum.mul_(alpha).add_(p.sum(-1))
            acc.mul_(alpha[..., None]).add_(p @ v[:, :, ks:ke])
            row_max = new_max
        if sinks is not None:  # the sink joins the denominator: one more term, no value, rescaled to the new max
            sink = _sink_rows(sinks, Hkv, qe - qs)
            new_max = torch.maximum(row_max, sink)
            alpha = (row_max - new_max).exp_()  # 0 for a row that saw no key
            row_sum.mul_(alpha).add_((sink - new_max).exp_())
            acc.mul_(alpha[..., None])
            row_max = new_max
        result = acc / row_sum.clamp_min(torch.finfo(q.dtype).tiny)[..., None]  # no key: 0 / tiny = 0
        out[:, :, qs:qe] = _ungrouped(result, H)
        lse[:, :, qs:qe] = _ungrouped(row_max.masked_fill(row_max == NEG_INF, 0.0) + row_sum.log(), H)
    return out, lse


def _chunked_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    lse: Tensor,
    delta: Tensor,
    grad_out: Tensor,
    kv_mask: Tensor | None,
    causal: bool,
    chunks: tuple[int, int, int],
    softcap: float | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """FlashAttention-2's backward: per key chunk, recompute P from lse and accumulate dq, dk, dv.

    delta (B, H, N) is rowsum(dO * O). GQA: dk, dv of a K/V head sum over its G query heads (the stacked rows of each
    tile). A softcap's scores are recomputed and dS multiplied by the cap's derivative 1 - tanh^2. chunks: the config's
    (query_chunk, key_chunk, window); a tile wholly outside the visible keys is skipped.
    """
    query_chunk, key_chunk, window = chunks
    H, N, D = q.shape[1], q.shape[2], q.shape[3]
    Hkv, M = k.shape[1], k.shape[2]
    scale, offset = softmax_scale(D), query_offset(N, M, causal)
    lse = lse.masked_fill(lse == NEG_INF, float("inf"))  # rows that saw no key: P = exp(s - inf) = 0
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for ks, ke in _spans(M, key_chunk):
        kc, vc = k[:, :, ks:ke], v[:, :, ks:ke]  # (B, H_kv, ck, D)
        for qs, qe in _spans(N, query_chunk):
            first, last = _key_range(qs + offset, qe + offset, M, causal, window)
            if ks >= last or ke <= first:  # every key of this chunk is after every query's last one, or before
                continue
            qc, doc = _grouped(q[:, :, qs:qe], Hkv), _grouped(grad_out[:, :, qs:qe], Hkv)  # (B, H_kv, G*cq, D)
            # (B, H_kv, G*cq, ck)
            raw = (qc * scale) @ kc.transpose(-1, -2)
            capped = None if softcap is None else torch.tanh(raw / softcap)  # tanh(s / c); the score is c * that
            tile = raw if capped is None else capped * softcap
            s = _mask_tile_(tile, qs + offset, qe - qs, ks, kv_mask, causal, window)
            p = s.sub_(_grouped(lse[:, :, qs:qe, None], Hkv)).exp_()
            dv[:, :, ks:ke] += p.transpose(-1, -2) @ doc
            # dS = P * (dP - delta)
            ds = (doc @ vc.transpose(-1, -2)).sub_(_grouped(delta[:, :, qs:qe, None], Hkv)).mul_(p)
            if capped is not None:  # d(c * tanh(s / c)) / ds = 1 - tanh^2, at the uncapped score
                ds.mul_(1 - capped.square())
            dq[:, :, qs:qe] += _ungrouped((ds @ kc).mul_(scale), H)
            dk[:, :, ks:ke] += (ds.transpose(-1, -2) @ qc).mul_(scale)
    return dq, dk, dv
