"""A prefill cell: one call of the variant on N queries against M keys, timed paired with dense; and the memory tricks
of a prefill train cell, at the attention scope (here) or around a layer cell's blocks (harness.measure.layer).

The checked call scores sampled rows against the float64 reference (gradients of q, k, v in train mode) and is the
timer's first estimate; the timed step is built on AttentionVariant.prepare_call, so the variant's checks and its
backend resolution run before timing, never inside a timed call; the memory tricks wrap it; the baseline (dense,
backend auto) gets the same inputs, padding mask and tricks (harness.measure.speedup); the last timed call's output is
scored against the checked call's reference. With a kv_dtype (Cell.kv_dtype, forward cells) K and V are stored
quantized before the checked call and every call of the variant dequantizes them inside it
(harness.measure.kv_quant.StoredKV); the baseline, plain dense, reads K and V as they are (kv_dtype is a series field:
dense with an int8 cache is paired with dense); the reference is computed from the unquantized K and V. With a
scores_dtype int8 (Cell.scores_dtype) the variant's checked and timed calls carry int8_scores=True, the baseline's do
not (harness.measure.scores_quant); the checked call then scores no attention weights (a variant's attention_weights
are its float scores', not the int8 ones).

The tricks (train cells only: harness.cell_rules.tricks_reason, for planning and refusal alike). recompute (Cell.recompute):
"attention" runs the attention call under torch.utils.checkpoint (non-reentrant), so its backward recomputes the
call's forward instead of keeping what it saved; "layer" does so for the whole transformer block
(harness.measure.layer.Block). A variant that already recomputes inside its own backward (chunked) is checkpointed
like any other: the trick is around the call, never inside it, so nothing is counted twice. precision
(Cell.precision): "autocast-bf16" / "autocast-fp16" run the forward under torch.autocast on the cell's device, over
float32 inputs and parameters, and the backward outside it (as torch's AMP recipe does); the gradients are float32,
ready for the optimizer. fp16 training also needs a GradScaler: its step (scaling the loss, unscaling and checking the
gradients) is excluded from the timed call, which is forward + backward only. FLOPs stay the model's
(harness.measure.flops): a recompute's extra forward is not counted, so its cost shows as a lower TFLOP/s.
"""

from __future__ import annotations

import contextlib
from functools import partial
from typing import Any, Callable, ContextManager, Mapping

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from harness.measure.accuracy import Accuracy, check_accuracy, check_output, score_output
from harness.measure.context import MeasureContext
from harness.measure.flops import Flops, attention_flops, flops_fields
from harness.measure.kind import Checked, Phase, Prepared, TimedStep
from harness.measure.kv_quant import quantization_errors
from harness.measure.reference import nonfinite
from harness.measure.scores_quant import call_backend, scores_features, scores_fields
from harness.measure.settings import MeasureSettings
from harness.measure.speedup import baseline_for
from harness.measure.timer import Stopwatch
from harness.schema import Cell
from variants._quantize import StoredKV


class PrefillPhase(Phase):
    """The prefill cell's part of the measurement path (harness.measure.kind)."""

    def __init__(
        self,
        attn: Any,
        cell: Cell,
        qkv: tuple[Tensor, Tensor, Tensor],
        kv_mask: Tensor | None,
        settings: MeasureSettings,
        context: MeasureContext,
        device: torch.device,
    ):
        self.attn, self.cell, self.settings, self.context, self.device = attn, cell, settings, context, device
        self.q, self.k, self.v = qkv
        self.kv_mask = kv_mask
        self.training = cell.mode == "train"
        self.features = scores_features(cell.scores_dtype)  # what the variant's calls carry (int8_scores=True)
        self.tricks = tricked(cell, device)  # the call under the cell's memory tricks (the baseline's too)
        self.stored = StoredKV(self.k, self.v, cell.kv_dtype)  # K and V as held: quantized once, untimed
        # the variant's call also reads the stored K and V (dequantized inside the call)
        self.wrap = lambda call: self.tricks(self.stored.reading(call))
        self.accuracy: Accuracy | None = None
        self._step: Callable[[], Any] | None = None

    def prepare(self) -> Prepared:
        setup_s = _prepare(self.attn, self.q, self.k, self.v, self.cell, self.training, self.kv_mask)
        errors = quantization_errors(self.k, self.v, self.cell.kv_dtype)
        scores = scores_fields(self.q, self.k, self.cell.scores_dtype)  # kernel, error: of int8 scores, else None
        return Prepared(setup_s=setup_s, kv_bytes=self.stored.nbytes, **errors, **scores)

    def check(self) -> Checked:
        self.accuracy = check_accuracy(
            self.attn,
            self.q,
            self.k,
            self.v,
            causal=self.cell.causal,
            training=self.training,
            error_rows=self.settings.error_rows,
            seed=self.cell.seed,
            reference=self.settings.accuracy_reference,
            kv_mask=self.kv_mask,
            wrap=self.wrap,
            features=self.features,
            weights=not self.features,
        )
        return Checked(self.accuracy.fields, self.accuracy.call_s, self.accuracy.nonfinite)

    def ready(self) -> Callable[[], Any]:
        if self._step is None:
            args = (self.attn, self.q, self.k, self.v, self.cell.causal, self.training, self.kv_mask)
            self._step = timed_call(*args, wrap=self.wrap, features=self.features)
        return self._step

    def timed_step(self) -> TimedStep:
        make_step = partial(timed_call, wrap=self.tricks)  # the baseline under the same tricks, on K and V as they are
        baseline = baseline_for(self.cell, self.q, self.k, self.v, self.context, self.device, make_step, self.kv_mask)
        return TimedStep(self.ready(), baseline=baseline)

    def score_timed(self, output: Any) -> tuple[dict[str, Any], str | None]:
        output = output[0] if self.training else output  # a train step returns (output, gradients)
        check_output(output, self.q, self.v)
        bad = nonfinite(output)
        return ({}, bad) if bad else (score_output(self.accuracy, output), None)

    def flops(self, latency_s: float) -> Flops:
        backend = call_backend(self.attn, self.q, training=self.training, scores_dtype=self.cell.scores_dtype)
        executed, useful = attention_flops(self.attn, self.cell, backend=backend)
        return flops_fields(executed, latency_s, training=self.training, useful_attention_flops=useful)


