"""distilled's and window_linear's decode steps by their hand-written kernels (variants/native/steps.c, built and
loaded by variants._native).

Each wrapper takes exactly the arguments of the variant's pure step function (distilled._step_sums,
_window_linear_math.window_linear_step), updates the same state in place and returns the same output, or returns why
its kernel cannot take the call (the caller, variants._decode_step.DecodeStep, then runs the function in torch). The
state is small (about 0.5 MiB at H=8, D=64, F=128), so the Python around a call is a fair part of a token's time: a
wrapper checks only what the kernel needs (CPU, float32, no gradient, layouts), allocates only the output, and hands the
token views to the kernel with their strides instead of copying them.
"""

from __future__ import annotations

import torch
from torch import Tensor

from variants._checks import softmax_scale
from variants._native import native_library

_FLOAT32 = torch.float32


def distilled_step(
    q_t: Tensor, k_t: Tensor, v_t: Tensor, kv: Tensor, z: Tensor, weight: Tensor, bias: Tensor
) -> Tensor | str:
    """distilled._step_sums by distilled_step_f32: kv (B, H_kv, 1, 2F, D) and z (B, H_kv, 1, 2F, 1) gain phi(k_t) v_t^T
    and phi(k_t) in place; returns out_t (B, H, 1, D), or why the kernel cannot take the call."""
    why = distilled_reason(q_t, k_t, v_t, kv, z, weight, bias)
    if why is not None:
        return why
    B, H, _, D = q_t.shape
    out = torch.empty(B, H, 1, D)
    native_library().distilled_step_f32(
        *token_args((q_t, k_t, v_t)), kv.data_ptr(), z.data_ptr(), weight.data_ptr(), bias.data_ptr(), out.data_ptr(),
        B, H, kv.shape[1], weight.shape[0], D, weight.shape[-1],
    )  # fmt: skip
    return out


def window_linear_step(
    q_t: Tensor,
    k_t: Tensor,
    v_t: Tensor,
    ring_k: Tensor,
    ring_v: Tensor,
    ring_real: Tensor,
    slot: Tensor,
    kv: Tensor,
    z: Tensor,
    weight: Tensor,
    bias: Tensor,
    log_gamma: Tensor,
) -> Tensor | str:
    """_window_linear_math.window_linear_step by window_linear_step_f32: the leaving key of ring slot `slot` ((1,)
    int64) joins kv, z, the token takes the slot (ring_k, ring_v (B, H_kv, W, D), ring_real (B, W) in place), q_t
    attends; returns (B, H, 1, D), or why the kernel cannot take the call."""
    why = window_linear_reason(q_t, k_t, v_t, ring_k, ring_v, ring_real, slot, kv, z, weight, bias, log_gamma)
    if why is not None:
        return why
    B, H, _, D = q_t.shape
    out = torch.empty(B, H, 1, D)
    native_library().window_linear_step_f32(
        *token_args((q_t, k_t, v_t)), ring_k.data_ptr(), ring_v.data_ptr(), ring_real.data_ptr(), slot.data_ptr(),
        kv.data_ptr(), z.data_ptr(), weight.data_ptr(), bias.data_ptr(), log_gamma.data_ptr(), out.data_ptr(),
        B, H, ring_k.shape[1], weight.shape[0], ring_k.shape[2], D, weight.shape[-1], softmax_scale(D),
    )  # fmt: skip
    return out


def distilled_reason(
    q_t: Tensor, k_t: Tensor, v_t: Tensor, kv: Tensor, z: Tensor, weight: Tensor, bias: Tensor
) -> str | None:
    """Why distilled_step cannot take these arguments, or None (nothing is run)."""
    return step_reason((q_t, k_t, v_t), (kv, z, weight, bias)) or library_reason()


def window_linear_reason(
    q_t: Tensor,
    k_t: Tensor,
    v_t: Tensor,
    ring_k: Tensor,
    ring_v: Tensor,
    ring_real: Tensor,
    slot: Tensor,
    kv: Tensor,
    z: Tensor,
    weight: Tensor,
    bias: Tensor,
    log_gamma: Tensor,
) -> str | None:
    """Why window_linear_step cannot take these arguments, or None (nothing is run)."""
    why = step_reason((q_t, k_t, v_t), (ring_k, ring_v, kv, z, weight, bias, log_gamma))
    if why is None and not (ring_real.dtype is torch.bool and ring_real.is_contiguous() and slot.dtype is torch.int64):
        why = "needs a contiguous bool ring_real and an int64 slot"
    return why or library_reason()


def library_reason() -> str | None:
    """Why the kernels cannot be built or loaded here (variants._native.native_library), or None."""
    library = native_library()
    return library if isinstance(library, str) else None


def token_args(tokens: tuple[Tensor, ...]) -> list[int]:
    """Each token (B, heads, 1, D) as the kernels take it: its address, batch stride and head stride."""
    args = []
    for t in tokens:
        sb, sh, _, _ = t.stride()
        args += (t.data_ptr(), sb, sh)
    return args


def step_reason(tokens: tuple[Tensor, ...], state: tuple[Tensor, ...]) -> str | None:
    """Why a step kernel cannot take these tensors, or None: all on CPU in float32 and without a gradient, the tokens
    (B, heads, 1, D) with a contiguous last dimension (views of a longer sequence are fine), the state and parameters
    contiguous (the kernel reads them as dense arrays and updates the state in place). Cheap: it runs every token."""
    for t in tokens + state:
        if not t.is_cpu:
            return f"runs on CPU only, got {t.device.type}"
        if t.dtype is not _FLOAT32:
            return f"needs float32, got {t.dtype}"
    if torch.is_grad_enabled() and any(t.requires_grad for t in tokens + state):
        return "has no backward: decode under torch.no_grad()"
    for t in tokens:
        if t.shape[2] != 1 or t.stride()[3] != 1:
            return "takes one token per head with a contiguous last dimension"
    for t in state:
        if not t.is_contiguous():
            return "needs contiguous state tensors"
    return None
