"""Accuracy of a layer cell's stack (harness.measure.layer.Stack) against the same stack in float64 with exact attention.

The output: sampled rows of the last block's output; every block before it runs on all rows (its keys feed the next
block), in row chunks so the float64 scores stay within REFERENCE_CHUNK_BYTES. In train mode the gradients too: of x
and of the blocks' weights (the worst weight tensor), after one forward (under the cell's precision) and backward at
GRAD_CHECK_MAX_SEQ_LEN tokens and GRAD_CHECK_MAX_BATCH batch rows at most (the first ones: the float64 backward
keeps its scores for every row, B x H x n x n of them; at B=256 and n=512 that was 1 GiB per block), so
autocast's cost in accuracy is a number beside its savings in memory and time.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, ContextManager

import torch
from torch import Tensor

from harness.measure.reference import REFERENCE_CHUNK_BYTES, output_errors, rel_l2, sample_rows
from harness.measure.settings import MeasureSettings
from harness.schema import Cell
from variants import reference_attention

GRAD_CHECK_MAX_SEQ_LEN = 1024  # the layer's gradients are checked on the first min(N, this) tokens
GRAD_CHECK_MAX_BATCH = 4  # ... of the first min(B, this) batch rows


def layer_accuracy(
    stack: Any,
    x: Tensor,
    out: Tensor,
    kv_mask: Tensor | None,
    cell: Cell,
    settings: MeasureSettings,
    precision: Callable[[], ContextManager[Any]],
    *,
    unquantized: Any = None,
) -> dict[str, Any]:
    """Row fields: the output's errors on sampled rows and, for a train cell, grad_rel_l2_x and grad_rel_l2_params.
    `unquantized`: the float stack a quantized `stack` was made from, whose weights the reference copies (default
    `stack`)."""
    B, N = x.shape[0], x.shape[1]
    pattern = stack.attn.pattern if settings.accuracy_reference == "pattern" else None
    gold = _gold(unquantized if unquantized is not None else stack)
    rows = sample_rows(N, settings.error_rows, cell.seed).to(x.device)
    chunk = max(1, REFERENCE_CHUNK_BYTES[x.device.type] // (B * cell.heads * N * 8))
    every = torch.arange(N, device=x.device)
    with torch.no_grad():
        h = x.double()
        for i, block in enumerate(gold.blocks):
            want = rows if i == len(gold.blocks) - 1 else every  # the last block: the sampled rows only
            q, k, v = block.project(h)
            parts = [
                reference_attention(
                    q, k, v, causal=cell.causal, kv_mask=kv_mask, pattern=pattern, rows=want[j : j + chunk]
                )
                for j in range(0, len(want), chunk)
            ]
            h = block.finish(h[:, want], torch.cat(parts, dim=2))  # (B, rows, E)
    valid = kv_mask[:, rows] if kv_mask is not None else None
    fields = output_errors(out[:, rows].double()[:, None], h[:, None], valid)
    if cell.mode == "train":
        fields.update(_gradient_errors(stack, gold, x, kv_mask, cell, precision, pattern))
    return fields


def _gold(stack: Any) -> Any:
    """The stack in float64 without recompute (a checkpoint changes no value: nothing to recompute in the reference)."""
    gold = copy.deepcopy(stack).double()
    for block in gold.blocks:
        block.recompute = "none"
    return gold


def _gradient_errors(
    stack: Any,
    gold: Any,
    x: Tensor,
    kv_mask: Tensor | None,
    cell: Cell,
    precision: Callable[[], ContextManager[Any]],
    pattern: Any,
) -> dict[str, Any]:
    """dx and the weights' gradients of one forward (under the cell's precision) and backward on the first n tokens of
    the first batch rows, against the float64 stack's with exact attention; {} when the variant refuses n tokens (it
    was built for N)."""
    n, rows = min(x.shape[1], GRAD_CHECK_MAX_SEQ_LEN), min(x.shape[0], GRAD_CHECK_MAX_BATCH)
    xs, mask = x[:rows, :n], kv_mask[:rows, :n] if kv_mask is not None else None
    with torch.no_grad():
        q, k, v = stack.blocks[0].project(xs)
    if stack.attn.not_supported_reasons(q, k, v, causal=cell.causal, kv_mask=mask, training=True):
        return {}
    del q, k, v
    g = torch.randn(xs.shape, generator=torch.Generator(device=x.device).manual_seed(cell.seed + 11), device=x.device)
    if mask is not None:
        g = g * mask[:, :, None]  # padded rows are unspecified: no gradient flows from them
    xg = xs.detach().requires_grad_(True)
    with precision():
        mine = stack(xg, causal=cell.causal, kv_mask=mask)
    grads = torch.autograd.grad(mine, [xg, *stack.own_parameters()], grad_outputs=g.to(mine.dtype))

    def exact(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return reference_attention(q, k, v, causal=cell.causal, kv_mask=mask, pattern=pattern)

    x64 = xs.double().requires_grad_(True)
    ref = torch.autograd.grad(gold(x64, attend=exact), [x64, *gold.own_parameters()], grad_outputs=g.double())
    return dict(
        grad_rel_l2_x=rel_l2(grads[0], ref[0]),
        grad_rel_l2_params=max(rel_l2(a, b) for a, b in zip(grads[1:], ref[1:])),
        grad_check_seq_len=n,
    )
