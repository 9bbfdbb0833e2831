"""sliding_window's decode state: the first `sinks` keys plus a ring buffer of the last `window` keys.

The state's size depends on sinks + window only, never on how many tokens were seen, so its
state_bytes stay constant in N. Positions count from the start of the context, padded slots
included (as in the forward's band).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar

import torch
from torch import Tensor

from variants._gqa import sdpa


@dataclass
class SlidingWindowState:
    """Slots [0, S) hold the sink positions 0..S-1; slot S + p % W holds position p of the band."""

    # the fields holding keys and values: a harness may store them quantized between steps (harness.measure.kv_quant)
    kv_fields: ClassVar[tuple[str, ...]] = ("k", "v")
    k: Tensor  # (B, H_kv, S + W, D)
    v: Tensor  # (B, H_kv, S + W, D)
    pos: Tensor  # (S + W,) int64: the position each slot holds, -1 = empty
    real: Tensor  # (B, S + W) bool: the slot holds a real (unpadded) token
    length: int  # tokens seen so far: the position the next token takes
    window: int  # W, the band: a query at p sees p - W < j <= p
    sinks: int  # S, keys 0..S-1 visible to every later query
    padded: bool = True  # some slot may hold a padded token (False: the context had no padding, no mask needed)

    def written_rows(self) -> list[int]:
        """The slots the last step wrote (position p = length - 1's band slot, and its sink slot while p < sinks): what
        a quantized store of k, v writes back."""
        p = self.length - 1
        return [self.sinks + p % self.window] + ([p] if p < self.sinks else [])


def ring_from_context(k: Tensor, v: Tensor, kv_mask: Tensor | None, window: int, sinks: int) -> SlidingWindowState:
    """The state after the context k, v (B, H_kv, N, D): its sinks and its last `window` tokens."""
    B, Hkv, N, D = k.shape
    S, W = sinks, window
    state = SlidingWindowState(
        k=k.new_zeros(B, Hkv, S + W, D),
        v=v.new_zeros(B, Hkv, S + W, D),
        pos=torch.full((S + W,), -1, dtype=torch.long, device=k.device),
        real=torch.zeros(B, S + W, dtype=torch.bool, device=k.device),
        length=N,
        window=W,
        sinks=S,
        padded=kv_mask is not None and not bool(kv_mask.all()),
    )
    real = torch.ones(B, N, dtype=torch.bool, device=k.device) if kv_mask is None else kv_mask
    positions = torch.arange(N, device=k.device)
    for keep, slots in (
        (positions[: min(S, N)], positions[: min(S, N)]),
        (positions[max(0, N - W) :], S + positions[max(0, N - W) :] % W),
    ):
        kept = real[:, None, keep, None]  # (B, 1, L, 1): a padded token is stored as zeros, so no step reads its values
        state.k[:, :, slots] = torch.where(kept, k[:, :, keep], 0.0)
        state.v[:, :, slots] = torch.where(kept, v[:, :, keep], 0.0)
        state.pos[slots] = keep
        state.real[:, slots] = real[:, keep]
    return state


def over_slots(q_t: Tensor, k: Tensor, v: Tensor, keep: Tensor | None) -> Tensor:
    """q_t (B, H, 1, D) over a ring's slots k, v (B, H_kv, S + W, D) that keep (B, S + W) marks (None: all), by SDPA."""
    return sdpa(q_t, k, v, attn_mask=None if keep is None else keep[:, None, None, :])


def ring_step(
    q_t: Tensor, k_t: Tensor, v_t: Tensor, state: SlidingWindowState, attend: Callable[..., Tensor] = over_slots
) -> Tensor:
    """Write the token at position p = state.length in place, then attend q_t (B, H, 1, D) to its sinks and band
    (`attend`: over_slots, or a step that runs the same call by a kernel).

    From p >= S + W - 1 on every slot is filled and every sink lies outside the band, so all slots are visible: the
    mask is then only the padding (`real`, a view), or none at all when the context had no padding.
    """
    p, S, W = state.length, state.sinks, state.window
    slots = [S + p % W] + ([p] if p < S else [])  # a sink position is also in the band for a while
    for slot in slots:
        state.k[:, :, slot] = k_t[:, :, 0]
        state.v[:, :, slot] = v_t[:, :, 0]
        state.pos[slot] = p
        if state.padded:
            state.real[:, slot] = True
    state.length = p + 1
    if p >= S + W - 1:  # steady: every slot visible
        return attend(q_t, state.k, state.v, state.real if state.padded else None)  # keep: (B, S + W) or None
    if not state.padded:
        state.real[:, slots] = True
    filled = state.pos >= 0
    # Ring slots hold p - W < j <= p by construction; a sink counts only outside the band (no key twice).
    is_sink = torch.arange(S + W, device=q_t.device) < S
    visible = filled & (~is_sink | (state.pos <= p - W))  # (S + W,)
    keep = state.real & visible  # (B, S + W)
    return attend(q_t, state.k, state.v, keep)  # (B, H, 1, D); the token itself is always visible
