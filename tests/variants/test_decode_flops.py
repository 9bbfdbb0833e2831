"""decode_step_flops: the FLOPs of one decode step, by value on hand-made shapes, and registry-wide against what
torch.utils.flop_counter sees a step run.

A KV cache's step (dense, chunked) is the forward of one query over all context + 1 keys; sliding_window's attends to
its ring's slots; distilled's and window_linear's add one key to running sums and read them, whatever the context.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from tests.variants.test_flops import CPU_SDPA_FLOPS
from variants import build_variant, get_variant, list_variants

DECODING = [name for name in list_variants() if get_variant(name).cls.capabilities.decode]


def test_dense_counts_one_query_over_the_context_and_its_own_key():
    """q k^T and p v over context + 1 keys: 2 * 2 * (context + 1) * D per query head (K/V heads change no FLOP)."""
    B, H, context, D = 1, 2, 7, 4
    expected = 4 * B * H * (context + 1) * D  # 256
    assert expected == 256
    dense = build_variant("dense")
    assert dense.decode_step_flops(B, H, context, D) == expected
    assert dense.decode_step_flops(B, H, context, D, H_kv=1) == expected
    assert dense.decode_step_flops(3, H, 99, D) == 4 * 3 * H * 100 * D


def test_sliding_window_counts_every_slot_of_its_ring():
    """ring_step's SDPA scores all sinks + window slots (masked, not skipped), whatever the context."""
    B, H, D = 2, 3, 8
    attn = build_variant("sliding_window", window=5, sinks=2)
    for context in (1, 7, 1000):
        assert attn.decode_step_flops(B, H, context, D, H_kv=1) == 4 * B * H * D * (2 + 5)  # 1344
    assert build_variant("sliding_window", window=5).decode_step_flops(1, 1, 50, 4) == 4 * 4 * 5


def test_distilled_counts_one_key_into_the_sums_and_one_query_reading_them():
    """B=1, H=4, H_kv=2, D=8, F=3 (2F = 6 features): per K/V head phi(k_t) 2*D*F = 48 and phi(k_t) v_t^T 2*2F*D = 96;
    per query head phi(q_t) 48, phi(q_t) @ kv 96 and phi(q_t) . z 2*2F = 12."""
    attn = build_variant("distilled", features=3)
    expected = 2 * (48 + 96) + 4 * (48 + 96 + 12)  # 912
    assert expected == 912
    for context in (0, 5, 100_000):
        assert attn.decode_step_flops(1, 4, context, 8, H_kv=2) == expected
    assert attn.decode_step_flops(2, 4, 9, 8) == 2 * (4 * (48 + 96) + 4 * (48 + 96 + 12))  # H_kv defaults to H


def test_window_linear_counts_its_ring_softmax_and_the_key_leaving_it():
    """B=1, H=4, H_kv=2, D=8, F=3, window=5: per K/V head phi of the leaving key 48 and its phi(k) v^T 96; per query
    head phi(q) 48, its read of the sums 96 + 12, and q k^T and the weights @ v over the 5 ring slots 4*5*8 = 160."""
    attn = build_variant("window_linear", features=3, window=5)
    expected = 2 * (48 + 96) + 4 * (48 + 96 + 12 + 160)  # 1552
    assert expected == 1552
    for context in (0, 5, 100_000):
        assert attn.decode_step_flops(1, 4, context, 8, H_kv=2) == expected


@pytest.mark.parametrize("name", DECODING)
def test_decode_step_flops_is_a_positive_int_and_covers_the_steps_matmuls(name):
    """Every decoding variant: decode_step_flops is a positive int, and one eager step (small_config, GQA) runs at least
    the matmuls FlopCounterMode sees and at most twice them (an outer product summed in place, phi(k) v^T by addcmul,
    is work FlopCounterMode does not count); within the variant's flops_tolerance when its step is all matmuls."""
    B, H, H_kv, D, context = 1, 4, 2, 16, 40
    torch.manual_seed(0)
    attn = build_variant(name, **get_variant(name).cls.small_config)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, context + 1, D, generator=g)
    k, v = (torch.randn(B, H_kv, context + 1, D, generator=g) for _ in range(2))
    with torch.no_grad():
        state = attn.init_state(k[:, :, :context], v[:, :, :context])
        with FlopCounterMode(display=False, custom_mapping=CPU_SDPA_FLOPS) as counter:
            attn.step(q[:, :, context:], k[:, :, context:], v[:, :, context:], state)
    declared = attn.decode_step_flops(B, H, context, D, H_kv=H_kv)
    assert isinstance(declared, int) and declared > 0
    counted = counter.get_total_flops()
    if counted == 0:
        pytest.skip("the step's work is invisible to FlopCounterMode (a compiled kernel)")
    tolerance = 1 + attn.flops_tolerance
    assert counted / tolerance <= declared <= 2 * counted * tolerance, (counted, declared)
