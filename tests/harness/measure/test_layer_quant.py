"""precision int8-dynamic: a layer cell's projections dynamically quantized to int8 (harness.measure.layer_quant).
Counted quantities (weight bytes by hand), the error against float64 bounded on both sides, the rule that plans it
for forward layer cells on CPU only, and old rows reading back unchanged."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
from torch.ao.quantization import default_dynamic_qconfig, per_channel_dynamic_qconfig, quantize_dynamic

from harness.cell_rules import tricks_reason
from harness.errors import UsageError
from harness.measure import MeasureSettings, RunInfo, measure_cell
from harness.measure.layer import build_stack
from harness.measure.layer_quant import packed_bytes, quantized_stack, weight_bytes
from harness.plan import plan, skipped_reasons
from harness.row import Row
from harness.runner import sweep_spec as build_spec
from harness.schema import Cell
from harness.store import read_rows
from tests.helpers import REPO
from variants import build_config, build_variant

RUN = RunInfo(run_id="test", device_name="cpu", host="h", threads=torch.get_num_threads())
FAST = MeasureSettings(time_budget_s=0.005, repeats=2, error_rows=32)
# H=4, D=32: E = 128, the SwiGLU width F = 320 (2.7 * 128 = 345.6 rounded to a multiple of 64); 2 blocks
E, F, BLOCKS = 128, 320, 2
PROJECTION_WEIGHTS = 4 * E * E + 3 * E * F  # W_q, W_k, W_v, W_o (H_kv = H), W_1, W_3, W_2: 188,416 per block
NORM_BYTES = 2 * E * 4  # two float32 RMSNorm weights per block


def cell(variant="dense", precision="fp32", **fields) -> Cell:
    base = dict(batch=1, causal=False, mode="forward", scope="layer", layer_depth=BLOCKS, precision=precision)
    return Cell(
        **{**base, **fields},
        variant=variant,
        config=build_config(variant).to_dict(),
        seq_len=128,
        kv_len=128,
        heads=4,
        head_dim=32,
        dtype="float32",
        device="cpu",
        inputs="gaussian",
        seed=0,
    )


def _quantize(linear: nn.Module, qconfig) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 deprecates torch.ao.quantization
        warnings.simplefilter("ignore", UserWarning)  # ... and quantized tensors
        return quantize_dynamic(nn.Sequential(linear), {"0": qconfig}, dtype=torch.qint8)[0]


def test_a_quantized_stack_holds_its_int8_weights_one_scale_each_and_float_norms_a_quarter_of_fp32():
    stack = build_stack(build_variant("linformer", max_seq_len=128), cell("linformer"), torch.float32, "cpu")
    int8 = quantized_stack(stack)
    per_block_int8 = PROJECTION_WEIGHTS * 1 + 7 * (8 + 8) + NORM_BYTES  # int8 values, a scale and zero point each
    assert weight_bytes(int8) == BLOCKS * per_block_int8 == 379_104
    assert weight_bytes(stack) == BLOCKS * (PROJECTION_WEIGHTS * 4 + NORM_BYTES) == 1_509_376
    assert 0.25 < weight_bytes(int8) / weight_bytes(stack) < 0.252
    # the float stack is untouched and the variant (linformer's own projections) is shared, not copied or quantized
    assert sum(isinstance(m, DynamicLinear) for m in int8.modules()) == 7 * BLOCKS
    assert not any(isinstance(m, DynamicLinear) for m in stack.modules())
    assert all(b.attn is stack.attn for b in int8.blocks) and int8.attn is stack.attn
    assert len(list(stack.attn.parameters())) > 0  # linformer's projections: kept float, left out of weight_bytes


def test_a_packed_linear_counts_its_bias_and_one_scale_per_tensor_or_per_output_channel():
    torch.manual_seed(0)
    per_tensor = _quantize(nn.Linear(8, 16, bias=True), default_dynamic_qconfig)
    assert packed_bytes(per_tensor) == 8 * 16 + 1 * 16 + 16 * 4  # int8 values, one scale + zero point, float32 bias
    per_channel = _quantize(nn.Linear(8, 16, bias=False), per_channel_dynamic_qconfig)
    assert packed_bytes(per_channel) == 8 * 16 + 16 * 16  # one scale + zero point per output channel, no bias


def test_an_int8_block_errs_at_least_10x_fp32_and_below_5e_2_with_the_rows_weight_bytes():
    rows = {p: measure_cell(cell(precision=p), FAST, RUN).to_dict() for p in ("fp32", "int8-dynamic")}
    fp32, int8 = rows["fp32"], rows["int8-dynamic"]
    assert fp32["status"] == int8["status"] == "ok", (fp32["reason"], int8["reason"])
    assert 10 * fp32["rel_l2_error"] < int8["rel_l2_error"] < 5e-2  # a quantizer that does nothing fails
    assert (fp32["weight_bytes"], int8["weight_bytes"]) == (1_509_376, 379_104)
    assert int8["latency_s"] > 0 and int8["pct_of_compute_peak"] is None  # no int8 peak measured: no percentage


def _spec(**cli):
    base = {"device": "cpu", "variants": "dense", "seq_lens": "64", "inputs": "gaussian", "heads": "4"}
    return build_spec(cli={**base, **cli})


def test_forward_layer_cells_plan_int8_dynamic_beside_fp32_and_nothing_else_gets_it():
    cells = plan(_spec(scopes="attention,layer", modes="forward,train", precisions="fp32,int8-dynamic"))
    assert sorted((c.scope, c.mode, c.precision) for c in cells) == [
        ("attention", "forward", "fp32"),
        ("attention", "train", "fp32"),
        ("layer", "forward", "fp32"),
        ("layer", "forward", "int8-dynamic"),
        ("layer", "train", "fp32"),
    ]
    int8 = next(c for c in cells if c.precision == "int8-dynamic")
    assert "int8-dynamic" in int8.label and int8.cell_id != dataclasses.replace(int8, precision="fp32").cell_id


def test_int8_dynamic_alone_at_the_attention_scope_is_a_usage_error_with_the_rules_reason():
    with pytest.raises(
        UsageError, match=r"plans 0 cells .*precision int8-dynamic .* at the layer scope .*scope attention"
    ):
        _spec(scopes="attention", precisions="int8-dynamic")


@pytest.mark.parametrize(
    "values, words",
    [
        (dict(device="cuda"), "device cuda"),
        (dict(scope="attention"), "scope attention"),
        (dict(mode="train"), "mode train"),
        (dict(dtype="bfloat16"), "dtype bfloat16"),
    ],
)
def test_the_rule_refuses_int8_dynamic_off_forward_layer_cells_on_cpu(values, words):
    plain = dict(mode="forward", scope="layer", dtype="float32", device="cpu", precision="int8-dynamic")
    assert tricks_reason(plain) is None
    reason = tricks_reason({**plain, **values})
    assert reason is not None and "on CPU" in reason and words in reason
    spec = dataclasses.replace(_spec(scopes="layer", precisions="fp32,int8-dynamic"), device="cuda")
    assert {c.precision for c in plan(spec)} == {"fp32"} and "device cuda" in skipped_reasons(spec)[0]


def test_a_measured_attention_cell_with_int8_dynamic_is_an_unsupported_row_saying_why():
    row = measure_cell(cell(precision="int8-dynamic", scope="attention", layer_depth=1), FAST, RUN).to_dict()
    assert row["status"] == "unsupported" and "at the layer scope" in row["reason"] and row["weight_bytes"] is None


def test_old_rows_read_back_without_weight_bytes_and_with_their_ids():
    rows = read_rows(REPO / "results" / "cpu-reference")
    assert rows and all("weight_bytes" not in r or r["weight_bytes"] is None for r in rows)
    for r in rows:
        row = Row.from_dict(r)
        assert row.weight_bytes is None and row.cell.cell_id == r["cell_id"]
