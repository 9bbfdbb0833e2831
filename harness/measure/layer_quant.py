"""A layer cell's blocks with their projections dynamically quantized to int8 (Cell.precision int8-dynamic), and the
bytes a stack's weights hold.

int8-dynamic: a copy of the float32 stack whose projections (W_q, W_k, W_v, W_o and the MLP's three) are torch's
dynamically quantized Linear: int8 weights with one scale per tensor (symmetric: zero point 0), the activations
quantized per call from their own range, the matmul in int8 (fbgemm / onednn on x86, qnnpack on ARM; no CUDA
kernel). The norms and the variant stay float32 and the variant instance is shared with the float stack, so the
float64 reference (harness.measure.layer_accuracy) copies the unquantized weights the int8 ones were rounded from.

weight_bytes: the stack's own parameters' bytes (norms and projections, not the variant's), a quantized projection
counted from its packed weight: its int8 values, a scale and a zero point per tensor (or per output channel) as
torch returns them (float64 and int64), and its bias.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
from torch.ao.quantization import quantize_dynamic

QPARAM_BYTES = (
    8 + 8
)  # one scale (float64) and one zero point (int64) per tensor or output channel, as torch returns them


def quantized_stack(stack: Any) -> Any:
    """A copy of `stack` (harness.measure.layer.Stack) with every block's projections dynamically quantized to int8;
    the variant (its own weights included) is the same instance, not copied and not quantized."""
    shared = {id(stack.attn): stack.attn}  # deepcopy's memo: the variant stays the one the cell built
    names = {f"blocks.{i}.{name}" for i, block in enumerate(stack.blocks) for name in block.projections}
    with warnings.catch_warnings():
        # torch 2.13 deprecates torch.ao.quantization and quantized tensors (successor: torchao's quantize_ with
        # Int8DynamicActivationInt8WeightConfig, not installed here); only these two warnings are silenced
        warnings.filterwarnings("ignore", message="torch.ao.quantization is deprecated")
        warnings.filterwarnings("ignore", message="torch.quantize_per_tensor, torch.quantize_per_channel")
        return quantize_dynamic(copy.deepcopy(stack, shared), names, dtype=torch.qint8, inplace=True)


def weight_bytes(stack: Any) -> int:
    """Bytes of the stack's own weights (float or int8, see the module doc); the variant's own are left out."""
    total = sum(p.nbytes for p in stack.own_parameters())  # a quantized projection holds no Parameter
    for module in stack.blocks.modules():
        if isinstance(module, DynamicLinear):
            total += packed_bytes(module)
    return total


def packed_bytes(linear: nn.Module) -> int:
    """A dynamically quantized Linear's bytes: int8 weight values, a scale and zero point per tensor or per output
    channel (QPARAM_BYTES), and its bias."""
    weight, bias = linear._packed_params._weight_bias()  # (out, in) qint8; (out,) float32 or None
    if weight.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
        groups = weight.q_per_channel_scales().numel()
    else:
        groups = 1
    return weight.numel() * weight.element_size() + groups * QPARAM_BYTES + (bias.nbytes if bias is not None else 0)
