"""K/V stored quantized (Cell.kv_dtype, harness.measure.kv_quant): the quantizer's bounds, counted elementwise; the bytes
a decode cache holds, counted from its tensors; the error it costs on `llm` inputs; a variant that cannot read it
refused; every registered variant reading it, with no test code of its own."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from harness.inputs import make_inputs
from harness.cell_rules import kv_refusals
from harness.measure.kv_quant import loaded_state, stored_state
from variants._quantize import dequantize, quantize, round_trip
from tests.harness.measure.test_axes import D, H, cell, run
from variants import build_variant, get_variant, list_variants

FP8_MANTISSA_ULP = 2.0**-3  # float8_e4m3fn: 3 mantissa bits, so a rounding moves a normal value by <= 2^-4 of it
FP8_SUBNORMAL_STEP = 2.0**-9  # its subnormals' spacing (in units of the row's scale)


def _rows(seed: int = 0) -> torch.Tensor:
    """(B, H, N, D) keys whose rows differ in size by four orders of magnitude, one row all zeros."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, 40, 16, generator=g) * 10.0 ** torch.randint(-2, 3, (2, 3, 40, 1), generator=g)
    x[0, 0, 0] = 0.0
    return x


def test_int8_round_trips_each_row_within_a_127th_of_its_absmax():
    x = _rows()
    stored = quantize(x, "int8")
    absmax = x.abs().amax(dim=-1, keepdim=True)
    assert stored.values.dtype == torch.int8 and stored.scale.shape == (2, 3, 40, 1)
    assert int(stored.values.abs().amax()) == 127 and int(stored.values.min()) >= -127
    back = dequantize(stored)
    assert back.dtype == x.dtype
    error = (back - x).abs()
    # rounding to the nearest of 255 levels moves a value by at most half a level, absmax / 254 (a float32 margin)
    over = error > absmax / 254 * (1 + 1e-5) + 1e-30
    assert int(over.sum()) == 0, f"{int(over.sum())} elements beyond half a level of their row's absmax"
    assert int((error > absmax / 127).sum()) == 0
    assert int((error > 0).sum()) > x.numel() // 2  # a quantizer that does nothing fails
    assert torch.equal(back[0, 0, 0], torch.zeros(16))  # a row of zeros stays zeros (scale 1, no division by 0)


def test_fp8_rounds_each_value_to_e4m3_within_its_relative_step():
    x = _rows(1)
    stored = quantize(x, "fp8_e4m3")
    assert stored.values.dtype == torch.float8_e4m3fn and stored.scale.shape == (2, 3, 40, 1)
    error = (dequantize(stored) - x).abs()
    bound = torch.maximum(x.abs() * FP8_MANTISSA_ULP / 2, stored.scale * FP8_SUBNORMAL_STEP / 2) * (1 + 1e-5)
    assert int((error > bound).sum()) == 0
    assert int((error > 0).sum()) > x.numel() // 4


@pytest.mark.parametrize("kv_dtype", ["int8", "fp8_e4m3"])
def test_storing_a_dequantized_row_again_changes_nothing(kv_dtype):
    """A decode cache is stored again after every step: a row read and stored again keeps its values and scale."""
    first = quantize(_rows(2), kv_dtype)
    again = quantize(dequantize(first), kv_dtype)
    assert torch.equal(again.values.to(torch.float32), first.values.to(torch.float32))
    torch.testing.assert_close(again.scale, first.scale, rtol=1e-6, atol=0)


@pytest.mark.parametrize("variant", ["dense", "sliding_window"])
def test_a_decode_cache_at_int8_holds_a_quarter_of_float32_plus_one_scale_per_row(variant):
    """state_bytes counted from the stored tensors: K and V (B, H_kv, L, D) of float32 hold 2 B H_kv L D x 4 bytes,
    of int8 or fp8 2 B H_kv L (D + 4) (one byte a value, one float32 scale a row): (D + 4) / 4D of them. L is dense's
    cache capacity (twice the context: it doubles when full), sliding_window's sinks + window; the ring's positions
    (int64) and real flags (bool) stay as they are."""
    N, kv_heads = 64, 2
    rows = {kv: run(cell(variant, N, phase="decode", causal=True, kv_heads=kv_heads, kv_dtype=kv)) for kv in _KV}
    assert all(r["status"] == "ok" for r in rows.values()), {kv: r["reason"] for kv, r in rows.items()}
    config = rows["none"]["config"]
    L = 2 * N if variant == "dense" else config["sinks"] + config["window"]
    rest = 0 if variant == "dense" else L * 8 + 1 * L  # pos (L,) int64, real (B, L) bool
    kv32 = 2 * 1 * kv_heads * L * D * 4
    assert rows["none"]["state_bytes"] == kv32 + rest
    for kv in ("int8", "fp8_e4m3"):
        assert rows[kv]["state_bytes"] == kv32 // 4 + 2 * 1 * kv_heads * L * 4 + rest
    live = {kv: r["state_live_bytes"] for kv, r in rows.items()}
    if variant == "dense":  # the live part: the N context tokens
        assert live == {
            "none": 2 * kv_heads * N * D * 4,
            "int8": 2 * kv_heads * N * (D + 4),
            "fp8_e4m3": 2 * kv_heads * N * (D + 4),
        }


