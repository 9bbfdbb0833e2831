"""Decoding helpers shared by the variants: input checks, a growable KV cache, and state_bytes.

Decoding is for inference: states are updated in place where that avoids a copy (the KV cache
writes the new token into preallocated capacity), so call ``init_state``/``step`` under
``torch.no_grad()`` and always use the state that ``step`` returns.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import torch
from torch import Tensor

from variants._checks import check_kv_heads


_MIN_CAPACITY = 16  # smallest KV-cache allocation, in tokens


def state_bytes(state: Any) -> int:
    """Bytes of the tensors in a decode state (tensors inside dicts, lists, tuples, dataclasses).

    Counts the storage each tensor lives in, once per storage: a preallocated cache counts the
    capacity actually allocated, not only the tokens written so far, since that is what it holds.
    """
    seen: dict[int, int] = {}
    _collect(state, seen)
    return sum(seen.values())


def live_state_bytes(state: Any) -> int:
    """Bytes of what a decode state holds now, the part a step reads: a state with ``live_tensors()`` (a KV cache)
    counts those views, every other tensor its storage as state_bytes does. A KV cache's capacity is state_bytes."""
    seen: dict[int, int] = {}
    _collect(state, seen, live=True)
    return sum(seen.values())


def checked_once(state: Any, q_t: Any, k_t: Any, v_t: Any, check: Callable[[], None]) -> None:
    """Run a step's `check` once per sequence: on a state's first step, and again whenever the token's shapes, dtypes
    or devices differ from the last checked ones (so a bad step is still refused with the same message)."""
    if not (isinstance(q_t, Tensor) and isinstance(k_t, Tensor) and isinstance(v_t, Tensor)):
        check()  # raises its TypeError
        return
    # spelled out, no generators: it runs every token, and a small state's whole step takes a few tens of us
    key = (q_t.shape, k_t.shape, v_t.shape, q_t.dtype, k_t.dtype, v_t.dtype, q_t.device, k_t.device, v_t.device)
    if getattr(state, "_checked_for", None) != key:
        check()
        object.__setattr__(state, "_checked_for", key)  # not a field: state_bytes and equality ignore it


def _collect(obj: Any, seen: dict[int, int], *, live: bool = False) -> None:
    if live and hasattr(obj, "live_tensors"):
        for t in obj.live_tensors():
            seen[id(t)] = t.nbytes  # a tensor, or a view of a quantized store (its values and scales)
        return
    if isinstance(obj, Tensor):
        storage = obj.untyped_storage()
        seen[storage.data_ptr() or id(storage)] = storage.nbytes()
    elif isinstance(obj, dict):
        for value in obj.values():
            _collect(value, seen, live=live)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            _collect(value, seen, live=live)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for field in dataclasses.fields(obj):
            _collect(getattr(obj, field.name), seen, live=live)


