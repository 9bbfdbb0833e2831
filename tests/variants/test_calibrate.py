"""The calibration protocol: it lowers held-out loss, records its budget, and rejects bad input clearly."""
from __future__ import annotations

import pytest
import torch

import variants
from harness.inputs import make_inputs
from variants import build_variant, reference_attention
from variants.calibrate import DEFAULT_LR, CalibrationReport, calibrate


def _local(seed: int, N: int = 64):
    """Rotary-structured inputs (the sweep's "local" distribution), small enough for CPU tests."""
    return make_inputs("local", {"scale": 4.0}, B=2, H=2, N=N, D=16, seed=seed)


def _held_out_mse(attn, batch) -> float:
    with torch.no_grad():
        return float((attn(*batch) - reference_attention(*batch, dtype=torch.float32)).pow(2).mean())


@pytest.mark.parametrize("name,loss", [("distilled", "auto"), ("distilled", "mse"), ("linformer", "auto")])
def test_calibration_lowers_held_out_loss(name, loss):
    torch.manual_seed(0)
    attn = build_variant(name, **({"k": 16, "max_seq_len": 64} if name == "linformer" else {"features": 16}))
    batches = [_local(100 + i) for i in range(3)]
    held_out = _local(0)  # the evaluation seed: never among the calibration batches
    before = _held_out_mse(attn, held_out)
    report = calibrate(attn, batches, steps=30, lr=3e-2, loss=loss)
    assert _held_out_mse(attn, held_out) < 0.8 * before
    assert report.loss_after < report.loss_before
    assert report.loss == ("weight_ce" if (name, loss) == ("distilled", "auto") else "mse")


def test_report_records_the_budget_and_is_deterministic_for_a_seed():
    reports = []
    for _ in range(2):
        torch.manual_seed(0)
        attn = build_variant("distilled", features=8)
        reports.append(calibrate(attn, iter([_local(1, N=32), _local(2, N=48)]), steps=7, lr=0.02, causal=True))
    r = reports[0]
    assert isinstance(r, CalibrationReport)
    assert (r.variant, r.learnable, r.steps, r.lr, r.seq_len, r.batches, r.causal, r.teacher) == (
        "distilled", True, 7, 0.02, 48, 2, True, "exact"
    )
    assert r.wall_s > 0 and set(r.to_dict()) >= {"loss_before", "loss_after", "steps", "lr", "seq_len", "wall_s"}
    assert reports[1].loss_after == r.loss_after


def test_a_non_learnable_variant_returns_at_once():
    attn = build_variant("dense")
    report = calibrate(attn, [], steps=100)  # not even the (empty) batches are looked at
    assert (report.learnable, report.steps, report.loss_before, report.loss) == (False, 0, None, None)


def test_a_variant_teacher_works_with_mse():
    torch.manual_seed(0)
    attn = build_variant("distilled", features=8)
    report = calibrate(attn, [_local(3)], steps=3, teacher=build_variant("dense"))
    assert (report.loss, report.teacher) == ("mse", "dense")  # dense exposes no attention_weights


def test_calibrate_is_exported_from_the_package():
    assert variants.calibrate is calibrate
    assert variants.CalibrationReport is CalibrationReport
    assert DEFAULT_LR > 0


@pytest.mark.parametrize(
    "batches,kwargs,error,match",
    [
        ([], {}, ValueError, r"batches is empty: calibrate needs at least one \(q, k, v\) batch"),
        (
            [(torch.zeros(1, 2, 8, 4),) * 3, (torch.zeros(1, 2, 8, 4), torch.zeros(1, 3, 8, 4), torch.zeros(1, 3, 8, 4))],
            {},
            ValueError,
            r"batch 1: k and v have H_kv=3 heads, which does not divide the H=2 query heads "
            r"\(got q \(1, 2, 8, 4\), k \(1, 3, 8, 4\)\)",
        ),
        ([torch.zeros(1, 2, 8, 4)], {}, TypeError, r"batch 0 must be a \(q, k, v\) tuple of tensors, got a Tensor of shape \(1, 2, 8, 4\)"),
        (torch.zeros(3, 1, 2, 8, 4), {}, TypeError, r"batches must be a list or iterable of \(q, k, v\) tuples, got Tensor"),
        ([(torch.zeros(1, 2, 8, 4),) * 3], {"steps": -1}, ValueError, r"steps must be >= 0, got -1"),
        ([(torch.zeros(1, 2, 8, 4),) * 3], {"lr": 0.0}, ValueError, r"lr must be > 0, got 0.0"),
        ([(torch.zeros(1, 2, 8, 4),) * 3], {"loss": "ce"}, ValueError, r"loss must be one of 'auto', 'weight_ce', 'mse', got 'ce'"),
    ],
)
def test_bad_input_names_what_was_given_and_expected(batches, kwargs, error, match):
    attn = build_variant("distilled", features=4)
    kwargs = {"steps": 1, **kwargs}
    with pytest.raises(error, match=match):
        calibrate(attn, batches, **kwargs)


def test_weight_ce_needs_attention_weights_on_both_sides():
    batch = [_local(4, N=16)]
    with pytest.raises(ValueError, match=r"loss='weight_ce' needs the variant to expose attention_weights"):
        calibrate(build_variant("linformer", k=4, max_seq_len=64), batch, steps=1, loss="weight_ce")
    with pytest.raises(ValueError, match=r"loss='weight_ce' needs the teacher to expose attention_weights"):
        calibrate(build_variant("distilled"), batch, steps=1, loss="weight_ce", teacher=build_variant("dense"))
