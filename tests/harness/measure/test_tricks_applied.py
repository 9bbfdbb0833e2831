"""The memory tricks are really applied in the timed step (spies, no timing): recompute checkpoints what it says (the
forward it names runs again in the backward), autocast runs the step's matmuls in its dtype, the paired baseline gets
the same tricks, and a train step is forward + backward with the gradients of every input and weight."""

from __future__ import annotations

import math

import pytest
import torch

from harness.measure import MeasureSettings
from harness.measure import prefill as prefill_module
from harness.measure.context import MeasureContext
from harness.measure.layer import LayerPhase
from harness.measure.prefill import PrefillPhase
from harness.schema import Cell
from variants import build_config, build_variant

FAST = MeasureSettings(time_budget_s=0.005, repeats=2, error_rows=8)
B, H, N, D = 1, 2, 16, 8
DTYPE_OF = {"fp32": torch.float32, "autocast-bf16": torch.bfloat16, "autocast-fp16": torch.float16}


def cell(scope="attention", mode="train", recompute="none", precision="fp32", depth=1) -> Cell:
    return Cell(
        variant="dense",
        config=build_config("dense", backend="reference").to_dict(),
        seq_len=N,
        kv_len=N,
        batch=B,
        heads=H,
        head_dim=D,
        dtype="float32",
        device="cpu",
        causal=True,
        mode=mode,
        scope=scope,
        recompute=recompute,
        precision=precision,
        layer_depth=depth,
        inputs="gaussian",
        seed=0,
    )


def spied(attn, log: list):
    """attn whose prepared call records, each time it runs: grad mode, autocast, q's dtype and a q @ k^T's dtype."""
    real = attn.prepare_call

    def prepare_call(q, k, v, **kw):
        call = real(q, k, v, **kw)

        def spy(q, k, v):
            log.append((torch.is_grad_enabled(), torch.is_autocast_enabled("cpu"), q.dtype, (q @ k.mT).dtype))
            return call(q, k, v)

        return spy

    attn.prepare_call = prepare_call
    return attn


def qkv():
    g = torch.Generator().manual_seed(3)
    return tuple(torch.randn(B, H, N, D, generator=g) for _ in range(3))


def plain_attention(q, k, v):
    """Causal softmax attention written out (float64), the independent answer."""
    s = (q.double() @ k.double().mT) / math.sqrt(D)
    s = s.masked_fill(torch.ones(N, N, dtype=torch.bool).triu(1), float("-inf"))
    return s.softmax(-1) @ v.double()


def prefill_phase(c: Cell, log: list, context: MeasureContext | None = None) -> PrefillPhase:
    attn = spied(build_variant("dense", backend="reference"), log).train(c.mode == "train")
    return PrefillPhase(attn, c, qkv(), None, FAST, context or MeasureContext(), torch.device("cpu"))


@pytest.mark.parametrize("recompute, forwards, checkpoints", [("none", 1, 0), ("attention", 2, 1)])
def test_attention_recompute_runs_the_calls_forward_again_in_the_backward(
    monkeypatch, recompute, forwards, checkpoints
):
    used = []
    real = prefill_module.checkpoint
    monkeypatch.setattr(prefill_module, "checkpoint", lambda *a, **kw: used.append(1) or real(*a, **kw))
    log = []
    step = prefill_phase(cell(recompute=recompute), log).ready()
    out, grads = step()
    assert len(log) == forwards and all(grad for grad, *_ in log)  # the recomputed forward records a graph too
    assert len(used) == checkpoints
    # forward + backward of q, k, v against the independent formula, with the step's seeded upstream gradient
    q, k, v = (t.double().requires_grad_(True) for t in qkv())
    ref = plain_attention(q, k, v)
    grad_out = torch.randn(q.shape, generator=torch.Generator().manual_seed(1))
    want = torch.autograd.grad(ref, (q, k, v), grad_outputs=grad_out.double())
    assert torch.allclose(out.double(), ref, atol=1e-5)
    assert len(grads) == 3 and all(torch.allclose(a.double(), b, atol=1e-5) for a, b in zip(grads, want))


@pytest.mark.parametrize("precision", ["fp32", "autocast-bf16", "autocast-fp16"])
def test_the_attention_step_runs_its_matmuls_in_the_autocast_dtype_and_returns_float32(precision):
    log = []
    out, grads = prefill_phase(cell(precision=precision), log).ready()()
    (_, autocast, q_dtype, scores_dtype), *_ = log
    assert (autocast, q_dtype, scores_dtype) == (precision != "fp32", torch.float32, DTYPE_OF[precision])
    assert out.dtype == torch.float32 and {g.dtype for g in grads} == {torch.float32}  # ready for the optimizer


