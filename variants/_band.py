"""The sliding-window band, declared once: which key j each query i sees.

- causal:     i - window < j <= i (itself and the window - 1 keys before it);
- non-causal: |i - j| < window (2 * window - 1 keys in the interior);
- sinks:      the first `sinks` keys as well, for every query (still j <= i when causal).
i and j are positions: under causal the N queries sit at the last N of the M key positions (bottom-right).

`band` is the predicate in attention-gym's mask_mod shape (index tensors in, a broadcast bool tensor
out): sliding_window's pattern, its masked backend, the banded backend's block masks and flex's
mask_mod all call it. Pairs and blocks cannot be counted pair by pair at large N, so `band_pairs` and
flex's block classification read the same `BandLimits` the predicate compares against; tests check
them, and the banded backend's visible pairs, against the predicate's N x M picture.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from variants._checks import query_offset


class BandLimits(NamedTuple):
    """The band as bounds on the key offset j - i; `torch.tensor(limits)` gives flex its (4,) tensor."""

    lo: int  # a key is in the window when lo < j - i < hi
    hi: int
    sinks: int  # ... or a sink when j < sinks and j - i < sink_hi
    sink_hi: int


def band_limits(window: int, causal: bool, sinks: int = 0, offset: int = 0) -> BandLimits:
    """The bounds `in_band` compares against; causality is a bound (j - i < 1), not a second mask.

    `offset`: the position of query row 0 (variants._checks.query_offset: M - N under causal), for bounds on row
    indices rather than positions (flex's q_idx is a row): row r at position r + offset.
    """
    # Non-causal sinks need no offset bound: j < sinks and i >= 0 already give j - i < sinks.
    limits = BandLimits(lo=-window, hi=1 if causal else window, sinks=sinks, sink_hi=1 if causal else sinks)
    return limits._replace(lo=limits.lo + offset, hi=limits.hi + offset, sink_hi=limits.sink_hi + offset)


def in_band(q_idx: Tensor, kv_idx: Tensor, limits: BandLimits | Tensor) -> Tensor:
    """The predicate on broadcast query and key positions; `limits` is a BandLimits or a (4,) tensor of one.

    flex passes a tensor, so one compiled graph serves every window, sink count and causality.
    """
    rel = kv_idx - q_idx  # the key's offset from its query, j - i
    return ((rel > limits[0]) & (rel < limits[1])) | ((kv_idx < limits[2]) & (rel < limits[3]))


def band(q_idx: Tensor, kv_idx: Tensor, *, window: int, causal: bool, sinks: int = 0) -> Tensor:
    """Whether query q_idx sees key kv_idx under the band (and sinks): bool, q_idx and kv_idx broadcast.

    Args: q_idx, kv_idx: integer positions, e.g. (N, 1) and (1, M) for the N x M picture.
    Returns: bool of their broadcast shape. Padding is not its business (the callers add kv_mask).
    """
    return in_band(q_idx, kv_idx, band_limits(window, causal, sinks))


def band_pairs(N: int, M: int, window: int, causal: bool, *, sinks: int = 0) -> int:
    """Number of visible (query, key) pairs of the band plus sinks (before padding): the work an exact band needs.

    In closed form, O(N): for each query the window is one run of keys and the sinks a prefix. Causal queries are
    the last N of the M positions (bottom-right).
    """
    lo, hi, S, sink_hi = band_limits(window, causal, sinks)
    i = torch.arange(N, dtype=torch.int64) + query_offset(N, M, causal)  # query positions
    first, end = (i + lo + 1).clamp(min=0), (i + hi).clamp(max=M)  # window keys [first, end)
    sink_end = (i + sink_hi).clamp(min=0, max=min(S, M))  # visible sinks [0, sink_end)
    overlap = (torch.minimum(end, sink_end) - first).clamp(min=0)  # sinks inside the window, counted once
    return int(((end - first).clamp(min=0) + sink_end - overlap).sum())
