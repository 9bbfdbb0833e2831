"""A layer cell's FLOPs by value: an L-block stack counts L blocks' attention and L blocks' projections and MLP, each
written out from the block's shapes (FlashAttention's 4 B H N^2 D, causal half; matmuls 2 per multiply-add; train
3.5x the attention and 3x the matmuls)."""

from __future__ import annotations

import pytest
import torch

from harness.measure.layer import LayerPhase, mlp_width
from harness.measure.settings import MeasureSettings
from harness.schema import Cell

B, H, HKV, N, D = 2, 4, 2, 32, 8


def _phase(depth: int, mode: str, causal: bool) -> LayerPhase:
    from variants import build_config, build_variant

    cell = Cell(
        variant="dense",
        config=build_config("dense").to_dict(),
        seq_len=N,
        kv_len=N,
        batch=B,
        heads=H,
        kv_heads=HKV,
        head_dim=D,
        dtype="float32",
        device="cpu",
        inputs="gaussian",
        causal=causal,
        mode=mode,
        seed=0,
        scope="layer",
        layer_depth=depth,
    )
    q = torch.randn(B, H, N, D)
    phase = LayerPhase(build_variant("dense"), cell, q, None, MeasureSettings(), torch.device("cpu"))
    phase.prepare()
    return phase


def _one_block(causal: bool) -> tuple[int, int]:
    """(attention, matmul) forward FLOPs of one block, from its shapes."""
    E, F = H * D, mlp_width(H * D)
    attention = 4 * B * H * N * N * D // (2 if causal else 1)
    weights = E * E + 2 * E * HKV * D + E * E + 3 * E * F  # wq, wk, wv (H_kv heads), wo; w1, w3, w2
    return attention, 2 * B * N * weights


@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("mode", ["forward", "train"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_a_stack_counts_every_blocks_flops(depth, mode, causal):
    attention, matmul = _one_block(causal)
    if mode == "train":
        expected = depth * int(3.5 * attention) + 3 * depth * matmul
    else:
        expected = depth * (attention + matmul)
    flops = _phase(depth, mode, causal).flops(0.5)
    assert flops.flops == expected and flops.useful_flops == expected  # dense executes only useful work
    assert flops.tflops == pytest.approx(expected / 0.5 / 1e12, rel=1e-12)