@pytest.mark.parametrize(
    "recompute, precision, forwards, dtype",
    [("attention", "fp32", 2, torch.float32), ("none", "autocast-bf16", 1, torch.bfloat16)],
)
def test_the_paired_baseline_runs_under_the_same_tricks(recompute, precision, forwards, dtype):
    context, base_log = MeasureContext(), []
    context.baselines[("cpu", "float32")] = spied(build_variant("dense").eval(), base_log)
    timed = prefill_phase(cell(recompute=recompute, precision=precision), [], context).timed_step()
    assert timed.baseline.step is not None, timed.baseline.note
    base_log.clear()  # its checked call ran when the step was made
    timed.baseline.step()
    assert len(base_log) == forwards and {scores for *_, scores in base_log} == {dtype}


def test_a_forward_step_runs_once_without_autograd_and_returns_the_output():
    log = []
    out = prefill_phase(cell(mode="forward"), log).ready()()
    assert log == [(False, False, torch.float32, torch.float32)]
    assert torch.allclose(out.double(), plain_attention(*qkv()), atol=1e-5)


def layer_phase(c: Cell, log: list) -> tuple[LayerPhase, list]:
    """A prepared layer phase whose variant and every block's projections are counted."""
    attn = spied(build_variant("dense", backend="reference"), log).train(c.mode == "train")
    q = torch.randn(B, H, N, D, generator=torch.Generator().manual_seed(5))
    phase = LayerPhase(attn, c, q, None, FAST, torch.device("cpu"))
    phase.prepare()
    projected = []
    for i, block in enumerate(phase.stack.blocks):
        real = block.project
        block.project = lambda x, i=i, real=real: projected.append(i) or real(x)
    return phase, projected


@pytest.mark.parametrize(
    "recompute, projections, attention_calls",
    [("none", [0, 1], 2), ("attention", [0, 1], 4), ("layer", [0, 1, 0, 1], 4)],
)
def test_layer_recompute_reruns_the_forward_it_names_in_each_block(recompute, projections, attention_calls):
    log = []
    phase, projected = layer_phase(cell("layer", recompute=recompute, depth=2), log)
    step = phase.ready()  # its one untimed projection (to check the call) is made here
    projected.clear(), log.clear()
    step()
    # forward: block 0 then block 1; the backward recomputes block 1 first, then block 0 (layer), or only the calls
    assert sorted(projected) == sorted(projections) and projected[:2] == [0, 1]
    if recompute == "layer":
        assert projected == [0, 1, 1, 0]
    assert len(log) == attention_calls and all(grad for grad, *_ in log)


@pytest.mark.parametrize("precision", ["fp32", "autocast-bf16", "autocast-fp16"])
def test_the_layer_train_step_runs_its_projections_and_attention_in_the_autocast_dtype(precision):
    log = []
    phase, _ = layer_phase(cell("layer", recompute="layer", precision=precision), log)
    grads = phase.ready()()
    assert {(autocast, q, scores) for _, autocast, q, scores in log} == {
        (precision != "fp32", DTYPE_OF[precision], DTYPE_OF[precision])  # q comes out of an autocast projection
    }
    assert {g.dtype for g in grads} == {torch.float32}


def test_the_layer_train_step_is_the_gradient_of_x_and_of_every_weight():
    phase, _ = layer_phase(cell("layer", depth=2), [])
    grads = phase.ready()()
    stack = phase.stack
    weights = list(stack.parameters())
    assert len(weights) == 2 * 9  # each block's 2 norms and 7 projections (dense has no weights of its own)
    x = phase.x.detach().requires_grad_(True)
    out = stack(x, causal=True)
    grad_out = torch.randn(x.shape, generator=torch.Generator().manual_seed(1))
    want = torch.autograd.grad(out, [x, *weights], grad_outputs=grad_out)
    assert len(grads) == 1 + len(weights)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(grads, want))


def test_a_layer_forward_step_runs_without_autograd_and_returns_the_stacks_output():
    log = []
    phase, projected = layer_phase(cell("layer", mode="forward", depth=2), log)
    step = phase.ready()
    projected.clear(), log.clear()
    out = step()
    assert projected == [0, 1] and [grad for grad, *_ in log] == [False, False]
    with torch.no_grad():
        assert torch.allclose(out, phase.stack(phase.x, causal=True), atol=1e-6)
