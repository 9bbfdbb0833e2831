"""sliding_window's banded backend: query blocks attend to the key span around them through fused SDPA, never N x M.

The block size is measured per device and shape by prepare() (_choose_block, outside the timed region); the band's
mask per block is cached per shape in SDPA's additive form (_cached_masks). Exact, O(N * window) time and memory,
forward and backward.
"""

from __future__ import annotations

import functools
import time

import torch
import torch.nn.functional as F
from torch import Tensor

from variants._band import band
from variants._checks import query_offset, softmax_scale

_BLOCK = 64  # banded: query rows per block; smaller blocks waste fewer keys but add per-block overhead
_BLOCK_CHOICES = (32, 64, 128)  # banded: the sizes prepare() times on the cell's inputs, per device
# banded: the block measured fastest per (device, dtype, N, window, D, causal, sinks); _BLOCK where none was
_FASTEST_BLOCK: dict[tuple, int] = {}


def banded_block(N: int, window: int, D: int, causal: bool, sinks: int) -> int:
    """The block size a banded call of this shape uses: the one prepare() measured fastest (any device), else _BLOCK."""
    chosen = [b for key, b in _FASTEST_BLOCK.items() if key[2:] == (N, window, D, causal, sinks)]
    return chosen[-1] if chosen else _BLOCK


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
    mask is cached per shape (_cached_masks). b: `block`, else the size prepare() measured fastest, else _BLOCK.
    Causal with N < M: query row i sits at position i + M - N (bottom-right), and keys behind every window are skipped.
    """
    B, H, N, D = q.shape
    Hkv, M = k.shape[1], k.shape[2]
    G = H // Hkv
    b = min(block or _FASTEST_BLOCK.get(_block_key(q, window, causal, sinks), _BLOCK), N)
    nb = -(-N // b)
    P = window - 1  # keys before a query that it may see
    L = b + P + (0 if causal else P)  # keys a block of b queries may see
    Mp = (nb - 1) * b + L  # padded key length: key position j sits at index j + P - shift (_key_layout)
    shift = query_offset(N, M, causal)  # causal: query row i sits at position i + shift
    qp = q if nb * b == N else F.pad(q, (0, 0, 0, nb * b - N))
    qb = qp.view(B, Hkv, G, nb, b, D).transpose(2, 3).reshape(B, Hkv, nb, G * b, D)  # a view when G = 1
    kw, vw = (_windows(t, P, Mp, L, b, shift) for t in (k, v))  # (B, H_kv, nb, L, D) overlapping views
    S = min(sinks, M)
    if S:  # sink keys go in front of every block's window: (B, H_kv, nb, S + L, D), a copy
        kw, vw = (torch.cat([t[:, :, None, :S].expand(-1, -1, nb, -1, -1), w], dim=3) for t, w in ((k, kw), (v, vw)))
    if kv_mask is None:  # one mask for every batch row, cached per shape in SDPA's additive form
        keep, bias = _cached_masks(N, M, b, window, causal, S, G, q.device, q.dtype)
        flat = (t.flatten(0, 1) for t in (qb, kw, vw))  # (B*H_kv, nb, rows, D): 4-D keeps SDPA's fused CPU kernel
        out = F.scaled_dot_product_attention(*flat, attn_mask=bias, scale=softmax_scale(D))
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
def _cached_masks(
    N: int, M: int, b: int, window: int, causal: bool, S: int, G: int, device: torch.device, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """The band's bool mask without padding and its additive form (0 kept, -inf not), built once per shape: SDPA
    turns a bool mask into the additive one on every call, a pass over nb*b*L elements that the cache saves."""
    keep = _band_keep(N, M, b, window, causal, S, G, device)
    bias = torch.zeros(keep.shape, dtype=dtype, device=device).masked_fill_(~keep, float("-inf"))
    return keep, bias


def _band_keep(
    N: int,
    M: int,
    b: int,
    window: int,
    causal: bool,
    S: int,
    G: int,
    device: torch.device,
    real_keys: Tensor | None = None,
) -> Tensor:
    """The banded blocks' bool mask (1, nb, G*b, S + L): band, sinks and padding (`real_keys`, (M,) of one batch row)."""
    nb, P = -(-N // b), window - 1
    L = b + P + (0 if causal else P)
    Mp = (nb - 1) * b + L
    shift = query_offset(N, M, causal)
    # Block n's query r sits at padded index r + P of its L keys; the window depends only on j - i, so block 0's
    # (b, L) picture holds for every block.
    window_seen = band(
        torch.arange(b, device=device)[:, None] + P,
        torch.arange(L, device=device)[None, :],
        window=window,
        causal=causal,
    )  # (b, L)
    real = torch.zeros(Mp, dtype=torch.bool, device=device)
    start, front = _key_layout(P, shift)
    n_real = min(M - start, Mp - front)
    real[front : front + n_real] = True if real_keys is None else real_keys[start : start + n_real]
    keep = window_seen[None] & real.unfold(0, L, b)[:, None, :]  # (nb, b, L)
    if S:
        i = torch.arange(nb * b, device=device).view(nb, b, 1) + shift  # query positions
        j = torch.arange(S, device=device)
        in_window = band(i, j, window=window, causal=causal)  # (nb, b, S): shown by the window part already
        sink_seen = band(i, j, window=window, causal=causal, sinks=S) & ~in_window  # so no key counts twice
        keep = torch.cat([sink_seen & (True if real_keys is None else real_keys[:S]), keep], dim=-1)  # (nb, b, S + L)
    return keep.repeat(1, G, 1)[None]  # (1, nb, G*b, S + L): 4-D keeps SDPA's fused CPU kernel


def _key_layout(P: int, shift: int) -> tuple[int, int]:
    """(start, front): the padded keys are keys start.. after `front` padding slots, so key position j sits at padded
    index j + P - shift; keys before start = shift - P are behind every query's window (a decode step's old keys)."""
    start = max(0, shift - P)
    return start, P - shift + start


def _windows(t: Tensor, P: int, Mp: int, L: int, b: int, shift: int) -> Tensor:
    """(B, H, M, D) -> (B, H, nb, L, D): block n's L keys start at padded index n*b (the one copy is the padding)."""
    start, front = _key_layout(P, shift)
    used = t[:, :, start:]
    padded = F.pad(used, (0, 0, front, max(0, Mp - front - used.shape[2])))[:, :, :Mp]  # (B, H, Mp, D)
    return padded.unfold(2, L, b).transpose(-1, -2)