_KV = ("none", "int8", "fp8_e4m3")
BOUNDS = {"int8": 2e-2, "fp8_e4m3": 8e-2}  # rel L2 of dense's output against float64 on llm inputs, D = 16


@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("kv_dtype", ["int8", "fp8_e4m3"])
def test_dense_with_a_quantized_cache_on_llm_inputs_costs_a_bounded_nonzero_error(phase, kv_dtype):
    N = 96
    c = dataclasses.replace(cell("dense", N, phase=phase, causal=True, kv_dtype=kv_dtype), inputs="llm")
    row = run(c)
    assert row["status"] == "ok", row["reason"]
    exact = run(dataclasses.replace(c, kv_dtype="none"))
    assert exact["rel_l2_error"] < 1e-5  # the none row is dense's rounding only
    assert 10 * exact["rel_l2_error"] < row["rel_l2_error"] < BOUNDS[kv_dtype]  # a quantizer that does nothing fails
    # the quantization's own error: the context's K (decode) or all of K (prefill), rounded as the module doc says
    _, k, v = make_inputs("llm", B=1, H=H, N=N + (4 if phase == "decode" else 0), D=D, seed=0, H_kv=H)
    k, v = (t[:, :, :N] for t in (k, v))
    for name, x in (("k", k), ("v", v)):
        expected = float((_manual(x, kv_dtype) - x).norm() / x.norm())
        assert row[f"{name}_quant_rel_l2"] == pytest.approx(expected, rel=1e-6)
    assert exact["k_quant_rel_l2"] is None and exact["v_quant_rel_l2"] is None
    if phase == "prefill":  # K and V as held: float32, or one byte a value and a float32 scale a row
        assert exact["kv_bytes"] == 2 * H * N * D * 4 and row["kv_bytes"] == 2 * H * N * (D + 4)
        # another series than plain dense: paired with it (plain dense, the baseline, is timed alone)
        assert row["speedup"] is not None and exact["speedup"] is None


def _manual(x: torch.Tensor, kv_dtype: str) -> torch.Tensor:
    """The per-row absmax quantizer written out again, independently of harness.measure.kv_quant."""
    largest, stored = (127.0, torch.int8) if kv_dtype == "int8" else (448.0, torch.float8_e4m3fn)
    scale = x.abs().amax(dim=-1, keepdim=True) / largest
    scaled = x / scale
    values = scaled.round().to(stored) if kv_dtype == "int8" else scaled.to(stored)
    return values.to(torch.float32) * scale


def test_a_variant_that_declares_it_cannot_read_quantized_kv_is_refused_with_the_reason(monkeypatch):
    spec = get_variant("dense")
    caps = dataclasses.replace(spec.cls.capabilities, quantized_kv=False)
    monkeypatch.setattr(spec.cls, "capabilities", caps)
    for phase in ("prefill", "decode"):
        row = run(cell("dense", 32, phase=phase, causal=True, kv_dtype="int8"))
        assert row["status"] == "unsupported" and "quantized_kv=False" in row["reason"], row["reason"]
        assert "--kv-dtypes none" in row["reason"]
    assert run(cell("dense", 32, kv_dtype="none"))["status"] == "ok"  # unquantized, it runs


def test_quantized_kv_is_measured_for_forward_attention_cells_only():
    train = run(cell("dense", 32, mode="train", kv_dtype="int8"))
    assert train["status"] == "unsupported" and "forward cells at the attention scope" in train["reason"]


@pytest.mark.parametrize("name", list_variants())
def test_every_variant_reads_quantized_kv_or_refuses_it(name):
    """Registry-wide: a variant that declares Capabilities.quantized_kv (the default) gives, on K and V stored as int8,
    nearly what it gives on K and V themselves; one that does not is refused with the reason."""
    torch.manual_seed(0)
    attn = build_variant(name, **dict(get_variant(name).cls.small_config)).eval()
    if not attn.capabilities.quantized_kv:
        assert "quantized_kv=False" in kv_refusals(attn.capabilities, "int8")[0]
        return
    assert kv_refusals(attn.capabilities, "int8") == [] and kv_refusals(attn.capabilities, "none") == []
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 48, 16, generator=g) for _ in range(3))
    causal = attn.capabilities.causal  # linformer's projection mixes every key: non-causal only
    with torch.no_grad():
        plain = attn(q, k, v, causal=causal)
        stored = attn(q, round_trip(k, "int8"), round_trip(v, "int8"), causal=causal)
    difference = float((stored - plain).norm() / plain.norm())
    assert 0 < difference < 3e-2, f"{name}: output moved {difference:.3g} on int8 K/V"


