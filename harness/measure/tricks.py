"""The memory tricks of a train cell: activations recomputed in the backward pass, and mixed precision.

recompute (Cell.recompute): "attention" runs the attention call under torch.utils.checkpoint (non-reentrant), so its
backward recomputes the call's forward instead of keeping what it saved; "layer" does so for the whole transformer
block (harness.measure.layer.Block). A variant that already recomputes inside its own backward (chunked) is
checkpointed like any other: the trick is around the call, never inside it, so nothing is counted twice.
precision (Cell.precision): "autocast-bf16" / "autocast-fp16" run the forward under torch.autocast on the cell's
device, over float32 inputs and parameters, and the backward outside it (as torch's AMP recipe does); the gradients
are float32, ready for the optimizer. fp16 training also needs a GradScaler: its step (scaling the loss, unscaling
and checking the gradients) is excluded from the timed call, which is forward + backward only.
FLOPs stay the model's (harness.measure.flops): a recompute's extra forward is not counted, so its cost shows as a
lower TFLOP/s. Which combinations are measured at all is harness.schema.tricks_reason, for planning and refusal alike.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from harness.schema import Cell

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
