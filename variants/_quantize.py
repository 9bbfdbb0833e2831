"""The project's one quantizer: a tensor (..., D) to int8 or fp8_e4m3 with one float32 absmax scale per row over D.

Here too K and V as a quantized cache gives them back (round_trip) and K and V held quantized for a call (StoredKV): the
harness's K/V store around any variant (harness.measure.kv_quant) and a variant that reads quantized K/V share them;
dense's int8 scores quantize Q and K with the same quantizer (variants._int8_scores).

int8: one float32 scale per row over D (a (b, h, position) row of q, k or v: per token, per head), scale = absmax /
127, values round(x / scale) in [-127, 127]. fp8_e4m3: torch.float8_e4m3fn values with the same per-row float32
scale, absmax / 448 (e4m3's largest finite value). Per token rather than per head, because a decode cache grows a token
at a time and a per-head scale fixed in advance would clip later tokens (a rescaled one would re-round the whole
cache). A row of zeros gets scale 1. Re-quantizing a dequantized row gives back the same values and scale (absmax maps
to the largest value), so storing a row again adds no error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import Tensor

# kv_dtype -> (the stored dtype, the largest value a row's absmax maps to)
_STORED = {"int8": (torch.int8, 127.0), "fp8_e4m3": (torch.float8_e4m3fn, 448.0)}
SCALE_DTYPE = torch.float32  # one scale per (b, h, position) row


@dataclass
class Quantized:
    """A tensor (..., D) stored quantized: its values and one scale per row over D, and the dtype it is read in."""

    values: Tensor  # (..., D) int8 or float8_e4m3fn
    scale: Tensor  # (..., 1) float32: the row's absmax / the stored dtype's largest value
    dtype: torch.dtype  # the compute dtype dequantize returns

    @property
    def nbytes(self) -> int:
        """Bytes held: the values and the scales (what variants.live_state_bytes counts of a view of it)."""
        return self.values.nbytes + self.scale.nbytes

    def __getitem__(self, index: Any) -> Quantized:
        """A view of some rows (an index over the dimensions before D: a KV cache's live part)."""
        return Quantized(self.values[index], self.scale[index], self.dtype)


def quantize(x: Tensor, kv_dtype: str) -> Quantized:
    """x (..., D) quantized per row over D (see the module doc); kv_dtype "int8" or "fp8_e4m3"."""
    stored, largest = _STORED[kv_dtype]
    x32 = x.to(SCALE_DTYPE)
    absmax = x32.abs().amax(dim=-1, keepdim=True)  # (..., 1)
    scale = torch.where(absmax > 0, absmax / largest, torch.ones_like(absmax))
    scaled = x32 / scale  # a new tensor: rounded (int8; fp8's cast rounds) and clamped in place
    values = (scaled.round_() if stored == torch.int8 else scaled).clamp_(-largest, largest).to(stored)
    return Quantized(values, scale, x.dtype)


def dequantize(q: Quantized) -> Tensor:
    """The stored tensor in its compute dtype: values x scale."""
    return q.values.to(SCALE_DTYPE).mul_(q.scale).to(q.dtype)  # one float32 copy, scaled in place


def round_trip(x: Tensor, kv_dtype: str) -> Tensor:
    """dequantize(quantize(x)): x as a cache of kv_dtype gives it back; x itself for "none"."""
    return x if kv_dtype == "none" else dequantize(quantize(x, kv_dtype))


class StoredKV:
    """A prefill cell's K and V as held: quantized once (untimed), or the tensors themselves for "none"."""

    def __init__(self, k: Tensor, v: Tensor, kv_dtype: str):
        self.kv_dtype = kv_dtype
        self.k, self.v = (t if kv_dtype == "none" else quantize(t, kv_dtype) for t in (k, v))

    @property
    def nbytes(self) -> int:
        """K and V as stored: their values and scales."""
        return self.k.nbytes + self.v.nbytes

    def read(self) -> tuple[Tensor, Tensor]:
        """K and V in the compute dtype (dequantized: inside the timed call)."""
        if self.kv_dtype == "none":
            return self.k, self.v
        return dequantize(self.k), dequantize(self.v)

    def reading(self, call: Callable[[Tensor, Tensor, Tensor], Tensor]) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
        """call(q, k, v) -> the same call on the stored K and V (k, v must be those they were made from)."""
        if self.kv_dtype == "none":
            return call

        def read_and_call(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            stored_k, stored_v = self.read()
            if stored_k.shape != k.shape or stored_v.shape != v.shape:
                raise ValueError(f"stored K/V {tuple(stored_k.shape)} read for a call on {tuple(k.shape)}")
            return call(q, stored_k, stored_v)

        return read_and_call
