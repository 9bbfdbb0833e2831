"""Baselines beside every error: uniform attention's and a zero output's errors on the cell's own inputs and rows."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from harness.measure import MeasureSettings, RunInfo, measure_cell
from harness.schema import Cell

RUN = RunInfo(run_id="test", device_name="cpu", host="h", threads=torch.get_num_threads())
FAST = MeasureSettings(time_budget_s=0.01, repeats=2, error_rows=24)


def _cell(variant: str, **changes) -> Cell:
    base = Cell(
        variant=variant, config={}, seq_len=96, kv_len=96, batch=2, heads=4, head_dim=16, dtype="float32",
        device="cpu", causal=False, mode="forward", inputs="llm", seed=3,
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


@pytest.fixture
def uniform_variant(monkeypatch):
    """A plugin that answers uniform attention itself: the mean of v over the keys each query may see."""
    from variants import AttentionVariant, VariantConfig, _registry, list_variants, register_variant

    list_variants()  # the built-ins registered first, so the copy below holds them

    class MeanOfV(AttentionVariant):
        def forward(self, q, k, v, *, causal=False, kv_mask=None):
            N, M = q.shape[2], k.shape[2]
            seen = torch.ones(q.shape[0], 1, N, M, dtype=torch.bool)
            if causal:
                seen = seen & torch.ones(N, M, dtype=torch.bool).tril()
            if kv_mask is not None:
                seen = seen & kv_mask[:, None, None, :]
            weights = seen.to(v.dtype) / seen.sum(-1, keepdim=True).clamp_min(1)
            return weights @ v.repeat_interleave(q.shape[1] // k.shape[1], dim=1)

    monkeypatch.setattr(_registry, "_REGISTRY", dict(_registry._REGISTRY))
    register_variant("t_mean_of_v", config=VariantConfig)(MeanOfV)
    return "t_mean_of_v"


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("padding", [0.0, 0.25])
def test_the_uniform_baseline_is_what_a_mean_of_v_variant_scores(uniform_variant, causal, padding):
    row = measure_cell(_cell(uniform_variant, causal=causal, padding=padding), FAST, RUN).to_dict()
    assert row["status"] == "ok", row["reason"]
    assert row["rel_l2_error"] == pytest.approx(row["uniform_rel_l2_error"], rel=1e-6)
    assert row["cosine"] == pytest.approx(row["uniform_cosine"], rel=1e-6)
    assert row["zero_rel_l2_error"] == pytest.approx(1.0)


def test_exact_attention_is_far_below_the_baselines_and_gaussian_is_near_uniform():
    dense = measure_cell(_cell("dense"), FAST, RUN).to_dict()
    assert dense["status"] == "ok", dense["reason"]
    assert dense["rel_l2_error"] < 1e-5 < 0.3 < dense["uniform_rel_l2_error"]
    gaussian = measure_cell(_cell("dense", inputs="gaussian", seq_len=512, kv_len=512), FAST, RUN).to_dict()
    assert 0.7 < gaussian["uniform_rel_l2_error"] < 0.9  # sqrt(1 - 1/e) = 0.795 in the limit (issue 23)


def test_an_unreachable_cell_keeps_its_baselines():
    from variants import build_config

    cell = _cell("linformer", matched_budget=1e-6, error_metric="rel_l2", config=build_config("linformer").to_dict())
    row = measure_cell(cell, MeasureSettings(time_budget_s=0.01, repeats=2, error_rows=24, calibration_steps=2,
                                             calibration_batches=2, calibration_max_seq_len=64), RUN).to_dict()  # fmt: skip
    assert row["status"] == "unreachable" and row["uniform_rel_l2_error"] > 0
