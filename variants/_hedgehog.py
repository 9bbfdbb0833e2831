"""Hedgehog's feature map (Zhang et al., ICLR 2024), shared by distilled and window_linear.

phi(x) = [softmax(x W + b), softmax(-(x W + b))] over F learned directions, in float32: every feature lies in [0, 1],
so no exp overflows whatever the scale of x, in any input dtype.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def hedgehog_features(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    """phi(x) in float32: x (B, H_kv, G or 1, L, D), weight (P, 1, D, F), bias (P, 1, 1, F) -> (B, H_kv, G or 1, L, 2F)
    (P = H_kv, one map per K/V head, or 1)."""
    proj = x.float() @ weight + bias  # (B, H_kv, G, L, F)
    return torch.cat([proj.softmax(-1), (-proj).softmax(-1)], dim=-1)


def float_map(module: nn.Module) -> tuple[Tensor, Tensor]:
    """module.weight (P, D, F) and module.bias (P, 1, F) in float32, shaped for hedgehog_features: cast once per
    parameter version when no gradient flows (decode, inference), fresh under autograd (a cached cast holds an old
    graph) or tracing (fake tensors have no data_ptr)."""
    weight, bias = module._parameters["weight"], module._parameters["bias"]  # not Module.__getattr__: runs per token
    if torch.compiler.is_compiling() or (torch.is_grad_enabled() and (weight.requires_grad or bias.requires_grad)):
        return weight.float()[:, None], bias.float()[:, None]
    key = (weight.data_ptr(), weight._version, bias.data_ptr(), bias._version, weight.dtype, weight.device)
    cached = module.__dict__.get("_float_cache")
    if cached is None or cached[0] != key:
        cached = (key, weight.detach().float()[:, None], bias.detach().float()[:, None])
        module.__dict__["_float_cache"] = cached  # not a buffer: never saved, never moved by .to()
    return cached[1], cached[2]
