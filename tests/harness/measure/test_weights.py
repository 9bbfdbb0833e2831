"""The weight metric: recall of the exact top-k keys on the rows the accuracy check samples (harness.measure.reference)."""

from __future__ import annotations

import torch

from harness.measure.accuracy import check_accuracy
from harness.measure.reference import TOP_K, _hits
from variants import AttentionVariant, build_variant


def _qkv(N=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, 2, N, 16, generator=g) * 2 for _ in range(3)]


def _recall(attn, causal=False):
    q, k, v = _qkv()
    return check_accuracy(attn, q, k, v, causal=causal, training=False, error_rows=16, seed=0).fields["topk_recall"]


def test_exact_attention_recalls_every_top_key_and_a_narrow_window_misses_some():
    assert _recall(build_variant("dense")) == 1.0 and _recall(build_variant("dense"), causal=True) == 1.0
    window = _recall(build_variant("sliding_window", window=4))  # 7 of 64 keys: the far top keys are outside
    assert 0 < window < 0.5


def test_a_variant_that_declines_gives_no_recall():
    class Plain(AttentionVariant):
        def forward(self, q, k, v, *, causal=False, kv_mask=None):
            return q * 0

    assert _recall(Plain()) is None


def test_a_row_seeing_fewer_keys_than_k_counts_only_those_and_ranks_count_not_values():
    exact = torch.zeros(1, 1, 2, 20, dtype=torch.float64)
    exact[0, 0, 0, :3] = torch.tensor([0.5, 0.3, 0.2])  # row 0 sees 3 keys
    exact[0, 0, 1] = torch.linspace(1, 0.1, 20)  # row 1: the top keys are 0..TOP_K-1
    mine = exact.clone()
    mine[0, 0, 1, TOP_K - 1], mine[0, 0, 1, TOP_K] = -5.0, 5.0  # one top key swapped out (signed weights rank too)
    hits, total = _hits(mine, exact, torch.ones(1, 2, dtype=torch.bool))
    assert (hits, total) == (3 + TOP_K - 1, 3 + TOP_K)
