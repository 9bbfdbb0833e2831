"""The memory-trick axes (recompute, precision): planned for train cells only, layer recompute at the layer scope only,
autocast over float32 only; the same rule refuses a hand-made cell that breaks it. The layer stack's depth, the memory
budget's values and its search over N (doubling, bisection, reuse of what was measured)."""

from __future__ import annotations

import dataclasses

import pytest

from harness.errors import UsageError
from harness.plan import MAX_SEARCHED_SEQ_LEN, Longest, longest_within, memory_verdict, plan, search_longest
from harness.cell_rules import tricks_reason
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


def test_layer_cells_get_the_spec_depth_and_attention_cells_one_block():
    cells = plan(_spec(modes="train", scopes="attention,layer", layer_depth="3"))
    assert {(c.scope, c.layer_depth) for c in cells} == {("attention", 1), ("layer", 3)}
    layer = next(c for c in cells if c.scope == "layer")
    assert "L=3" in layer.label
    one = dataclasses.replace(layer, layer_depth=1)  # a one-block cell keeps the id it had before stacks
    assert "L=" not in one.label and one.cell_id != layer.cell_id
    assert "needs --scopes layer" in tricks_reason({"scope": "attention", "mode": "train", "layer_depth": 2})


@pytest.mark.parametrize("text, size", [("2GiB", 2 * 2**30), ("80GiB", 80 * 2**30), ("512MiB", 2**29), ("16GB", 16e9)])
def test_a_memory_budget_reads_binary_and_decimal_units(text, size):
    assert _spec(memory_budget=text).memory_budget == size
    assert _spec(memory_budget="device").memory_budget == "device" and _spec().memory_budget is None


def test_a_bad_memory_budget_is_a_usage_error_with_an_example():
    with pytest.raises(UsageError, match=r"--memory-budget: expected a memory size like '2GiB'.*got '2 parsecs'"):
        _spec(memory_budget="2 parsecs")


def _walk(peak_per_token: int, budget: int, start=(256, 512, 1024), known=None) -> tuple[Longest, list[int]]:
    """The search driven to its end over a series whose peak memory is peak_per_token * N: (its result, N measured)."""
    known = dict(known or {})
    verdict = lambda n: memory_verdict("ok", peak_per_token * n, budget)  # noqa: E731
    known.update({n: verdict(n) for n in start if n not in known})
    measured = []
    while (found := search_longest(lambda n: known.get(n, False), start)).next is not None:
        measured.append(found.next)
        known[found.next] = verdict(found.next)
    return found, measured


def test_the_search_doubles_then_bisects_to_within_an_eighth():
    found, measured = _walk(1000, 5_000_000)  # fits up to N = 5000
    assert measured == [2048, 4096, 8192, 6144, 5120, 4608]
    assert (found.fits, found.fails, found.why) == (4608, 5120, "over budget")
    assert found.fails - found.fits <= found.fits // 8 and found.fits * 1000 <= 5_000_000 < found.fails * 1000


def test_the_search_halves_below_the_planned_lengths_and_stops_at_its_limits():
    found, measured = _walk(1000, 100_000)  # nothing planned fits: halve down to 64
    assert measured == [128, 64] and (found.fits, found.fails) == (64, 128)
    found, measured = _walk(1, 1 << 40)  # everything fits: doubling stops at MAX_SEARCHED_SEQ_LEN
    assert found.fits == MAX_SEARCHED_SEQ_LEN and found.fails is None and len(measured) == 10


def test_the_search_reuses_what_was_measured_and_treats_a_failure_as_not_fitting():
    _, measured = _walk(1000, 5_000_000)
    rows = {n: memory_verdict("ok", 1000 * n, 5_000_000) for n in measured}
    assert _walk(1000, 5_000_000, known=rows)[1] == []  # a resumed run: the same path, nothing left to measure
    assert memory_verdict("oom", None, 1) == "oom"
    assert memory_verdict("ok", float("nan"), 1) == "no peak memory"
    found = longest_within({1024: None, 2048: "timeout", 4096: None})  # the first failure bounds it
    assert (found.fits, found.fails, found.why) == (1024, 2048, "timeout")


def test_a_quantized_kv_store_is_planned_for_forward_attention_cells_labelled_and_ids_kept():
    cells = plan(
        _spec(modes="forward,train", scopes="attention,layer", phases="prefill,decode", kv_dtypes="none,int8,fp8_e4m3")
    )
    quantized = {(c.mode, c.scope, c.phase, c.kv_dtype) for c in cells if c.kv_dtype != "none"}
    assert quantized == {("forward", "attention", p, kv) for p in ("prefill", "decode") for kv in ("int8", "fp8_e4m3")}
    plain = [c for c in cells if c.kv_dtype == "none"]
    assert {(c.mode, c.scope, c.phase) for c in plain} == {
        ("forward", "attention", "prefill"),
        ("forward", "attention", "decode"),
        ("forward", "layer", "prefill"),
        ("forward", "layer", "decode"),
        ("train", "attention", "prefill"),
        ("train", "layer", "prefill"),
    }  # decode is forward only
    one = next(c for c in cells if c.kv_dtype == "int8")
    assert "kv=int8" in one.label and "kv=" not in dataclasses.replace(one, kv_dtype="none").label
    # at its default the field stays out of the id: the ids of runs made before it hold
    assert dataclasses.replace(one, kv_dtype="none").cell_id == plan(_spec(phases=one.phase))[0].cell_id != one.cell_id
    assert tricks_reason({"mode": "train", "scope": "attention", "kv_dtype": "int8"}).endswith("attention scope")


def test_an_unknown_kv_dtype_is_a_usage_error_naming_the_choices():
    with pytest.raises(UsageError, match="unknown value 'int4'; expected one of none, int8, fp8_e4m3"):
        _spec(kv_dtypes="int4")