@pytest.mark.parametrize("name", [n for n in list_variants() if get_variant(n).cls.capabilities.decode])
def test_every_decoding_variant_decodes_from_a_quantized_cache(name):
    """Registry-wide: a decode cell at int8 runs for every variant that decodes; its state shrinks where the state
    declares keys and values (kv_fields: dense's and chunked's cache, a ring) and is untouched where it holds none
    (distilled's running sums); its error stays within int8's reach of the unquantized cell's."""
    config = dict(get_variant(name).cls.small_config)
    rows = {
        kv: run(cell(name, 48, config=config, phase="decode", causal=True, batch=2, padding=0.25, kv_dtype=kv))
        for kv in ("none", "int8")
    }
    assert all(r["status"] == "ok" for r in rows.values()), {kv: r["reason"] for kv, r in rows.items()}
    attn = build_variant(name, **config)
    g = torch.Generator().manual_seed(0)
    k, v = (torch.randn(2, H, 48, D, generator=g) for _ in range(2))
    state = attn.init_state(k, v)
    holds_kv = any(hasattr(type(s), "kv_fields") for s in [state, *vars(state).values()])
    if holds_kv:
        assert rows["int8"]["state_bytes"] < rows["none"]["state_bytes"]  # (exact counts: the test above)
    else:
        assert rows["int8"]["state_bytes"] == rows["none"]["state_bytes"]
    assert abs(rows["int8"]["rel_l2_error"] - rows["none"]["rel_l2_error"]) < 2e-2


@pytest.mark.parametrize("name", ["dense", "sliding_window"])
@pytest.mark.parametrize("kv_dtype", ["int8", "fp8_e4m3"])
def test_a_step_stores_only_the_rows_it_wrote_and_they_are_what_storing_it_all_gives(name, kv_dtype):
    """stored_state writes back the rows a state names (written_rows): the store after each step equals, on every
    live row, the whole cache quantized again; a wrong row (an off-by-one) would leave a stale one behind."""
    attn = build_variant(name, **dict(get_variant(name).cls.small_config))
    g = torch.Generator().manual_seed(5)
    q, k, v = (round_trip(torch.randn(1, 2, 40, 16, generator=g), kv_dtype) for _ in range(3))
    partial = stored_state(attn.init_state(k[:, :, :20], v[:, :, :20]), kv_dtype)
    whole = copy.deepcopy(partial)
    with torch.no_grad():
        for t in range(20, 40):
            token = (q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1])
            _, partial = attn.step(*token, loaded_state(partial))
            partial = stored_state(partial, kv_dtype)
            _, whole = attn.step(*token, loaded_state(whole))
            whole.__dict__.pop("_kv_read")  # forget the stores read: quantized whole
            whole = stored_state(whole, kv_dtype)
            live = torch.arange(partial.length) if name == "dense" else torch.nonzero(partial.pos >= 0)[:, 0]
            for field in ("k", "v"):
                mine, all_again = getattr(partial, field), getattr(whole, field)
                assert torch.equal(mine.values[:, :, live].float(), all_again.values[:, :, live].float()), (t, field)
                assert torch.equal(mine.scale[:, :, live], all_again.scale[:, :, live]), (t, field)


@pytest.mark.cuda
@pytest.mark.parametrize("kv_dtype", ["int8", "fp8_e4m3"])
def test_the_quantizer_on_cuda_keeps_the_cpus_bounds(kv_dtype):
    """The CUDA path of the store (the GPU check runs it): its values on the device, within the bounds the CPU tests
    above hold them to (half an int8 level of the row's absmax; half an e4m3 step of the value)."""
    x = _rows(2)
    stored = quantize(x.cuda(), kv_dtype)
    assert stored.values.device.type == "cuda" and stored.values.dtype == (
        torch.int8 if kv_dtype == "int8" else torch.float8_e4m3fn
    )
    back = dequantize(stored).cpu()
    assert back.dtype == x.dtype
    error, scale = (back - x).abs(), stored.scale.cpu()
    if kv_dtype == "int8":
        bound = x.abs().amax(dim=-1, keepdim=True) / 254 * (1 + 1e-5) + 1e-30
    else:
        bound = torch.maximum(x.abs() * FP8_MANTISSA_ULP / 2, scale * FP8_SUBNORMAL_STEP / 2) * (1 + 1e-5)
    assert int((error > bound).sum()) == 0
    assert int((error > 0).sum()) > x.numel() // 4  # a quantizer that does nothing fails
