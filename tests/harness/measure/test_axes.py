"""The GQA, decode, padding, layer and SDPA-kernel measurements: counted quantities, not timings."""

from __future__ import annotations

import pytest
import torch

from harness.inputs import make_inputs
from harness.inputs.padding import padded_lengths, padding_mask
from harness.measure import MeasureSettings, RunInfo, measure_cell
from harness.measure.memory import sdpa_kernel
from harness.measure.layer import Block, mlp_width
from harness.schema import Cell

RUN = RunInfo(run_id="test", device_name="cpu", host="h", threads=torch.get_num_threads())
FAST = MeasureSettings(
    time_budget_s=0.005, repeats=2, error_rows=16, calibration_steps=3, calibration_batches=1, decode_steps=4
)
H, D = 4, 16


def cell(variant="dense", N=64, *, config=None, **fields) -> Cell:
    from variants import build_config

    base = dict(batch=1, kv_heads=H, causal=False, mode="forward")
    base.update(fields)
    return Cell(
        variant=variant,
        config=build_config(variant, **(config or {})).to_dict(),
        seq_len=N,
        kv_len=N,
        heads=H,
        head_dim=D,
        dtype="float32",
        device="cpu",
        inputs="gaussian",
        seed=0,
        **base,
    )


def run(c: Cell, settings: MeasureSettings = FAST) -> dict:
    return measure_cell(c, settings, RUN).to_dict()


# ---- GQA ----------------------------------------------------------------------------------------
def test_make_inputs_gives_k_v_with_kv_heads_heads_drawn_per_kv_head():
    """A generator with kv_heads draws K/V per K/V head (tests/harness/inputs/test_llm.py checks the group's structure);
    one without it keeps the group's first head, as before."""
    from harness.inputs import register_inputs

    q, k, v = make_inputs("local", B=1, H=4, N=32, D=8, seed=3, H_kv=2)
    assert q.shape == (1, 4, 32, 8) and k.shape == v.shape == (1, 2, 32, 8)

    @register_inputs("t_without_kv_heads")
    def without(B, H, N, M, D, *, generator, device):
        return tuple(torch.randn(B, H, L, D, generator=generator) for L in (N, M, M))

    _, k, v = make_inputs("t_without_kv_heads", B=1, H=4, N=32, D=8, seed=3, H_kv=2)
    _, k4, v4 = make_inputs("t_without_kv_heads", B=1, H=4, N=32, D=8, seed=3)
    assert torch.equal(k, k4[:, ::2]) and torch.equal(v, v4[:, ::2])
    with pytest.raises(ValueError, match="H_kv=3 key/value heads must divide H=4"):
        make_inputs("gaussian", B=1, H=4, N=8, D=8, H_kv=3)


def test_gqa_rows_record_kv_heads_and_stay_exact_for_dense():
    row = run(cell(kv_heads=1))
    assert row["status"] == "ok", row["reason"]
    assert row["kv_heads"] == 1 and row["rel_l2_error"] < 1e-5


def test_a_variant_without_gqa_gets_an_unsupported_row(monkeypatch):
    from variants import get_variant
    from variants.base import Capabilities

    spec = get_variant("chunked")
    monkeypatch.setattr(spec.cls, "capabilities", Capabilities(**{**vars(spec.cls.capabilities), "gqa": False}))
    row = run(cell("chunked", kv_heads=2))
    assert row["status"] == "unsupported" and "gqa" in row["reason"].lower()


# ---- padding ------------------------------------------------------------------------------------
def test_padding_is_ragged_with_the_asked_mean_and_deterministic():
    lengths = padded_lengths(4, 200, 0.25, seed=0)
    assert len(set(lengths)) == 4 and sum(200 - n for n in lengths) == 4 * 50
    assert padded_lengths(4, 200, 0.25, seed=0) == lengths
    mask = padding_mask(4, 200, 0.25, seed=0)
    assert mask.shape == (4, 200) and mask.sum(1).tolist() == lengths
    assert bool(mask[:, -1].all())  # padding on the left: the last token is real
    assert padding_mask(2, 10, 0.0, seed=0) is None


@pytest.mark.parametrize("variant", ["dense", "sliding_window", "chunked"])
def test_padded_cells_pass_the_mask_and_exact_variants_stay_exact(variant):
    row = run(
        cell(variant, N=64, batch=2, padding=0.25, config={"window": 128} if variant == "sliding_window" else None)
    )
    assert row["status"] == "ok", row["reason"]
    assert row["padding"] == 0.25 and row["rel_l2_error"] < 1e-5  # a window covering N is exact under the mask too


def test_padding_changes_what_dense_computes():
    """Without the mask passed, the real rows would see the padded keys and the error would be large."""
    q, k, v = make_inputs("gaussian", B=2, H=H, N=64, D=D, seed=0)
    mask = padding_mask(2, 64, 0.25, seed=0)
    from variants import build_variant, reference_attention

    out = build_variant("dense")(q, k, v, kv_mask=mask)
    ref = reference_attention(q, k, v, kv_mask=mask)
    unmasked = build_variant("dense")(q, k, v)
    real = mask[:, None, :, None].expand_as(out)
    assert torch.allclose(out[real].double(), ref[real], atol=1e-5)
    assert not torch.allclose(unmasked[real].double(), ref[real], atol=1e-2)


