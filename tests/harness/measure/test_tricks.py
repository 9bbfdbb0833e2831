"""The memory tricks (recompute, precision): counted quantities, not timings. Checkpointing changes no bit of a
gradient, keeps fewer bytes across a stack of blocks, and autocast's cost in accuracy shows in the gradient errors."""

from __future__ import annotations

import dataclasses

import torch

from harness.measure import MeasureSettings, RunInfo, measure_cell
from harness.measure.layer import Block
from harness.measure.memory import measure_peak_memory
from harness.schema import Cell

RUN = RunInfo(run_id="test", device_name="cpu", host="h", threads=torch.get_num_threads())
FAST = MeasureSettings(
    time_budget_s=0.005, repeats=2, error_rows=16, calibration_steps=3, calibration_batches=1, decode_steps=4
)
H, D = 2, 16


def cell(variant="dense", N=64, **fields) -> Cell:
    from variants import build_config

    base = dict(batch=1, causal=True, mode="train", scope="attention")
    base.update(fields)
    return Cell(
        variant=variant,
        config=build_config(variant).to_dict(),
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


def run(c: Cell) -> dict:
    return measure_cell(c, FAST, RUN).to_dict()


def _stack(recompute: str, layers: int, backend: str = "reference") -> list[Block]:
    """`layers` blocks of the harness's own class, seeded alike whatever the recompute (the same weights)."""
    from variants import build_variant

    torch.manual_seed(0)
    return [
        Block(build_variant("dense", backend=backend), heads=H, kv_heads=H, head_dim=D, recompute=recompute)
        for _ in range(layers)
    ]


def _train_step(blocks: list[Block], x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Forward through the stack, then the gradients of x and of every parameter."""
    xg = x.detach().requires_grad_(True)
    out = xg
    for block in blocks:
        out = block(out, causal=True)
    params = [p for b in blocks for p in b.parameters()]
    return torch.autograd.grad(out, [xg, *params], grad_outputs=torch.ones_like(out))


def test_a_checkpointed_layer_train_step_equals_the_plain_one_bit_for_bit():
    x = torch.randn(1, 128, H * D, generator=torch.Generator().manual_seed(1))
    plain = _train_step(_stack("none", 2, backend="auto"), x)
    for recompute in ("attention", "layer"):
        checkpointed = _train_step(_stack(recompute, 2, backend="auto"), x)
        assert len(checkpointed) == len(plain) == 1 + 2 * 9  # x, then each block's 2 norms and 7 projections
        assert all(torch.equal(a, b) for a, b in zip(plain, checkpointed)), recompute


def test_layer_recompute_keeps_fewer_bytes_than_none_across_four_blocks():
    # dense's reference backend keeps its N x N probabilities per block: activations dominate the 4 blocks' weights
    x = torch.randn(1, 512, H * D, generator=torch.Generator().manual_seed(1))
    peak = {r: measure_peak_memory(lambda: _train_step(_stack(r, 4), x), "cpu").bytes for r in ("none", "layer")}
    weights = sum(p.numel() * 4 for b in _stack("none", 4) for p in b.parameters())
    assert peak["none"] > 8 * weights  # the premise: activations dominate
    # each block keeps ~H N^2 floats of scores for the backward without recompute; with it, one block's at a time
    scores = H * 512 * 512 * 4
    assert peak["none"] - peak["layer"] > 2 * scores, peak


def test_an_autocast_bf16_train_cell_records_its_precision_and_larger_gradient_errors():
    rows = {p: run(cell(precision=p, recompute="attention")) for p in ("fp32", "autocast-bf16")}
    for precision, row in rows.items():
        assert row["status"] == "ok", row["reason"]
        assert (row["precision"], row["recompute"]) == (precision, "attention")
    fp32, bf16 = rows["fp32"], rows["autocast-bf16"]
    for name in ("grad_rel_l2_q", "grad_rel_l2_k", "grad_rel_l2_v", "rel_l2_error"):
        assert fp32[name] < 1e-5 and bf16[name] > 100 * fp32[name], (name, fp32[name], bf16[name])
    assert bf16[name] < 0.05  # bf16's ~3 significant digits, not garbage


def test_layer_cells_run_under_every_trick_and_record_them():
    for recompute, precision in (("layer", "autocast-bf16"), ("attention", "autocast-fp16"), ("layer", "fp32")):
        row = run(cell("chunked", scope="layer", recompute=recompute, precision=precision))
        assert row["status"] == "ok", row["reason"]
        assert (row["recompute"], row["precision"]) == (recompute, precision)
        assert row["peak_memory_bytes"] > 0 and row["rel_l2_error"] < 0.05


def test_a_hand_made_cell_the_plan_would_skip_is_unsupported_with_the_reason():
    row = run(cell(scope="attention", recompute="layer"))
    assert row["status"] == "unsupported" and "needs --scopes layer" in row["reason"]
    row = run(cell(mode="forward", precision="autocast-bf16"))
    assert row["status"] == "unsupported" and "train cells only" in row["reason"]


def test_a_layer_stack_cell_keeps_fewer_bytes_with_each_trick_and_scores_its_weight_gradients():
    # a 3-block stack at N = 256: dense's reference backend keeps its N x N probabilities per block, so activations
    # dominate; recompute attention drops them (the attention call's), recompute layer all but one block's
    from variants import build_config

    config = build_config("dense", backend="reference").to_dict()
    patient = dataclasses.replace(FAST, cell_timeout_s=None)  # counted bytes: a loaded machine must not time it out
    rows = {
        (r, p): measure_cell(
            dataclasses.replace(cell(N=256, scope="layer", layer_depth=3, recompute=r, precision=p), config=config),
            patient,
            RUN,
        ).to_dict()
        for r, p in (("none", "fp32"), ("attention", "fp32"), ("layer", "fp32"), ("layer", "autocast-bf16"))
    }
    assert all(row["status"] == "ok" for row in rows.values()), [row["reason"] for row in rows.values()]
    peak = {key: row["peak_memory_bytes"] for key, row in rows.items()}
    scores = H * 256 * 256 * 4  # one block's probabilities
    assert peak["none", "fp32"] - peak["attention", "fp32"] > scores, peak
    assert peak["attention", "fp32"] > peak["layer", "fp32"], peak
    fp32, bf16 = rows["layer", "fp32"], rows["layer", "autocast-bf16"]
    assert fp32["layer_depth"] == 3 and fp32["grad_check_seq_len"] == 256
    for name in ("grad_rel_l2_x", "grad_rel_l2_params"):
        assert fp32[name] < 1e-5 and 100 * fp32[name] < bf16[name] < 0.1, (name, fp32[name], bf16[name])


def test_the_layer_gradient_check_runs_on_the_first_four_batch_rows_only(monkeypatch):
    # the float64 reference keeps B x H x n x n scores for the backward: a large batch must not multiply them
    from harness.measure import layer_accuracy

    seen = []
    exact = layer_accuracy.reference_attention

    def counting(q, k, v, **kw):
        if torch.is_grad_enabled() and q.dtype == torch.float64:
            seen.append(q.shape[0])
        return exact(q, k, v, **kw)

    monkeypatch.setattr(layer_accuracy, "reference_attention", counting)
    row = run(cell(N=32, scope="layer", layer_depth=1, batch=6))
    assert row["status"] == "ok", row["reason"]
    assert seen and set(seen) == {4}, seen
    assert row["grad_rel_l2_x"] < 1e-5 and row["grad_rel_l2_params"] < 1e-5