def timed_call(
    attn: Any,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool,
    training: bool,
    kv_mask: Tensor | None = None,
    *,
    wrap: Callable[[Callable], Callable] | None = None,
    features: Mapping[str, Any] | None = None,
) -> Callable[[], Any]:
    """The timed call: forward under no_grad (returns the output), or forward + backward w.r.t. q, k, v and parameters
    (returns the output and the gradients); `wrap` puts the call under the cell's memory tricks
    (tricked); `features`: the call features it carries (int8_scores=True: harness.measure.scores_quant).

    The variant's checks and its backend resolution run here, once (AttentionVariant.prepare_call; a refusal raises
    NotSupportedError), never inside the timed call.
    """
    call = attn.prepare_call(q, k, v, causal=causal, kv_mask=kv_mask, training=training, **(features or {}))
    call = wrap(call) if wrap is not None else call
    if not training:

        def forward() -> Tensor:
            with torch.no_grad():
                return call(q, k, v)

        return forward
    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
    targets = [qg, kg, vg] + [p for p in attn.parameters() if p.requires_grad]
    grad_out = torch.randn(q.shape, generator=torch.Generator(device=q.device).manual_seed(1), device=q.device).to(
        q.dtype
    )

    def train() -> tuple:
        out = call(qg, kg, vg)
        return out, torch.autograd.grad(out, targets, grad_outputs=grad_out, allow_unused=True)

    return train


def _prepare(
    attn: torch.nn.Module, q: Tensor, k: Tensor, v: Tensor, cell: Cell, training: bool, kv_mask: Tensor | None = None
) -> float | None:
    """Call the variant's set-up hook, if any; its seconds (returned, else measured) become setup_s."""
    prepare = getattr(attn, "prepare", None)
    if not callable(prepare):
        return None
    with Stopwatch(q.device) as watch:
        spent = prepare(q, k, v, causal=cell.causal, kv_mask=kv_mask, training=training)
    return float(spent) if spent is not None else watch.seconds


Call = Callable[[Tensor, Tensor, Tensor], Tensor]
AUTOCAST_DTYPES = {"autocast-bf16": torch.bfloat16, "autocast-fp16": torch.float16}  # Cell.precision -> autocast dtype


def autocast(cell: Cell, device: torch.device) -> Callable[[], ContextManager[Any]]:
    """A factory of the cell's precision context: torch.autocast to its dtype on `device`, or nothing for fp32."""
    dtype = AUTOCAST_DTYPES.get(cell.precision)
    if dtype is None:
        return contextlib.nullcontext
    return lambda: torch.autocast(device.type, dtype=dtype)


def recomputed(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """fn, its activations recomputed in the backward pass (non-reentrant checkpoint) where autograd records it."""

    def call(*args: Any) -> Tensor:
        if not torch.is_grad_enabled():  # nothing would be kept for a backward: nothing to recompute
            return fn(*args)
        return checkpoint(fn, *args, use_reentrant=False)

    return call


def tricked(cell: Cell, device: torch.device) -> Callable[[Call], Call]:
    """call(q, k, v) -> the same call under the cell's precision and attention recompute (the attention scope).

    Under autocast the output comes back in the inputs' dtype (float32), as the variant contract and the float32
    gradient the cell feeds it expect; that cast is one pass over the output, inside the timed call.
    """
    precision = autocast(cell, device)
    plain = cell.precision not in AUTOCAST_DTYPES

    def wrap(call: Call) -> Call:
        def autocast_call(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            with precision():
                out = call(q, k, v)
            return out.to(q.dtype)

        inner = call if plain else autocast_call
        return recomputed(inner) if cell.recompute == "attention" else inner

    return wrap
