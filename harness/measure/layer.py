"""A layer cell: a stack of L pre-norm transformer blocks around the variant, timed as a whole (L = Cell.layer_depth).

x (B, N, E = H * D) -> x + W_o attn(W_q h, W_k h, W_v h), h = RMSNorm(x)  (k, v with H_kv heads)
                    -> x + W_2 (silu(W_1 h) * W_3 h),       h = RMSNorm(x)  (SwiGLU, width ~2.7 E)
and so on for each block of the stack (one variant instance shared by the blocks, each block its own weights).
Weights are random, seeded by the cell; x is the cell's q inputs laid out as (B, N, H * D), so the input distribution
still chooses x. Accuracy (harness.measure.layer_accuracy): the stack's output on sampled rows against the same stack
(same weights) in float64 with exact attention (or the variant's pattern), so it shows how much of the attention error
survives the projections, the residuals and the MLPs; in train mode also the gradients of x and of the blocks' weights.
precision int8-dynamic (forward, CPU) measures an int8 copy of the stack (harness.measure.layer_quant) against the
float64 reference of the float weights it was made from; every layer row records its stack's weight_bytes.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, ContextManager

import torch
from einops import rearrange
from torch import Tensor, nn

from harness.measure.accuracy import check_output
from harness.measure.flops import Flops, attention_flops, flops_fields
from harness.measure.layer_accuracy import layer_accuracy
from harness.measure.layer_quant import quantized_stack, weight_bytes
from harness.measure.kind import Checked, Phase, Prepared, TimedStep
from harness.measure.reference import nonfinite
from harness.measure.settings import MeasureSettings
from harness.measure.timer import Stopwatch
from harness.measure.prefill import autocast, recomputed
from harness.cell_rules import INT8_DYNAMIC
from harness.schema import Cell

MLP_RATIO = 2.7  # SwiGLU hidden width / model width (LLaMA's 8/3, rounded up)


def mlp_width(E: int) -> int:
    """The SwiGLU hidden width: MLP_RATIO * E rounded to a multiple of 64 (at least 64)."""
    return max(64, int(round(MLP_RATIO * E / 64)) * 64)


class Block(nn.Module):
    """A pre-norm transformer block (RMSNorm, GQA projections, the variant, SwiGLU MLP, residuals).

    recompute (Cell.recompute, harness.measure.prefill): "attention" checkpoints the variant's call, "layer" the whole
    block, so the backward recomputes their forward instead of keeping its activations.
    """

    projections = ("wq", "wk", "wv", "wo", "w1", "w3", "w2")  # its nn.Linear weights (int8-dynamic quantizes them)

    def __init__(self, attn: nn.Module, *, heads: int, kv_heads: int, head_dim: int, recompute: str = "none"):
        super().__init__()
        E, F = heads * head_dim, mlp_width(heads * head_dim)
        self.attn, self.heads, self.kv_heads, self.recompute = attn, heads, kv_heads, recompute
        self.norm1, self.norm2 = nn.RMSNorm(E), nn.RMSNorm(E)
        self.wq = nn.Linear(E, heads * head_dim, bias=False)
        self.wk = nn.Linear(E, kv_heads * head_dim, bias=False)
        self.wv = nn.Linear(E, kv_heads * head_dim, bias=False)
        self.wo = nn.Linear(heads * head_dim, E, bias=False)
        self.w1, self.w3, self.w2 = (
            nn.Linear(E, F, bias=False),
            nn.Linear(E, F, bias=False),
            nn.Linear(F, E, bias=False),
        )

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q (B, H, N, D), k and v (B, H_kv, N, D) from x (B, N, E)."""
        h = self.norm1(x)
        q = rearrange(self.wq(h), "b n (h d) -> b h n d", h=self.heads)
        k = rearrange(self.wk(h), "b n (h d) -> b h n d", h=self.kv_heads)
        v = rearrange(self.wv(h), "b n (h d) -> b h n d", h=self.kv_heads)
        return q, k, v

    def finish(self, x: Tensor, a: Tensor) -> Tensor:
        """The rest of the block, row by row: x (B, R, E) + W_o a (a: (B, H, R, D)), then the MLP residual."""
        x = x + self.wo(rearrange(a, "b h n d -> b n (h d)"))
        h = self.norm2(x)
        return x + self.w2(nn.functional.silu(self.w1(h)) * self.w3(h))

    def forward(
        self,
        x: Tensor,
        *,
        causal: bool = False,
        kv_mask: Tensor | None = None,
        attend: Callable[[Tensor, Tensor, Tensor], Tensor] | None = None,
    ) -> Tensor:
        """x (B, N, E) -> (B, N, E). `attend`: the variant's call prepared for this block's q, k, v (prepare_call, which
        binds causal and kv_mask); the timed steps pass it so that no check runs inside them. Default: the checked call."""
        if self.recompute == "layer":
            return recomputed(self._forward)(x, causal, kv_mask, attend)
        return self._forward(x, causal, kv_mask, attend)

    def _forward(self, x: Tensor, causal: bool, kv_mask: Tensor | None, attend: Callable | None) -> Tensor:
        q, k, v = self.project(x)
        call = attend if attend is not None else partial(self.attn, causal=causal, kv_mask=kv_mask)
        a = recomputed(call)(q, k, v) if self.recompute == "attention" else call(q, k, v)
        return self.finish(x, a)

    def linear_flops(self, B: int, N: int) -> int:
        """Forward FLOPs of the projections and the MLP (2 per multiply-add)."""
        linears = [getattr(self, name) for name in self.projections]
        return 2 * B * N * sum(m.in_features * m.out_features for m in linears)

    def own_parameters(self) -> list[nn.Parameter]:
        """The block's weights (norms and projections), not the variant's."""
        return [p for name, p in self.named_parameters() if not name.startswith("attn.")]


