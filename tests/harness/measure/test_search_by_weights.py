"""A float32 search scores a value by the variant's attention weights on the sampled rows, not by the N-row call.

Registry-wide like the weights contract: for every variant that gives weights, weights_accuracy's scores are the
scores check_accuracy gives its call, so the search's answer is the one the call would give.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import harness.measure.accuracy as accuracy
from harness.measure import MeasureSettings, RunInfo, measure_cell
from harness.measure.accuracy import check_accuracy, weights_accuracy
from tests.harness.measure.test_tuning import matched
from tests.variants.test_contract import _build, _cases, _padding_mask
from tests.variants.test_weights_contract import H, N, _qkv
from variants import get_variant

RUN = RunInfo(run_id="test", device_name="cpu", host="h", threads=torch.get_num_threads())
FAST = MeasureSettings(
    time_budget_s=0.01, repeats=2, error_rows=32, calibration_steps=2, calibration_batches=2, calibration_max_seq_len=64
)


@pytest.mark.parametrize("name,backend", _cases())
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "padded"])
def test_the_weights_score_a_value_as_its_call_does(name, backend, causal, padded):
    attn = _build(name, backend).eval()
    q, k, v = _qkv(2 if get_variant(name).cls.capabilities.gqa else H)  # the weights contract's inputs
    mask = _padding_mask(N) if padded else None
    if attn.not_supported_reasons(q, k, v, causal=causal, kv_mask=mask, training=False):
        pytest.skip("declared unsupported")
    common = {"causal": causal, "error_rows": 12, "seed": 3, "kv_mask": mask}  # 12 of the N = 37 rows
    by_weights = weights_accuracy(attn, q, k, v, **common)
    if by_weights is None:
        pytest.skip(f"{name} declines to give its attention weights: its search calls it")
    by_call = check_accuracy(attn, q, k, v, training=False, weights=False, **common)
    assert torch.equal(by_weights.rows, by_call.rows)  # the same sampled rows
    for field in ("rel_l2_error", "cosine", "max_abs_error"):
        assert by_weights.fields[field] == pytest.approx(by_call.fields[field], rel=1e-3, abs=1e-5), field


def test_a_float32_search_never_calls_the_variant_and_a_bfloat16_one_does(monkeypatch):
    """Counted: check_accuracy (the N-row call) runs in a float32 search only for the measured cell's own check."""
    calls = []
    real = accuracy.check_accuracy
    monkeypatch.setattr(accuracy, "check_accuracy", lambda *a, **k: calls.append(a[1].shape) or real(*a, **k))
    row = measure_cell(matched("sliding_window", 0.1), FAST, RUN).to_dict()
    assert row["status"] == "ok", row["reason"]
    assert len(row["tuning"]["tried"]) >= 2 and calls == []  # values were scored, none by calling the variant
    half = dataclasses.replace(matched("sliding_window", 0.1), dtype="bfloat16")
    row = measure_cell(half, FAST, RUN).to_dict()
    assert row["status"] == "ok", row["reason"]
    tried = row["tuning"]["tried"]
    assert len(tried) >= 2 and len(calls) >= len(tried)  # bfloat16: the call's rounding is part of the error