# ---- decode -------------------------------------------------------------------------------------
def test_dense_decode_state_bytes_grow_with_n_and_the_output_is_exact():
    small, large = run(cell(N=64, phase="decode", causal=True)), run(cell(N=256, phase="decode", causal=True))
    for row in (small, large):
        assert row["status"] == "ok", row["reason"]
        assert row["rel_l2_error"] < 1e-5 and row["error_rows"] == FAST.decode_steps
        assert row["repeats"] >= 2 and row["latency_s"] > 0
    # a KV cache holds k and v of every context token (capacity may round up)
    assert large["state_bytes"] >= 2 * H * 256 * D * 4
    assert large["state_bytes"] == pytest.approx(4 * small["state_bytes"], rel=0.25)


def test_sliding_window_decode_state_is_constant_and_matches_its_pattern():
    settings = MeasureSettings(**{**FAST.to_dict(), "accuracy_reference": "pattern"})
    rows = [
        run(cell("sliding_window", N=N, phase="decode", causal=True, config={"window": 16}), settings)
        for N in (64, 256)
    ]
    assert all(r["status"] == "ok" for r in rows), [r["reason"] for r in rows]
    assert rows[0]["state_bytes"] == rows[1]["state_bytes"]
    assert all(r["rel_l2_error"] < 1e-5 for r in rows)


def test_decode_with_gqa_and_padding():
    row = run(cell(N=64, phase="decode", causal=True, kv_heads=2, batch=2, padding=0.25))
    assert row["status"] == "ok", row["reason"]
    assert row["rel_l2_error"] < 1e-5 and row["state_bytes"] >= 2 * 2 * 2 * 64 * D * 4


def test_a_variant_that_cannot_decode_gets_its_reasons():
    row = run(cell("linformer", N=64, phase="decode", causal=True))
    assert row["status"] == "unsupported" and "decod" in row["reason"]


# ---- SDPA kernel --------------------------------------------------------------------------------
def test_sdpa_kernel_names():
    assert sdpa_kernel(["aten::mm", "aten::_scaled_dot_product_flash_attention_for_cpu"]) == "flash"
    assert sdpa_kernel(["aten::_scaled_dot_product_attention_math", "aten::softmax"]) == "math"
    assert sdpa_kernel(["aten::_scaled_dot_product_efficient_attention_backward"]) is None
    assert sdpa_kernel(["aten::bmm"]) is None


def test_rows_record_the_kernel_that_ran():
    assert run(cell())["sdpa_kernel"] == "flash"  # the CPU flash kernel for plain float32 SDPA
    assert run(cell(config={"backend": "reference"}))["sdpa_kernel"] is None  # no SDPA op at all


# ---- layer --------------------------------------------------------------------------------------
def test_layer_block_shapes_and_width():
    from variants import build_variant

    block = Block(build_variant("dense"), heads=4, kv_heads=2, head_dim=16)
    assert mlp_width(64) == 192 and mlp_width(1024) == 2752
    assert block.wk.out_features == 2 * 16 and block.w1.out_features == 192
    x = torch.randn(2, 8, 64)
    assert block(x, causal=True).shape == (2, 8, 64)


@pytest.mark.parametrize("mode", ["forward", "train"])
def test_dense_layer_cell_is_exact_against_the_float64_block(mode):
    row = run(cell(N=64, scope="layer", mode=mode, kv_heads=2))
    assert row["status"] == "ok", row["reason"]
    assert row["scope"] == "layer" and row["rel_l2_error"] < 1e-4
    assert row["cpu_latency_s"] > 0 and isinstance(row["contended"], bool)  # the second clock times layers too
    attention = 4 * 1 * H * 64 * 64 * D
    linear = 2 * 64 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 192)
    assert row["flops"] == (attention + linear if mode == "forward" else int(3.5 * attention) + 3 * linear)


def test_layer_decode_is_refused_with_a_reason():
    row = run(cell(N=64, scope="layer", phase="decode", causal=True))
    assert row["status"] == "unsupported" and "attention scope only" in row["reason"]


# ---- a failure keeps what the finished stages measured -------------------------------------------
@pytest.mark.parametrize(
    "fields,timer",
    [
        ({}, "harness.measure.phase.timed_fields"),  # one timing stage for every kind of cell
        ({"phase": "decode", "causal": True}, "harness.measure.phase.timed_fields"),
        ({"scope": "layer"}, "harness.measure.speedup.StepTimer.measure"),
    ],
)
def test_a_cell_failing_in_timing_keeps_its_backend_errors_and_memory(monkeypatch, fields, timer):
    def fail(*args, **kwargs):
        raise RuntimeError("the timer fell over")

    monkeypatch.setattr(timer, fail)
    row = run(cell(N=32, **fields))
    assert row["status"] == "error" and row["reason"] == "during timing: RuntimeError: the timer fell over"
    assert row["backend"] == "sdpa" and row["rel_l2_error"] < 1e-4 and row["error_rows"] > 0
    sdpa_kernel = None if row.get("decode_step") == "native" else "flash"  # a decode step by the kernel runs no SDPA
    assert (
        row["peak_memory_bytes"] > 0
        and row["memory_method"] == "cpu_profiler_events"
        and row["sdpa_kernel"] == sdpa_kernel
    )
    assert row["latency_s"] is None and row["flops"] is None
    assert (row["state_bytes"] is not None) == (fields.get("phase") == "decode")  # init_state finished first