class Stack(nn.Module):
    """L blocks, one after the other, around one variant instance (its own parameters, if any, shared by the blocks)."""

    def __init__(self, blocks: list[Block]):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.attn = blocks[0].attn

    def forward(self, x: Tensor, *, causal: bool = False, kv_mask: Tensor | None = None, attend: Any = None) -> Tensor:
        """x (B, N, E) -> (B, N, E) through every block (each under its own recompute); `attend`: as Block.forward's."""
        for block in self.blocks:
            x = block(x, causal=causal, kv_mask=kv_mask, attend=attend)
        return x

    def linear_flops(self, B: int, N: int) -> int:
        return sum(block.linear_flops(B, N) for block in self.blocks)

    def own_parameters(self) -> list[nn.Parameter]:
        """The blocks' weights, in order (the variant's own parameters left out: the float64 reference has none)."""
        return [p for block in self.blocks for p in block.own_parameters()]


def build_stack(attn: nn.Module, cell: Cell, dtype: torch.dtype, device: torch.device) -> Stack:
    """The cell's Cell.layer_depth blocks around `attn`, weights seeded by the cell (the variant's own parameters
    untouched); the first block's weights are those a one-block cell has."""
    torch.manual_seed(cell.seed + 7919)
    blocks = [
        Block(attn, heads=cell.heads, kv_heads=cell.kv_heads, head_dim=cell.head_dim, recompute=cell.recompute)
        for _ in range(cell.layer_depth)
    ]
    return Stack(blocks).to(device=device, dtype=dtype)


class LayerPhase(Phase):
    """The layer cell's part of the measurement path (harness.measure.kind); x is q (B, H, N, D) as (B, N, H * D).
    A timed call's output is not scored again (the stack's float64 reference is the costly part of its check)."""

    prepare_stage = "build"

    def __init__(
        self, attn: Any, cell: Cell, q: Tensor, kv_mask: Tensor | None, settings: MeasureSettings, device: torch.device
    ):
        self.attn, self.cell, self.q, self.kv_mask, self.settings, self.device = (
            attn,
            cell,
            q,
            kv_mask,
            settings,
            device,
        )
        self.training, self.precision = cell.mode == "train", autocast(cell, device)
        self.x = rearrange(q, "b h n d -> b n (h d)").contiguous()  # (B, N, E)
        self.stack: Stack | None = None  # the stack measured: the float one, or its int8-dynamic copy
        self.float_stack: Stack | None = None  # the weights the float64 reference copies
        self._step: Callable[[], Any] | None = None

    def prepare(self) -> Prepared:
        self.float_stack = build_stack(self.attn, self.cell, self.q.dtype, self.device).train(self.training)
        int8 = self.cell.precision == INT8_DYNAMIC
        self.stack = quantized_stack(self.float_stack) if int8 else self.float_stack
        return Prepared(weight_bytes=weight_bytes(self.stack))

    def check(self) -> Checked:
        cell, x = self.cell, self.x
        with Stopwatch(self.device) as watch, torch.no_grad(), self.precision():
            out = self.stack(x, causal=cell.causal, kv_mask=self.kv_mask)
        check_output(rearrange(out, "b n (h d) -> b h n d", h=cell.heads), self.q, self.q)
        bad = nonfinite(out)
        if bad:
            return Checked({}, watch.seconds, bad)
        fields = layer_accuracy(
            self.stack, x, out, self.kv_mask, cell, self.settings, self.precision, unquantized=self.float_stack
        )
        return Checked(fields, watch.seconds)

    def ready(self) -> Callable[[], Any]:
        if self._step is None:
            self._step = _step(self.stack, self.x, self.cell.causal, self.kv_mask, self.training, self.precision)
        return self._step

    def timed_step(self) -> TimedStep:
        return TimedStep(self.ready())

    def flops(self, latency_s: float) -> Flops:
        cell, attn = self.cell, self.attn
        attention, useful = attention_flops(attn, cell, backend=attn.resolve_backend(self.q, training=self.training))
        return flops_fields(
            cell.layer_depth * attention,  # every block of the stack
            latency_s,
            training=self.training,
            linear_flops=self.stack.linear_flops(cell.batch, cell.seq_len),
            useful_attention_flops=cell.layer_depth * useful,
        )


def _step(
    stack: Stack,
    x: Tensor,
    causal: bool,
    kv_mask: Tensor | None,
    training: bool,
    precision: Callable[[], ContextManager[Any]],
) -> Callable[[], Any]:
    """The timed call: the stack's forward under no_grad, or forward + backward w.r.t. x and every parameter; the
    forward under the cell's precision (autocast), the backward outside it, as torch's AMP recipe runs them.

    The variant's call is checked here, once, on q, k, v projected like the timed calls' (prepare_call), not in them.
    """
    with torch.no_grad(), precision():
        q, k, v = stack.blocks[0].project(x)
    attend = stack.attn.prepare_call(q, k, v, causal=causal, kv_mask=kv_mask, training=training)
    del q, k, v
    if not training:

        def forward() -> Tensor:
            with torch.no_grad(), precision():
                return stack(x, attend=attend)

        return forward
    xg = x.detach().requires_grad_(True)
    targets = [xg] + [p for p in stack.parameters() if p.requires_grad]
    grad_out = torch.randn(x.shape, generator=torch.Generator(device=x.device).manual_seed(1), device=x.device).to(
        x.dtype
    )

    def train() -> tuple:
        with precision():
            out = stack(xg, attend=attend)
        return torch.autograd.grad(out, targets, grad_outputs=grad_out, allow_unused=True)

    return train
