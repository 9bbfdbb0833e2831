"""Error-budget search: counted evaluations of the search, and matched cells measured end to end on CPU."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from harness.measure import MeasureContext, MeasureSettings, RunInfo, measure_cell
from harness.measure.tuning import TOLERANCE, knob_range, search_knob
from harness.runner.blocked import unreachable_carries_over
from harness.schema import Cell

RUN = RunInfo(run_id="test", device_name="cpu", host="h", threads=torch.get_num_threads())
FAST = MeasureSettings(
    time_budget_s=0.01, repeats=2, error_rows=32, calibration_steps=2, calibration_batches=2, calibration_max_seq_len=64
)


def counting(error):
    calls = []

    def evaluate(value):
        calls.append(value)
        return error(value)

    return evaluate, calls


@pytest.mark.parametrize("threshold", [16, 17, 100, 333, 4000])
def test_the_search_finds_a_value_within_tolerance_of_the_cheapest_that_meets(threshold):
    evaluate, calls = counting(lambda v: 0.0 if v >= threshold else 1.0)
    found = search_knob(evaluate, 0.5, 16, 4096)
    assert threshold <= found <= max(threshold * TOLERANCE, threshold + 1)
    doubling = math.ceil(math.log2(max(threshold, 16) / 16)) + 1
    assert len(calls) == len(set(calls)) <= 1 + doubling + math.ceil(math.log2(math.log(2) / math.log(TOLERANCE))) + 1


def test_a_budget_the_largest_value_misses_is_unreachable_after_one_evaluation():
    evaluate, calls = counting(lambda v: 0.9)
    assert search_knob(evaluate, 0.1, 16, 512) is None
    assert calls == [512]


def test_a_nan_error_misses_the_budget():
    assert search_knob(lambda v: float("nan"), 0.1, 16, 64) is None


def test_a_second_budget_reuses_the_errors_of_the_first():
    evaluate, calls = counting(lambda v: 1.0 / v)
    tried: dict[int, float] = {}
    first = search_knob(evaluate, 0.01, 16, 1024, tried=tried)
    assert 100 <= first <= 125
    count = len(calls)
    second = search_knob(evaluate, 0.02, 16, 1024, tried=tried)
    assert 50 <= second <= 63
    assert len(calls) - count <= 2  # the doubling points are known: only bisection between 32 and 64 is new


def matched(variant, budget, *, N=128, inputs="local", config=None, metric="rel_l2") -> Cell:
    from variants import build_config

    return Cell(
        variant=variant,
        config=build_config(variant, **(config or {})).to_dict(),
        seq_len=N,
        kv_len=N,
        batch=1,
        heads=2,
        head_dim=16,
        dtype="float32",
        device="cpu",
        causal=False,
        mode="forward",
        inputs=inputs,
        seed=0,
        matched_budget=budget,
        error_metric=metric,
    )


def test_a_matched_sliding_window_is_searched_on_calibration_seeds_and_measured_at_the_window_found(monkeypatch):
    import harness.measure.accuracy as accuracy

    seeds = []
    original = accuracy.make_inputs
    monkeypatch.setattr(accuracy, "make_inputs", lambda *a, **k: seeds.append(k["seed"]) or original(*a, **k))
    row = measure_cell(matched("sliding_window", 0.1), FAST, RUN).to_dict()
    assert row["status"] == "ok", row["reason"]
    assert row["matched_budget"] == 0.1 and row["error_metric"] == "rel_l2"
    window = row["config"]["window"]
    tried = {int(v): e for v, e in row["tuning"]["tried"].items()}
    assert tried[window] <= 0.1 and window < 128
    assert all(e > 0.1 for v, e in tried.items() if v < window)  # nothing cheaper met the budget
    assert row["tuning"]["high"] < 128 // 2  # at most half of dense's FLOPs: a window well below N
    assert row["rel_l2_error"] <= 0.1 * 1.1  # the evaluation seed's error, within the generalisation margin
    assert seeds and 0 not in seeds  # the evaluation seed (0) is never scored by the search
    assert row["tuning_s"] > 0
    assert 0 < row["topk_recall"] <= 1  # the weight metric, on the evaluation seed's sampled rows
    assert Cell.from_dict(row).cell_id == row["cell_id"]  # the knob found is no part of the id: the row reproduces it


def test_a_cosine_budget_is_searched_on_one_minus_cosine():
    row = measure_cell(matched("sliding_window", 0.002, metric="cosine"), FAST, RUN).to_dict()
    assert row["status"] == "ok", row["reason"]
    tried = {int(v): e for v, e in row["tuning"]["tried"].items()}
    assert tried[row["config"]["window"]] <= 0.002
    assert 1 - row["cosine"] <= 0.002 * 1.1


def test_an_unreachable_budget_is_a_row_with_the_error_at_the_top_of_the_range():
    row = measure_cell(matched("linformer", 1e-6, N=256, inputs="gaussian"), FAST, RUN).to_dict()  # H=2, D=16: k 16-64
    assert row["status"] == "unreachable"
    assert (
        row["reason"].startswith("relative L2 error ")
        and "at k 64, the largest doing at most 0.5x dense's FLOPs" in row["reason"]
    )
    assert row["config"]["k"] == 64 and list(row["tuning"]["tried"]) == ["64"]
    assert row["latency_s"] is None and row["rel_l2_error"] is None  # nothing was measured on the evaluation seed


def test_a_learnable_variant_is_calibrated_at_each_value_tried_and_the_match_reuses_that_fit():
    context = MeasureContext()
    row = measure_cell(matched("distilled", 0.95, N=256, inputs="gaussian"), FAST, RUN, context).to_dict()
    assert row["status"] == "ok", row["reason"]
    fitted = {__import__("json").loads(key)["config"]["features"] for key in context.calibrated}
    assert fitted == {int(v) for v in row["tuning"]["tried"]}
    assert row["calibration"]["steps"] == FAST.calibration_steps  # the run's calibration budget, recorded


def test_a_refused_setting_is_unsupported_before_any_search():
    cell = dataclasses.replace(matched("linformer", 0.1, N=64, inputs="gaussian"), causal=True)
    row = measure_cell(cell, FAST, RUN).to_dict()
    assert row["status"] == "unsupported" and "causal" in row["reason"]
    assert row["tuning"] is None


@pytest.mark.parametrize(
    "variant,N,high",
    [
        ("sliding_window", 1024, 300),
        ("sliding_window", 8192, 2399),
        ("linformer", 256, 64),
        ("linformer", 4096, 256),
        ("distilled", 1024, 169),  # the normaliser phi(q).z counted too
        ("distilled", 8192, 512),
    ],
)
def test_the_range_ends_where_a_value_would_do_more_than_half_of_dense_flops(variant, N, high):
    from variants import build_variant, dense_flops, get_variant

    cell = matched(variant, 0.1, N=N)
    cell = dataclasses.replace(
        cell, heads=8, kv_heads=8, head_dim=64, config=get_variant(variant).cls.config_for_length(cell.config, N)
    )
    field, low, top, bound = knob_range(cell)
    assert (low, top) == (16, high)

    def flops(value):
        return build_variant(variant, **{**cell.config, field: value}).flops(1, 8, N, N, 64, False)

    limit = dense_flops(1, 8, N, N, 64, False) / 2
    assert flops(top) <= limit and (bound == "the largest declared" or flops(top + 1) > limit)


def test_where_even_the_smallest_value_does_over_half_of_dense_flops_nothing_is_searched():
    cell = matched("distilled", 0.1, N=32)  # H=2, D=16: 16 features cost more than half of dense at N=32
    field, low, high, bound = knob_range(cell)
    assert (field, low, high) == ("features", 16, None) and bound.startswith("the smallest declared")
    row = measure_cell(cell, FAST, RUN).to_dict()
    assert row["status"] == "unreachable" and row["tuning"]["evaluated"] == 0 and row["tuning"]["tried"] == {}
    assert row["reason"] == (
        "features 16, the smallest declared, already does over 0.5x dense's FLOPs "
        "(nothing cheaper to search), for the budget 0.1"
    )


def test_unreachable_carries_over_only_where_the_range_is_the_one_searched():
    assert unreachable_carries_over(matched("distilled", 0.1, N=8192), 4096)  # features 16-512 at both
    assert unreachable_carries_over(matched("linformer", 0.1, N=4096), 2048)  # k 16-256 at both
    assert unreachable_carries_over(matched("sliding_window", 0.1, N=256), 128) is None  # a wider window range at 256


def test_train_and_decode_cells_reuse_the_forward_search_of_their_shape():
    context = MeasureContext()
    forward = dataclasses.replace(matched("sliding_window", 0.05), causal=True)
    first = measure_cell(forward, FAST, RUN, context).to_dict()
    assert first["status"] == "ok" and first["tuning"]["evaluated"] >= 2
    for other in (dataclasses.replace(forward, mode="train"), dataclasses.replace(forward, phase="decode")):
        row = measure_cell(other, FAST, RUN, context).to_dict()
        assert row["status"] == "ok", row["reason"]
        assert row["tuning"]["evaluated"] == 0 and row["config"] == first["config"]


def test_a_plugins_flops_that_read_its_built_state_still_bound_the_range(monkeypatch):
    """knob_range counts FLOPs from the config alone; a count reading more of the variant builds it instead."""
    from dataclasses import dataclass

    from variants import AttentionVariant, QualityKnob, VariantConfig, _registry, register_variant

    @dataclass(frozen=True, kw_only=True)
    class Cfg(VariantConfig):
        rank: int = 8

    class Stateful(AttentionVariant):
        quality_knob = QualityKnob("rank", 1, 64)

        def __init__(self, config=None):
            super().__init__(config)
            self.per_key = 4 * self.config.rank  # FLOPs per (query, key-row) pair, set when built

        def flops(self, B, H, N, M, D, causal):
            return B * H * N * self.per_key * D

    monkeypatch.setattr(_registry, "_REGISTRY", dict(_registry._REGISTRY))
    register_variant("t_stateful_flops", config=Cfg)(Stateful)
    cell = dataclasses.replace(matched("dense", 0.1, N=64), variant="t_stateful_flops", config={"rank": 8})
    # 4 * rank * D * N <= half of 4 * N * N * D: rank <= N / 2
    assert knob_range(cell)[1:3] == (1, 32)


def test_a_search_that_fails_keeps_the_values_it_tried_and_claims_no_knob_value(monkeypatch):
    import harness.measure.tuning as tuning

    original, calls = tuning.score_value, []

    def fail_second(*args, **kwargs):
        calls.append(args[2])
        if len(calls) == 2:
            raise RuntimeError("the machine fell over")
        return original(*args, **kwargs)

    monkeypatch.setattr(tuning, "score_value", fail_second)
    row = measure_cell(matched("sliding_window", 0.1), FAST, RUN).to_dict()
    assert row["status"] == "error" and row["reason"] == "during tuning: RuntimeError: the machine fell over"
    assert list(row["tuning"]["tried"]) == [str(calls[0])] and row["tuning"]["evaluated"] == 2
    assert row["config"]["window"] is None and row["tuning_s"] > 0


def test_the_search_scores_on_seeds_apart_from_the_calibration_batches(monkeypatch):
    import harness.measure.accuracy as accuracy
    import harness.measure.calibration as calibration

    scored, fitted = [], []
    make = accuracy.make_inputs
    monkeypatch.setattr(accuracy, "make_inputs", lambda *a, **k: scored.append(k["seed"]) or make(*a, **k))
    monkeypatch.setattr(calibration, "make_inputs", lambda *a, **k: fitted.append(k["seed"]) or make(*a, **k))
    row = measure_cell(matched("distilled", 0.95, N=256, inputs="gaussian"), FAST, RUN).to_dict()
    assert row["status"] == "ok", row["reason"]
    assert scored and fitted and not set(scored) & set(fitted) and 0 not in set(scored) | set(fitted)
    assert row["tuning"]["seeds"] == sorted(set(scored))


def test_the_error_in_a_metric_is_relative_l2_or_one_minus_cosine():
    from harness.error_metrics import metric_error

    fields = {"rel_l2_error": 0.03, "cosine": 0.99}
    assert metric_error(fields, "rel_l2") == 0.03 and metric_error(fields, "cosine") == pytest.approx(0.01)
    with pytest.raises(ValueError, match="unknown error metric 'l1'; expected one of rel_l2, cosine"):
        metric_error(fields, "l1")


def test_sliding_windows_search_tries_sinks_and_the_cheapest_config_within_budget_wins(monkeypatch):
    """Counted: with errors that fall 4x faster with 4 sinks, the search picks sinks=4 at a window about 4x smaller;
    where sinks change nothing, the tie goes to sinks=0 (fewer FLOPs at the same window)."""
    import harness.measure.tuning as tuning

    for gain, want_sinks in ((4.0, 4), (1.0, 0)):
        scored = []

        def score(cell, field, value, *args, gain=gain, **kwargs):
            scored.append((cell.config["sinks"], value))
            return 0.1 * 64 / value / (gain if cell.config["sinks"] else 1.0)

        monkeypatch.setattr(tuning, "score_value", score)
        row = measure_cell(matched("sliding_window", 0.1, N=512), FAST, RUN).to_dict()
        assert row["status"] == "ok", row["reason"]
        options = {o["sinks"]: o for o in row["tuning"]["options"]}
        assert {s for s, _ in scored} == {0, 4} and 64 <= options[0]["value"] <= 80
        assert row["config"]["sinks"] == want_sinks and row["config"]["window"] == options[want_sinks]["value"]
        assert want_sinks == 0 or options[4]["value"] <= options[0]["value"] / 3
        assert Cell.from_dict(row).cell_id == row["cell_id"]  # the sinks found are no part of the id either


def test_on_sink_heads_the_search_meets_a_budget_with_sinks_that_no_window_meets_without():
    inputs = "llm:sink=1,retrieval=0,diffuse=0,max_decay=16"  # every head parks its mass on the first token
    row = measure_cell(matched("sliding_window", 0.5, N=256, inputs=inputs), FAST, RUN).to_dict()
    assert row["status"] == "ok", row["reason"]
    options = {o["sinks"]: o for o in row["tuning"]["options"]}
    assert options[0]["value"] is None and options[4]["value"] < options[0]["high"]  # unreachable without sinks
    assert (row["config"]["sinks"], row["config"]["window"]) == (4, options[4]["value"])
    row = measure_cell(matched("sliding_window", 0.3, N=256), FAST, RUN).to_dict()  # `local`: no sink heads
    assert row["status"] == "ok" and row["config"]["sinks"] == 0, row["reason"]
