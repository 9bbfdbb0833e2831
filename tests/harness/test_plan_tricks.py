"""The memory-trick axes (recompute, precision): planned for train cells only, layer recompute at the layer scope only,
autocast over float32 only; the same rule refuses a hand-made cell that breaks it."""

from __future__ import annotations

import pytest

from harness.errors import UsageError
from harness.plan import plan, tricks_reason
from harness.runner import sweep_spec as build_spec
from harness.schema import Cell


def _spec(**cli):
    return build_spec(
        cli={"device": "cpu", "variants": "dense", "seq_lens": "64", "inputs": "gaussian", "heads": "4", **cli}
    )


def test_forward_cells_keep_the_defaults_and_train_cells_get_every_combination():
    cells = plan(
        _spec(
            modes="forward,train",
            scopes="attention,layer",
            recomputes="none,attention,layer",
            precisions="fp32,autocast-bf16,autocast-fp16",
        )
    )
    forward = {(c.scope, c.recompute, c.precision) for c in cells if c.mode == "forward"}
    assert forward == {("attention", "none", "fp32"), ("layer", "none", "fp32")}
    train = [c for c in cells if c.mode == "train"]
    assert {(c.recompute, c.precision) for c in train if c.scope == "layer"} == {
        (r, p) for r in ("none", "attention", "layer") for p in ("fp32", "autocast-bf16", "autocast-fp16")
    }
    # at the attention scope there is no block to checkpoint: recompute layer is not planned there
    assert {c.recompute for c in train if c.scope == "attention"} == {"none", "attention"}
    assert len(train) == 9 + 6 and len({c.cell_id for c in cells}) == len(cells)


def test_autocast_is_planned_over_float32_inputs_only():
    cells = plan(_spec(modes="train", dtypes="float32,bfloat16", precisions="fp32,autocast-bf16"))
    assert {(c.dtype, c.precision) for c in cells} == {
        ("float32", "fp32"),
        ("float32", "autocast-bf16"),
        ("bfloat16", "fp32"),
    }


def test_trick_cells_are_labelled_and_their_defaults_keep_the_old_ids():
    values = dict(
        variant="dense",
        config={},
        seq_len=64,
        kv_len=64,
        batch=1,
        heads=4,
        head_dim=16,
        dtype="float32",
        device="cpu",
        causal=False,
        mode="train",
        inputs="gaussian",
        seed=0,
        scope="layer",
    )
    tricked = Cell(**values, recompute="layer", precision="autocast-bf16")
    assert "recompute=layer" in tricked.label and "autocast-bf16" in tricked.label
    plain = Cell(**values)
    assert "recompute" not in plain.label and "fp32" not in plain.label
    assert plain.cell_id == Cell(**values, recompute="none", precision="fp32").cell_id != tricked.cell_id


@pytest.mark.parametrize(
    "values, words",
    [
        (dict(mode="forward", recompute="attention"), "train cells only"),
        (dict(mode="train", scope="attention", recompute="layer"), "needs --scopes layer"),
        (dict(mode="train", dtype="bfloat16", precision="autocast-fp16"), "dtype bfloat16"),
    ],
)
def test_the_rule_says_why_a_combination_is_skipped(values, words):
    reason = tricks_reason({"dtype": "float32", "scope": "layer", **values})
    assert reason is not None and words in reason


def test_an_unknown_trick_is_a_usage_error_naming_the_choices():
    with pytest.raises(UsageError, match="unknown value 'checkpoint'; expected one of none, attention, layer"):
        _spec(recomputes="checkpoint")
    with pytest.raises(UsageError, match="expected one of fp32, autocast-bf16, autocast-fp16"):
        _spec(precisions="bf16")
