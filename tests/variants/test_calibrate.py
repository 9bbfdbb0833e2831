"""The calibration protocol: it lowers held-out loss, records its budget, and rejects bad input clearly."""

from __future__ import annotations

import importlib

import pytest
import torch

import variants
from harness.inputs import make_inputs
from variants import attention_weights, build_variant, reference_attention
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
        "distilled",
        True,
        7,
        0.02,
        48,
        2,
        True,
        "exact",
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
    report = calibrate(attn, [_local(3)], steps=3, teacher=_plain_teacher)
    assert (report.loss, report.teacher) == ("mse", "function")  # a plain callable exposes no attention_weights
    report = calibrate(attn, [_local(3)], steps=3, teacher=build_variant("dense"))
    assert (report.loss, report.teacher) == ("weight_ce", "dense")  # dense's weights are exact softmax weights


def _plain_teacher(q, k, v, *, causal=False):
    return reference_attention(q, k, v, causal=causal, dtype=torch.float32)


def test_calibrate_is_exported_from_the_package():
    assert variants.calibrate is calibrate
    assert variants.CalibrationReport is CalibrationReport
    assert DEFAULT_LR > 0


@pytest.mark.parametrize(
    "batches,kwargs,error,match",
    [
        ([], {}, ValueError, r"batches is empty: calibrate needs at least one \(q, k, v\) batch"),
        (
            [
                (torch.zeros(1, 2, 8, 4),) * 3,
                (torch.zeros(1, 2, 8, 4), torch.zeros(1, 3, 8, 4), torch.zeros(1, 3, 8, 4)),
            ],
            {},
            ValueError,
            r"batch 1: k and v have H_kv=3 heads, which does not divide the H=2 query heads "
            r"\(got q \(1, 2, 8, 4\), k \(1, 3, 8, 4\)\)",
        ),
        (
            [torch.zeros(1, 2, 8, 4)],
            {},
            TypeError,
            r"batch 0 must be a \(q, k, v\) tuple of tensors, got a Tensor of shape \(1, 2, 8, 4\)",
        ),
        (
            torch.zeros(3, 1, 2, 8, 4),
            {},
            TypeError,
            r"batches must be a list or iterable of \(q, k, v\) tuples, got Tensor",
        ),
        ([(torch.zeros(1, 2, 8, 4),) * 3], {"steps": -1}, ValueError, r"steps must be >= 0, got -1"),
        ([(torch.zeros(1, 2, 8, 4),) * 3], {"lr": 0.0}, ValueError, r"lr must be > 0, got 0.0"),
        (
            [(torch.zeros(1, 2, 8, 4),) * 3],
            {"loss": "ce"},
            ValueError,
            r"loss must be one of 'auto', 'weight_ce', 'mse', got 'ce'",
        ),
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
        calibrate(build_variant("distilled"), batch, steps=1, loss="weight_ce", teacher=_plain_teacher)


class _TemperedTeacher:
    """Exact attention with q scaled (at temperature 1/q_scale): a teacher that is not the default one."""

    def __init__(self, q_scale: float):
        self.q_scale = q_scale
        self.name = f"exact_q_times_{q_scale}"

    def __call__(self, q, k, v, *, causal=False):
        return reference_attention(q * self.q_scale, k, v, causal=causal, dtype=torch.float32)

    def attention_weights(self, q, k, *, causal=False, kv_mask=None):
        return attention_weights(q * self.q_scale, k, causal=causal, kv_mask=kv_mask, dtype=torch.float32)


def _mse(a, b) -> float:
    return float((a.float() - b.float()).pow(2).mean())


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("loss", ["weight_ce", "mse"])
def test_the_reported_loss_is_the_loss_against_the_given_teacher(loss, causal):
    """steps=0 measures only: loss_before is the formula against the teacher, not against exact attention."""
    torch.manual_seed(0)
    attn = build_variant("distilled", features=8)
    batches = [_local(10, N=32), _local(11, N=32)]
    teacher = _TemperedTeacher(2.0)
    report = calibrate(attn, batches, steps=0, teacher=teacher, loss=loss, causal=causal)
    assert (report.loss, report.teacher, report.causal) == (loss, "exact_q_times_2.0", causal)
    with torch.no_grad():
        if loss == "weight_ce":  # Hedgehog's -sum_j A_ij log A'_ij, averaged over rows

            def formula(q, k, v, want):
                got = attn.attention_weights(q, k, causal=causal)
                return float(-(want * got.clamp_min(1e-12).log()).sum(-1).mean())

            wants = [teacher.attention_weights(q, k, causal=causal) for q, k, _ in batches]
            exact = [attention_weights(q, k, causal=causal, dtype=torch.float32) for q, k, _ in batches]
        else:

            def formula(q, k, v, want):
                return _mse(attn(q, k, v, causal=causal), want)

            wants = [teacher(q, k, v, causal=causal) for q, k, v in batches]
            exact = [reference_attention(q, k, v, causal=causal, dtype=torch.float32) for q, k, v in batches]
        against_teacher = sum(formula(*b, w) for b, w in zip(batches, wants)) / len(batches)
        against_exact = sum(formula(*b, w) for b, w in zip(batches, exact)) / len(batches)
    # The same float32 sums in another order agree to ~1e-6; the two targets differ by >= 1e-3
    # relative (the cross-entropy of a near-uniform student moves little with the target: ~1e-2).
    assert report.loss_before == pytest.approx(against_teacher, rel=1e-5)
    assert abs(against_exact - against_teacher) > 1e-3 * against_teacher
    assert report.loss_after == pytest.approx(report.loss_before, rel=1e-6)  # no step taken


def test_the_student_moves_to_its_teacher_not_to_exact_attention():
    """A flatter teacher (exact attention at temperature 2; the mse path, as for any output-only teacher).

    Fitting halves the held-out distance to the teacher (0.0086 -> 0.0038) and ends 8x closer to
    it than to exact attention (0.030); a fit against exact attention instead moves towards exact.
    """
    torch.manual_seed(0)
    attn = build_variant("distilled", features=16)
    teacher = _TemperedTeacher(0.5)
    batches = [_local(100 + i) for i in range(3)]
    held_out = _local(0)

    def distances() -> tuple[float, float]:
        with torch.no_grad():
            out = attn(*held_out)
            return _mse(out, teacher(*held_out)), _mse(out, reference_attention(*held_out, dtype=torch.float32))

    before, _ = distances()
    report = calibrate(attn, batches, steps=30, lr=3e-2, teacher=teacher, loss="mse")
    to_teacher, to_exact = distances()
    assert (report.loss, report.teacher) == ("mse", "exact_q_times_0.5")
    assert to_teacher < 0.6 * before
    assert to_teacher < 0.25 * to_exact


def test_weight_ce_scores_sampled_rows_never_n_by_m():
    """Above `rows` query rows, each step's weights are rows x M (counted), and the fit still lowers the loss."""
    torch.manual_seed(0)
    attn = build_variant("distilled", features=16)
    shapes = []
    real = attn.attention_weights

    def counted(q, k, *, causal=False, kv_mask=None, rows=None):
        out = real(q, k, causal=causal, kv_mask=kv_mask, rows=rows)
        shapes.append(tuple(out.shape[2:]))
        return out

    attn.attention_weights = counted
    report = calibrate(attn, [_local(40, N=96), _local(41, N=96)], steps=6, rows=24, causal=True)
    assert shapes and set(shapes) == {(24, 96)}
    assert report.loss_after < report.loss_before


def test_held_out_batches_stop_the_fit_and_give_both_errors(monkeypatch):
    """With held-out batches the report has both errors; a fit whose held-out error stops improving stops early and
    keeps its best parameters (the held-out error it reports is the best one seen)."""
    module = importlib.import_module("variants.calibrate")  # the package exports the function under this name

    torch.manual_seed(0)
    attn = build_variant("distilled", features=8)
    batches, held = [_local(50 + i) for i in range(3)], [_local(60), _local(61)]
    monkeypatch.setattr(module, "EVAL_EVERY", 1)
    report = calibrate(attn, batches, steps=400, lr=0.3, heldout=held)  # a large rate: the held-out error turns
    assert report.heldout_batches == 2 and report.stopped_early and report.steps < 400
    assert 0 < report.train_error < 2 and 0 < report.heldout_error < 2
    without = calibrate(build_variant("distilled", features=8), batches, steps=3)
    assert (without.heldout_error, without.heldout_batches, without.stopped_early) == (None, 0, False)
    assert without.steps == 3 and without.train_error > 0


@pytest.mark.parametrize("name, config", [("distilled", {"features": 8}), ("window_linear", {"window": 32})])
def test_above_error_rows_the_errors_are_sampled_rows_and_no_check_calls_the_variant(name, config, monkeypatch):
    """Counted: at N > ERROR_ROWS a weight_ce fit never runs the N-row call (its errors are the weights on ERROR_ROWS
    fixed rows applied to v), and those errors track the whole output's."""
    module = importlib.import_module("variants.calibrate")
    torch.manual_seed(0)
    attn = build_variant(name, **config)
    N = 2 * module.ERROR_ROWS
    batches, held = [_local(90 + i, N=N) for i in range(2)], [_local(95, N=N), _local(96, N=N)]
    calls = []
    real = type(attn).forward
    monkeypatch.setattr(type(attn), "forward", lambda self, *a, **k: calls.append(a[0].shape[2]) or real(self, *a, **k))
    report = calibrate(attn, batches, steps=6, heldout=held, causal=True)
    monkeypatch.undo()  # the whole-output errors below call it
    assert report.loss == "weight_ce" and calls == []
    with torch.no_grad():
        whole = [
            float((attn(*b, causal=True) - reference_attention(*b, causal=True, dtype=torch.float32)).norm())
            / float(reference_attention(*b, causal=True, dtype=torch.float32).norm())
            for b in held
        ]
    assert report.heldout_error == pytest.approx(sum(whole) / len(whole), rel=0.15)


def test_a_fit_that_cannot_reach_its_target_stops_at_the_first_evaluations():
    """A target far below what a few steps gain (an unreachable budget) stops the fit early; a reachable one does not."""
    torch.manual_seed(0)
    batches, held = [_local(70 + i) for i in range(3)], [_local(80)]
    hopeless = calibrate(build_variant("distilled", features=8), batches, steps=60, heldout=held, target=1e-4)
    assert hopeless.stopped_early and hopeless.steps <= 20
    reachable = calibrate(build_variant("distilled", features=8), batches, steps=60, heldout=held, target=10.0)
    assert reachable.steps > hopeless.steps


@pytest.mark.parametrize(
    "name, config, N, cap, length",
    [
        ("distilled", {}, 8192, 256, 256),  # one fit per series at the cap
        ("distilled", {}, 128, 256, 128),
        ("linformer", {}, 8192, 256, 8192),  # E, F have a column per position
        ("window_linear", {"window": 87}, 512, 256, 256),
        ("window_linear", {"window": 533}, 2048, 256, 1066),  # the cap would leave no key beyond the window
        ("window_linear", {"window": 2332}, 4096, 256, 4096),
    ],
)
def test_the_calibration_length_leaves_the_learned_part_something_to_learn(name, config, N, cap, length):
    from harness.measure import MeasureSettings
    from harness.measure.calibration import calibration_length
    from harness.schema import Cell
    from variants import build_config, get_variant

    cell = Cell(
        variant=name, config=build_config(name, **config).to_dict(), seq_len=N, kv_len=N, batch=1, heads=2,
        head_dim=16, dtype="float32", device="cpu", inputs="llm", seed=0, causal=False, mode="forward",
    )  # fmt: skip
    settings = MeasureSettings(calibration_max_seq_len=cap)
    assert calibration_length(get_variant(name).cls, cell, settings) == length
    if name == "window_linear":
        assert length >= min(N, 2 * config["window"])  # at least as many keys beyond the window as in it