def check_context(k: Any, v: Any, kv_mask: Any = None) -> None:
    """Raise TypeError/ValueError unless k, v are (B, H_kv, N, D) and kv_mask is bool (B, N) or None."""
    for name, t in (("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"init_state: {name} must be a torch.Tensor of shape (B, H_kv, N, D), got {type(t).__name__}"
            )
        if t.dim() != 4 or not t.is_floating_point():
            raise ValueError(
                f"init_state: {name} must be a floating-point (B, H_kv, N, D) tensor, got shape "
                f"{tuple(t.shape)} dtype {t.dtype}"
            )
    if k.shape != v.shape or k.dtype != v.dtype or k.device != v.device:
        raise ValueError(
            f"init_state: k and v must have one shape, dtype and device, got k {tuple(k.shape)} {k.dtype} "
            f"{k.device}, v {tuple(v.shape)} {v.dtype} {v.device}"
        )
    if kv_mask is not None:
        B, N = k.shape[0], k.shape[2]
        if not isinstance(kv_mask, Tensor) or kv_mask.dtype != torch.bool or tuple(kv_mask.shape) != (B, N):
            got = f"{tuple(kv_mask.shape)} {kv_mask.dtype}" if isinstance(kv_mask, Tensor) else type(kv_mask).__name__
            raise ValueError(f"init_state: kv_mask must be a bool tensor of shape (B, N) = ({B}, {N}), got {got}")
        if kv_mask.device != k.device:
            raise ValueError(f"init_state: kv_mask must be on k's device {k.device}, got {kv_mask.device}")


def check_step(q_t: Any, k_t: Any, v_t: Any, *, batch: int, kv_heads: int, head_dim: int) -> None:
    """Raise unless q_t is (B, H, 1, D) and k_t, v_t are (B, H_kv, 1, D) for the state's B, H_kv, D."""
    for name, t, heads in (("q_t", q_t, "H"), ("k_t", k_t, "H_kv"), ("v_t", v_t, "H_kv")):
        if not isinstance(t, Tensor):
            raise TypeError(f"step: {name} must be a torch.Tensor of shape (B, {heads}, 1, D), got {type(t).__name__}")
        if t.dim() != 4 or t.shape[2] != 1:
            raise ValueError(
                f"step: {name} must be one token, shape (B, {heads}, 1, D), got {tuple(t.shape)}; "
                "call step once per token"
            )
    if not (q_t.dtype == k_t.dtype == v_t.dtype) or not (q_t.device == k_t.device == v_t.device):
        raise TypeError(
            f"step: q_t, k_t, v_t must share one dtype and device, got {q_t.dtype}/{q_t.device}, "
            f"{k_t.dtype}/{k_t.device}, {v_t.dtype}/{v_t.device}"
        )
    want = (batch, kv_heads, 1, head_dim)
    for name, t in (("k_t", k_t), ("v_t", v_t)):
        if tuple(t.shape) != want:
            raise ValueError(f"step: {name} must be (B, H_kv, 1, D) = {want} to match the state, got {tuple(t.shape)}")
    if (q_t.shape[0], q_t.shape[3]) != (batch, head_dim):
        raise ValueError(
            f"step: q_t must be (B={batch}, H, 1, D={head_dim}) to match the state, got {tuple(q_t.shape)}"
        )
    check_kv_heads(q_t.shape[1], kv_heads, what=f"q_t {tuple(q_t.shape)}, k_t {tuple(k_t.shape)}")


def check_state(state: Any, cls: type, variant: str) -> None:
    """Raise TypeError unless state is a `cls` (the state this variant's init_state returns)."""
    if not isinstance(state, cls):
        raise TypeError(
            f"step: state must be the {cls.__name__} that {variant}.init_state/step returned, "
            f"got {type(state).__name__}"
        )


@dataclass
class KVCache:
    """Keys and values of every token so far, in preallocated capacity that doubles when full.

    Appending is amortised O(1) per token (one copy into free capacity; a full cache is copied
    once into twice the room). ``state_bytes`` counts the capacity, which is what is allocated.
    """

    # the fields holding keys and values: a harness may store them quantized between steps (harness.measure.kv_quant)
    kv_fields: ClassVar[tuple[str, ...]] = ("k", "v")
    k: Tensor  # (B, H_kv, capacity, D); [:, :, :length] is live
    v: Tensor  # (B, H_kv, capacity, D)
    mask: Tensor | None  # (B, capacity) bool, True = real token; None while no padding was seen
    length: int  # tokens written so far (context + decoded)

    @classmethod
    def from_context(cls, k: Tensor, v: Tensor, kv_mask: Tensor | None = None) -> "KVCache":
        """A cache holding the context k, v (B, H_kv, N, D) with room for as many tokens again."""
        B, Hkv, N, D = k.shape
        capacity = max(_MIN_CAPACITY, 2 * N)
        buf_k, buf_v = (t.new_empty(B, Hkv, capacity, D) for t in (k, v))
        buf_k[:, :, :N], buf_v[:, :, :N] = k, v
        mask = None
        if kv_mask is not None:
            mask = torch.ones(B, capacity, dtype=torch.bool, device=k.device)
            mask[:, :N] = kv_mask
        return cls(buf_k, buf_v, mask, N)

    def append(self, k_t: Tensor, v_t: Tensor) -> None:
        """Write one token (B, H_kv, 1, D) after the live ones, doubling the capacity if full."""
        if self.length == self.k.shape[2]:
            self._grow(2 * self.length)
        self.k[:, :, self.length] = k_t[:, :, 0]
        self.v[:, :, self.length] = v_t[:, :, 0]
        self.length += 1

    def written_rows(self) -> list[int]:
        """The positions the last append wrote (its one token): what a quantized store of k, v writes back."""
        return [self.length - 1]

    def live_tensors(self) -> tuple[Tensor, ...]:
        """The live keys, values and mask (what live_state_bytes counts; the capacity is state_bytes')."""
        return tuple(t for t in self.live() if t is not None)

    def live(self) -> tuple[Tensor, Tensor, Tensor | None]:
        """Views of the live keys, values (B, H_kv, length, D) and padding mask (B, length) or None."""
        L = self.length
        mask = None if self.mask is None else self.mask[:, :L]
        return self.k[:, :, :L], self.v[:, :, :L], mask

    def _grow(self, capacity: int) -> None:
        B, Hkv, L, D = self.k.shape[0], self.k.shape[1], self.length, self.k.shape[3]
        k, v = (t.new_empty(B, Hkv, capacity, D) for t in (self.k, self.v))
        k[:, :, :L], v[:, :, :L] = self.k[:, :, :L], self.v[:, :, :L]
        if self.mask is not None:
            mask = torch.ones(B, capacity, dtype=torch.bool, device=k.device)
            mask[:, :L] = self.mask[:, :L]
            self.mask = mask
        self.k, self.v = k, v


def kv_cache_step(variant: Any, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: KVCache) -> tuple[Tensor, KVCache]:
    """One decode step of an exact variant (an AttentionVariant; not imported, base imports this module) over a KV
    cache: append, then the variant's decode step where its config chooses one (decode_backend), else its forward.

    The new token is the last position: causal with one query over the whole cache for a variant with the causal
    query offset (bottom-right: it sees every cached key, the context's padding still masked, and a windowed variant's
    band ends at it), non-causal for one without it (the same keys).
    """
    check_state(state, KVCache, variant.name)

    def check() -> None:
        check_step(q_t, k_t, v_t, batch=state.k.shape[0], kv_heads=state.k.shape[1], head_dim=state.k.shape[3])
        variant.check_decode(q_t, k_t, v_t)

    checked_once(state, q_t, k_t, v_t, check)
    state.append(k_t, v_t)
    k, v, mask = state.live()  # (B, H_kv, L, D), (B, L) or None
    step = variant._decode_step  # a config's decode_backend (dense's native kernel), else the variant's own forward
    causal = variant.capabilities.causal_offset  # else a top-left causal forward would show it key 0 only
    out = variant.forward(q_t, k, v, causal=causal, kv_mask=mask) if step is None else step(q_t, k, v, mask)
    return out, state


class KVCacheDecoding:
    """Decoding for an exact variant by a KV cache (mixed into dense and chunked): the context kept, each step
    appended, and the new query run through the variant's own forward over the whole cache."""

    def init_state(self, k: Tensor, v: Tensor, *, kv_mask: Tensor | None = None) -> KVCache:
        """A KV cache holding the context (B, H_kv, N, D), with room for N more tokens."""
        check_context(k, v, kv_mask)
        self.check_decode(k, k, v, kv_mask=kv_mask)  # type: ignore[attr-defined]
        return KVCache.from_context(k, v, kv_mask)

    def step(self, q_t: Tensor, k_t: Tensor, v_t: Tensor, state: KVCache) -> tuple[Tensor, KVCache]:
        """Append (k_t, v_t) to the cache; the new query attends to every cached real key (all are <= it)."""
        return kv_cache_step(self, q_t, k_t, v_t, state)  # type: ignore[arg-type]
