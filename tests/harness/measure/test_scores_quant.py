"""int8 scores asked for by the harness (Cell.scores_dtype; harness.cell_rules, harness.measure.scores_quant): the rule
that plans and refuses them, a measured dense row (its kernel, its errors, its pairing with plain dense), the axis on
the command line and in labels, and ids kept."""

from __future__ import annotations

import dataclasses

import pytest

from harness.errors import UsageError
from harness.plan import plan, plan_header, skipped_reasons
from harness.schema import series_suffix
from harness.cell_rules import scores_reason
from harness.spec import build_spec
from tests.harness.measure.test_axes import cell, run
from variants import get_variant


def _spec(**cli):
    base = {"device": "cpu", "variants": "dense", "seq_lens": "64", "inputs": "gaussian", "heads": "4"}
    return build_spec(cli={**base, **cli}, plan_only=True)


def test_dense_measured_with_int8_scores_records_the_kernel_and_both_errors_and_pairs_with_plain_dense():
    plain, int8 = run(cell("dense", 64)), run(cell("dense", 64, scores_dtype="int8"))
    assert plain["status"] == int8["status"] == "ok", (plain["reason"], int8["reason"])
    assert (int8["backend"], int8["scores_kernel"]) == ("reference", "torch._int_mm")  # what ran, named
    assert plain["scores_kernel"] is None and plain["scores_quant_rel_l2"] is None
    assert plain["rel_l2_error"] < 1e-5 and 1e-3 < int8["rel_l2_error"] < 2e-2  # a path that skips int8 fails
    assert 1e-3 < int8["scores_quant_rel_l2"] < 2e-2
    assert int8["speedup"] is not None and int8["baseline_latency_s"] is not None  # paired with plain dense
    assert plain["baseline_latency_s"] is None  # plain dense is the baseline: timed alone
    assert int8["topk_recall"] is None  # dense's attention weights are its float scores': not scored as the int8 ones


def test_a_variant_without_int8_scores_is_refused_naming_the_setting_and_the_fix():
    row = run(cell("sliding_window", 64, config={"window": 16}, scores_dtype="int8"))
    assert row["status"] == "unsupported"
    assert "scores_dtype int8" in row["reason"] and "Capabilities.int8_scores=False" in row["reason"]
    assert "--scores-dtypes none" in row["reason"]


@pytest.mark.parametrize("where", [dict(mode="train"), dict(phase="decode", causal=True), dict(scope="layer")], ids=str)
def test_int8_scores_are_refused_off_forward_prefill_attention_cells(where):
    row = run(cell("dense", 32, scores_dtype="int8", **where))
    assert row["status"] == "unsupported" and "forward prefill cells at the attention scope" in row["reason"]


def test_the_rule_reads_the_setting_alone_or_with_a_variants_capabilities():
    forward = {"mode": "forward", "phase": "prefill", "scope": "attention", "scores_dtype": "int8"}
    assert scores_reason(forward) is None and scores_reason({**forward, "scores_dtype": "none"}) is None
    assert scores_reason(forward, get_variant("dense").cls.capabilities) is None
    assert "Capabilities.int8_scores=False" in scores_reason(forward, get_variant("chunked").cls.capabilities)
    assert scores_reason({**forward, "mode": "train"}).endswith("got mode train, phase prefill, scope attention")


def test_the_planner_plans_int8_scores_only_where_measured_and_only_for_variants_declaring_them():
    spec = _spec(
        variants="dense,sliding_window:window=16",
        modes="forward,train",
        phases="prefill,decode",
        scopes="attention,layer",
        scores_dtypes="none,int8",
    )
    cells = plan(spec)
    int8 = {(c.variant, c.mode, c.phase, c.scope) for c in cells if c.scores_dtype == "int8"}
    assert int8 == {("dense", "forward", "prefill", "attention")}
    assert {c.variant for c in cells if c.scores_dtype == "none"} == {"dense", "sliding_window"}
    assert plan_header(spec).endswith(f"= {len(cells)} cells")  # the refused series are counted out
    assert any(r.startswith("sliding_window: scores_dtype int8") for r in skipped_reasons(spec))


def test_the_axis_parses_labels_its_series_and_keeps_the_ids_of_cells_at_its_default():
    spec = _spec(scores_dtypes="none,int8")
    assert spec.scores_dtypes == ("none", "int8")
    int8 = next(c for c in plan(spec) if c.scores_dtype == "int8")
    plain = dataclasses.replace(int8, scores_dtype="none")
    assert "scores=int8" in int8.label and "scores=" not in plain.label
    assert series_suffix(int8.fields()) == "[scores=int8]" and series_suffix(plain.fields()) == ""
    assert plain.cell_id == plan(_spec())[0].cell_id != int8.cell_id  # ids of runs made before the field hold


def test_an_unknown_scores_dtype_is_a_usage_error_naming_the_choices():
    with pytest.raises(UsageError, match="unknown value 'int4'; expected one of none, int8"):
        _spec(scores_dtypes="int4")
