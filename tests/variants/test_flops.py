"""flops() and executed_flops() against torch.utils.flop_counter, for every registered variant and CPU backend.

FlopCounterMode counts the matmuls a forward runs; PyTorch does not count its fused CPU SDPA kernel, so
`CPU_SDPA_FLOPS` counts it: q k^T and p v (torch's own sdpa_flop_count, GQA included), halved for is_causal=True
(the kernel skips the tiles above the diagonal, FlashAttention's convention). Each variant declares how close the
count must be (`flops_tolerance`), so a plugin is checked with no test code of its own.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

from variants import build_variant, count_flops, get_variant, list_variants


def _cpu_sdpa(q, k, v, dropout_p=0.0, is_causal=False, *_, out_shape=None, **__) -> int:
    full = sdpa_flop_count(q, k, v)
    return full // 2 if is_causal else full


CPU_SDPA_FLOPS = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: _cpu_sdpa}
UNCOUNTABLE = {"flex": "compiled: FlopCounterMode sees one higher-order op, not its blocks"}
B, H, N, D = 1, 8, 96, 16  # N not a multiple of the variants' blocks and chunks


def _cases() -> list:
    cases = []
    for name in list_variants():
        for backend in get_variant(name).backends or (None,):
            for kv_heads in (H, H // 4, 1):
                for causal in (False, True):
                    label = f"{name}{'' if backend is None else f'[{backend}]'}-kv{kv_heads}-{'causal' if causal else 'full'}"
                    cases.append(pytest.param(name, backend, kv_heads, causal, id=label))
    return cases


def counted_and_declared(
    name: str, backend: str | None, kv_heads: int, causal: bool, *, n: int = N, m: int = N
) -> tuple[int, int, int] | str:
    """(FlopCounterMode's count, executed_flops, flops) of one CPU forward of n queries over m keys, or why it cannot be
    counted."""
    if backend in UNCOUNTABLE:
        return f"backend {backend!r}: {UNCOUNTABLE[backend]}"
    config = dict(get_variant(name).cls.small_config)
    if backend is not None:
        config["backend"] = backend
    torch.manual_seed(0)
    attn = build_variant(name, **config)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, n, D, generator=g)
    k, v = (torch.randn(B, kv_heads, m, D, generator=g) for _ in range(2))
    reasons = attn.not_supported_reasons(q, k, v, causal=causal, training=False)
    if reasons:
        return "declared unsupported: " + "; ".join(reasons)
    with FlopCounterMode(display=False, custom_mapping=CPU_SDPA_FLOPS) as counter, torch.no_grad():
        attn(q, k, v, causal=causal)
    ran = attn.resolve_backend(q, training=False)
    shape = (B, H, n, m, D, causal)
    executed = count_flops(attn, *shape, H_kv=kv_heads, executed=True, backend=ran)
    return counter.get_total_flops(), executed, count_flops(attn, *shape, H_kv=kv_heads)


@pytest.mark.parametrize("name,backend,kv_heads,causal", _cases())
def test_executed_flops_match_what_flop_counter_counts(name, backend, kv_heads, causal):
    result = counted_and_declared(name, backend, kv_heads, causal)
    if isinstance(result, str):
        pytest.skip(result)
    counted, executed, useful = result
    tolerance = 1 + get_variant(name).cls.flops_tolerance
    assert executed / tolerance <= counted <= executed * tolerance, (counted, executed)
    assert 0 < useful <= executed  # the useful work is never more than what runs


@pytest.mark.parametrize("n", [1, N // 4], ids=lambda n: f"n{n}")
@pytest.mark.parametrize("name,backend", [p.values[:2] for p in _cases() if p.id.endswith("-kv2-causal")])
def test_executed_flops_with_a_query_offset_match_what_flop_counter_counts(name, backend, n):
    """Causal n < N queries over N keys (the last n positions): what runs is still what is declared."""
    result = counted_and_declared(name, backend, H // 4, True, n=n, m=N)
    if isinstance(result, str):
        pytest.skip(result)
    counted, executed, useful = result
    tolerance = 1 + get_variant(name).cls.flops_tolerance
    assert executed / tolerance <= counted <= executed * tolerance, (counted, executed)
    assert 0 < useful <= executed


def test_a_plugin_flops_without_h_kv_is_still_counted():
    class Old:
        def flops(self, B, H, N, M, D, causal):
            return B * H * N * M * D

        def executed_flops(self, B, H, N, M, D, causal):
            return 2 * self.flops(B, H, N, M, D, causal)

    assert count_flops(Old(), 1, 2, 3, 4, 5, False, H_kv=1) == 120
    assert count_flops(Old(), 1, 2, 3, 4, 5, False, H_kv=1, executed=True, backend="x") == 240


def test_gqa_shares_the_per_kv_head_work():
    """linformer projects K/V once per K/V head: at H_kv = 1 its projections cost an eighth of H_kv = H's."""
    attn = build_variant("linformer", k=64, max_seq_len=1024)
    full, shared = attn.flops(1, 8, 1024, 1024, 64, False), attn.flops(1, 8, 1024, 1024, 64, False, H_kv=1)
    projections = 4 * 8 * 64 * 1024 * 64
    assert full - shared == projections * 7 // 8


@pytest.mark.parametrize("kv_heads", [H, H // 4, 1])
@pytest.mark.parametrize("causal", [False, True])
def test_sinks_are_counted_in_both_counts(kv_heads, causal):
    attn = build_variant("sliding_window", window=8, sinks=4, backend="banded")
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, N, D, generator=g)
    k, v = (torch.randn(B, kv_heads, N, D, generator=g) for _ in range(2))
    with FlopCounterMode(display=False, custom_mapping=CPU_SDPA_FLOPS) as counter, torch.no_grad():
        attn(q, k, v, causal=causal)
    assert counter.get_total_flops() == attn.executed_flops(B, H, N, N, D, causal, H_kv=kv_heads)
    without = build_variant("sliding_window", window=8, backend="banded")
    assert attn.flops(B, H, N, N, D, causal) > without.flops(B, H, N, N, D, causal)
