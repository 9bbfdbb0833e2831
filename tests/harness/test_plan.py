"""spec -> cells: counts, order, stable ids."""

from __future__ import annotations

import pytest

from harness.plan import plan
from harness.schema import CELL_FIELDS, Cell
from harness.runner import sweep_spec as build_spec


def _spec(**cli):
    return build_spec(
        cli={
            "device": "cpu",
            "variants": "dense,dense:backend=reference",
            "seq_lens": "512,128,256",
            "inputs": "gaussian",
            "causals": "false",  # the CPU default's is causal: these ids and labels are the non-causal ones
            **cli,
        }
    )


def test_one_cell_per_combination():
    spec = _spec(causals="both", modes="forward,train", head_dims="16,32", inputs="gaussian,local")
    cells = plan(spec)
    assert len(cells) == 2 * 3 * 2 * 2 * 2 * 2
    assert len({c.cell_id for c in cells}) == len(cells)


def test_lengths_ascend_within_a_series_and_variants_share_a_length():
    cells = plan(_spec(modes="forward,train"))
    assert [c.seq_len for c in cells[:6]] == [128, 128, 256, 256, 512, 512]
    series = {}
    for c in cells:
        series.setdefault(c.series_key, []).append(c.seq_len)
    assert all(lengths == sorted(lengths) for lengths in series.values())
    assert len(series) == 4  # 2 configs x 2 modes


def test_cell_id_is_stable_and_depends_on_every_field():
    cell = plan(_spec())[0]
    same = Cell.from_dict(cell.fields())
    assert same.cell_id == cell.cell_id
    for change in (
        {"seq_len": 999},
        {"seed": 1},
        {"config": {"backend": "sdpa"}},
        {"inputs": "local"},
        {"causal": True},
    ):
        assert Cell.from_dict({**cell.fields(), **change}).cell_id != cell.cell_id


def _changed(value):
    """Another value of the same kind: every cell field, whatever its type, gets one."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, dict):
        return {**value, "_other": 1}
    return f"{value}_other"


@pytest.mark.parametrize("field", CELL_FIELDS)
def test_every_cell_field_changes_the_cell_id(field):
    cell = plan(_spec())[0]
    changed = Cell.from_dict({**cell.fields(), field: _changed(getattr(cell, field))})
    assert changed.cell_id != cell.cell_id, f"cells differing only in {field} share an id (resume would skip one)"


def test_a_plan_over_two_dtypes_has_a_cell_per_dtype():
    spec = build_spec(
        cli={"device": "cpu", "variants": "dense", "seq_lens": "64", "inputs": "gaussian", "dtypes": "float32,bfloat16"}
    )
    cells = plan(spec)
    assert sorted(c.dtype for c in cells) == ["bfloat16", "float32"] and len({c.cell_id for c in cells}) == 2


def test_duplicates_are_planned_once():
    cells = plan(
        build_spec(
            cli={"device": "cpu", "variants": "dense,dense:backend=auto", "seq_lens": "64,64", "inputs": "gaussian"}
        )
    )
    assert len(cells) == 1


def test_label_shows_only_non_default_config():
    labels = [c.label for c in plan(_spec())[:2]]
    assert labels == [
        "dense N=128 forward float32 D=64 gaussian",
        "dense(backend=reference) N=128 forward float32 D=64 gaussian",
    ]


def test_linformer_projections_follow_each_n_unless_the_user_sets_them():
    spec = build_spec(
        cli={
            "device": "cpu",
            "variants": "linformer,linformer:max_seq_len=8192,k=32",
            "seq_lens": "32,256,1024",
            "inputs": "gaussian",
            "error_budgets": "",
        }
    )
    cells = plan(spec)
    followed = [c for c in cells if c.config["k"] == 64]
    fixed = [c for c in cells if c.config["k"] == 32]
    assert [(c.seq_len, c.config["max_seq_len"]) for c in followed] == [
        (32, 64),
        (256, 256),
        (1024, 1024),
    ]  # at least k
    assert {c.config["max_seq_len"] for c in fixed} == {8192}
    assert len({c.series_key for c in followed}) == 1  # one series across N: an OOM at N still stops the longer ones
    assert {c.label.split(" ")[0] for c in followed} == {"linformer"}


def test_error_budgets_plan_one_cell_per_budget_for_a_free_quality_knob():
    spec = build_spec(
        cli={
            "device": "cpu",
            "variants": "dense,sliding_window,sliding_window:window=64,sliding_window:sinks=8,distilled",
            "seq_lens": "128",
            "inputs": "gaussian",
            "error_budgets": "0.1,0.01",
        }
    )
    cells = plan(spec)
    by = {(c.variant, c.matched_budget, c.config.get("window")) for c in cells}
    assert by == {
        ("dense", None, None),
        ("sliding_window", 0.01, 256),
        ("sliding_window", 0.1, 256),
        ("sliding_window", None, 64),
        ("sliding_window", None, 256),  # sinks=8 set: the search would choose sinks too, so it is measured as given
        ("distilled", 0.01, None),
        ("distilled", 0.1, None),
    }
    assert [c.matched_budget for c in cells if c.variant == "distilled"] == [0.01, 0.1]  # budgets ascending
    assert all(c.error_metric == "rel_l2" for c in cells)
    assert len({c.cell_id for c in cells}) == len(cells) == 7


def test_without_budgets_cell_ids_are_those_of_earlier_versions():
    """matched_budget and error_metric stay out of a cell's id at their defaults: the ids of the reference run committed
    before error budgets (347793c) are still planned, so such runs resume."""
    base = dict(device="cpu", variants="dense,sliding_window", seq_lens="256", inputs="local", causals="false")
    plain = plan(build_spec(cli={**base, "error_budgets": ""}))
    assert [c.cell_id for c in plain] == ["227573f7762f0a11", "f459e8fb783da18e"]
    with_budgets = plan(build_spec(cli={**base, "error_budgets": "0.1", "error_metric": "cosine"}))
    assert with_budgets[0].cell_id == "227573f7762f0a11"  # dense: not matched
    assert with_budgets[1].error_metric == "cosine" and with_budgets[1].cell_id != plain[1].cell_id


def test_a_config_field_added_later_stays_out_of_the_id_at_its_default():
    """distilled's decode_backend (declared added): a row recorded before it existed, the same cell at "auto" and a
    row that names "auto" share one id and one compare key; "eager" is another cell."""
    from harness.schema import match_key

    spec = build_spec(cli={"device": "cpu", "variants": "distilled", "seq_lens": "256", "error_budgets": ""})
    cell = plan(spec)[0]
    assert cell.config["decode_backend"] == "auto"
    older = {**cell.fields(), "config": {k: v for k, v in cell.config.items() if k != "decode_backend"}}
    assert Cell.from_dict(older).cell_id == cell.cell_id and match_key(older) == match_key(cell.fields())
    eager = {**cell.fields(), "config": {**cell.config, "decode_backend": "eager"}}
    assert Cell.from_dict(eager).cell_id != cell.cell_id and match_key(eager) != match_key(cell.fields())
