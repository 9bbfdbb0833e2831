"""Decode state bytes by value: counted from the state's tensors (each storage once, a cache's capacity, its live
views), and a decode row's state and bytes moved written out from B, H_kv, N, D and the dtype's size, padded or not."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import torch

from harness.measure.decode import full_mask
from tests.harness.measure.test_axes import D, H, cell, run
from variants import live_state_bytes, state_bytes


@dataclass
class _State:
    cache: torch.Tensor
    extra: dict


class _Cache:
    def __init__(self, capacity: torch.Tensor, length: int):
        self.capacity, self.length = capacity, length

    def live_tensors(self):
        return [self.capacity[:, :, : self.length]]


def test_state_bytes_count_each_storage_once_through_containers():
    a = torch.zeros(2, 3, 10, 4)  # 960 bytes
    view = a[:, :, :5]  # the same storage: not counted again
    b = torch.zeros(7, dtype=torch.bfloat16)  # 14 bytes
    state = _State(a, {"k": [view, (b,)], "n": 3})
    assert state_bytes(state) == 2 * 3 * 10 * 4 * 4 + 7 * 2
    cache = _Cache(torch.zeros(1, 2, 16, 8), length=5)  # capacity 16 tokens, 5 written
    assert state_bytes({"c": cache.capacity}) == 1 * 2 * 16 * 8 * 4
    assert live_state_bytes(cache) == 1 * 2 * 5 * 8 * 4 and live_state_bytes(b) == 14


def test_the_generated_tokens_extend_the_context_mask_as_real():
    mask = torch.tensor([[True, False, True], [False, False, True]])
    full = full_mask(mask, 2)
    assert full.tolist() == [[True, False, True, True, True], [False, False, True, True, True]]
    assert full_mask(None, 2) is None


@pytest.mark.parametrize("dtype, e", [("float32", 4), ("bfloat16", 2)])
@pytest.mark.parametrize("padding", [0.0, 0.25])
def test_a_decode_rows_state_and_bytes_from_its_shape_and_dtype(dtype, e, padding):
    B, Hkv, N = 2, 2, 48
    decode = cell(N=N, phase="decode", causal=True, batch=B, kv_heads=Hkv, padding=padding)
    row = run(dataclasses.replace(decode, dtype=dtype))
    assert row["status"] == "ok", row["reason"]
    live = 2 * B * Hkv * N * D * e  # k and v of the N context tokens: padded ones stay in the cache
    live += B * N if padding else 0  # and the padded context's bool key mask, a byte a position, which a step reads
    assert row["state_live_bytes"] == live
    assert row["state_bytes"] >= live
    assert row["bytes_moved"] == live + 2 * (B * H * D + B * Hkv * D) * e
