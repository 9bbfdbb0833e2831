"""K and V stored quantized (Cell.kv_dtype), around any variant: the store, the bytes held, the error.

The quantizer (int8 and fp8_e4m3, one float32 absmax scale per token and head), the round trip and a prefill's store
(StoredKV) are variants._quantize's, shared with dense's int8 scores.

The harness applies it around the variant, never inside it. A prefill cell stores K and V quantized once (untimed) and
its timed call dequantizes them to the compute dtype before calling the variant (reading). A decode cell's state keeps
the fields its state declares as keys and values (a ``kv_fields`` class attribute: variants._decode.KVCache,
variants._ring.SlidingWindowState) as Quantized between steps (stored_state); the timed step loads them
(loaded_state: one dequantization of the whole cache), runs the variant's step and stores what it wrote (the rows its
state names in ``written_rows()``; a state that names none, or a cache that grew, is quantized whole). An emulation
around any variant: a fused kernel reads the int8 cache inside attention, so the latency is an upper bound of
quantization's cost; the bytes and errors are exact. The
context's and each new token's K/V reach the variant as they would come out of the cache (round_trip, untimed).
Re-quantizing a dequantized row gives back the same values and scale, so storing a row again adds no error.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
from torch import Tensor

from harness.measure.reference import rel_l2
from variants._quantize import Quantized, dequantize, quantize, round_trip


def quantization_errors(k: Tensor, v: Tensor, kv_dtype: str) -> dict[str, float | None]:
    """The row fields of quantization's own error: rel L2 of round_trip(K) against K, and of V (None for "none")."""
    if kv_dtype == "none":
        return {"k_quant_rel_l2": None, "v_quant_rel_l2": None}
    return {"k_quant_rel_l2": rel_l2(round_trip(k, kv_dtype), k), "v_quant_rel_l2": rel_l2(round_trip(v, kv_dtype), v)}


def stored_state(state: Any, kv_dtype: str) -> Any:
    """A decode state with its key and value fields quantized in place (nested states too); the state for "none".

    A field read by loaded_state whose state names the rows its last step wrote (``written_rows()``, along the
    position dimension) and kept its shape gets only those rows quantized into the store it was read from; any other
    (the context's, a cache that grew) is quantized whole."""
    if kv_dtype != "none":
        _each_kv_field(state, lambda owner, name, t: _store(owner, name, t, kv_dtype))
    return state


def loaded_state(state: Any) -> Any:
    """A decode state with its quantized key and value fields dequantized in place, ready for the variant's step; the
    stores they were read from are kept beside them (stored_state writes a step's rows back into them)."""
    _each_kv_field(state, _load)
    return state


def _load(owner: Any, name: str, value: Any) -> Any:
    if not isinstance(value, Quantized):
        return value
    read = owner.__dict__.setdefault("_kv_read", {})  # not a field: state_bytes and equality ignore it
    read[name] = value
    return dequantize(value)


def _store(owner: Any, name: str, value: Any, kv_dtype: str) -> Any:
    if not isinstance(value, Tensor):
        return value
    store = owner.__dict__.get("_kv_read", {}).pop(name, None)
    written = getattr(owner, "written_rows", None)
    if store is None or written is None or store.values.shape != value.shape:
        return quantize(value, kv_dtype)
    rows = torch.tensor(written(), dtype=torch.long, device=value.device)
    fresh = quantize(value.index_select(2, rows), kv_dtype)  # (B, H_kv, rows, D)
    store.values.view(torch.uint8).index_copy_(2, rows, fresh.values.view(torch.uint8))  # bytes: fp8 has no index_copy
    store.scale.index_copy_(2, rows, fresh.scale)
    return store


def _each_kv_field(state: Any, convert: Callable[[Any, str, Any], Any]) -> None:
    """Replace each field a state dataclass declares in ``kv_fields`` by convert(the state, its name, its value), into
    nested states."""
    if not dataclasses.is_dataclass(state) or isinstance(state, (type, Quantized)):
        return
    declared = getattr(state, "kv_fields", ())
    for f in dataclasses.fields(state):
        value = getattr(state, f.name)
        if f.name in declared:
            setattr(state, f.name, convert(state, f.name, value))
        else:
            _each_kv_field(value, convert)
