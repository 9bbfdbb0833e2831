"""distilled's and window_linear's decode steps by their hand-written kernels (variants/native/steps.c).

The kernels are built and loaded by variants._native.

Each wrapper takes exactly the arguments of the variant's pure step function (_distilled_math.step_sums,
_window_linear_math.window_linear_step), updates the same state in place and returns the same output, or returns why
its kernel cannot take the call (the caller, variants._decode_step.DecodeStep, then runs the function in torch).

The state is small (about 0.5 MiB at H=8, D=64, F=128), so the Python around a call is a fair part of a token's time.
A wrapper checks the token's tensors every call (new views each token, handed to the kernel with their strides: no
copies) but the state's only when they change: the state tensors' checks and the kernel's arguments for them (addresses,
sizes) are kept per state (its tensor objects, held weakly, at their addresses: one entry per decoding layer of a
model), since an in-place update changes neither; a storage swapped in place (``.data =``) is built anew. It allocates
only the output.
"""

from __future__ import annotations

import ctypes
import operator
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor

from variants._checks import softmax_scale
from variants._native import CONTIGUOUS_ROWS, NO_BACKWARD, native_library, tensor_reason

_FLOAT32 = torch.float32
# a kernel's name -> its last state tensors (held weakly) and what state_args made for them
# (a kernel's name, its first state tensor's id) -> the state tensors (held weakly), their addresses, what state_args
# made for them: one entry per decoding layer of a model; cleared when _KEPT are held
_STATE_ARGS: dict[tuple[str, int], tuple[tuple[weakref.ref, ...], list[int], StateArgs]] = {}
_KEPT = 256
MAX_RING = 65536  # window_linear's ring: its scores sit on the kernel's stack (256 KiB at this size)


class StateArgs(NamedTuple):
    """A kernel's state argument (the address of `fields`, its struct of the state's addresses and sizes: one ctypes
    argument instead of nine to fifteen) and the sizes a token must fit."""

    address: int
    fields: ctypes.Structure  # kept alive with the address
    batch: int
    kv_heads: int
    head_dim: int


_P, _I = ctypes.c_void_p, ctypes.c_int64


class DistilledArgs(ctypes.Structure):
    """steps.c's struct distilled_state, field for field."""

    _fields_ = [(name, _P) for name in ("kv", "z", "W", "bias")] + [(name, _I) for name in ("B", "H_kv", "P", "D", "F")]


class WindowLinearArgs(ctypes.Structure):
    """steps.c's struct window_linear_state, field for field."""

    _fields_ = (
        [(name, _P) for name in ("ring_k", "ring_v", "ring_real", "kv", "z", "W", "bias", "log_gamma")]
        + [(name, _I) for name in ("B", "H_kv", "P", "Wn", "D", "F")]
        + [("scale", ctypes.c_float)]
    )


def distilled_step(
    q_t: Tensor, k_t: Tensor, v_t: Tensor, kv: Tensor, z: Tensor, weight: Tensor, bias: Tensor
) -> Tensor | str:
    """_distilled_math.step_sums by distilled_step_f32: kv (B, H_kv, 1, 2F, D) and z (B, H_kv, 1, 2F, 1) gain
    phi(k_t) v_t^T and phi(k_t) in place; returns out_t (B, H, 1, D), or why the kernel cannot take the call."""
    state = state_args("distilled_step_f32", (kv, z, weight, bias), _distilled_state)
    tokens = state if isinstance(state, str) else token_args((q_t, k_t, v_t), state)
    if isinstance(tokens, str):
        return tokens
    out = torch.empty(state.batch, tokens[0], 1, state.head_dim, dtype=_FLOAT32)  # ints, not a Size: half the time
    native_library().distilled_step_f32(out.data_ptr(), *tokens, state.address)
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
    tensors = (ring_k, ring_v, ring_real, kv, z, weight, bias, log_gamma)
    state = state_args("window_linear_step_f32", tensors, _window_linear_state)
    tokens = state if isinstance(state, str) else token_args((q_t, k_t, v_t), state)
    if isinstance(tokens, str):
        return tokens
    if slot.dtype is not torch.int64 or not slot.is_cpu:
        return f"needs an int64 slot on CPU, got {slot.dtype} on {slot.device.type}"
    out = torch.empty(state.batch, tokens[0], 1, state.head_dim, dtype=_FLOAT32)
    if native_library().window_linear_step_f32(out.data_ptr(), *tokens, slot.data_ptr(), state.address):
        raise IndexError(f"ring slot {int(slot)} is outside the ring of {ring_k.shape[2]} slots")
    return out


def distilled_reason(q_t: Tensor, k_t: Tensor, v_t: Tensor, *state: Tensor) -> str | None:
    """Why distilled_step cannot take these arguments, or None (nothing is run)."""
    found = state_args("distilled_step_f32", state, _distilled_state)
    return _reason(found if isinstance(found, str) else token_args((q_t, k_t, v_t), found))


def window_linear_reason(q_t: Tensor, k_t: Tensor, v_t: Tensor, *state: Tensor) -> str | None:
    """Why window_linear_step cannot take these arguments, or None (nothing is run)."""
    ring_k, ring_v, ring_real, _, *sums_and_map = state  # the slot (checked per call) aside
    found = state_args("window_linear_step_f32", (ring_k, ring_v, ring_real, *sums_and_map), _window_linear_state)
    return _reason(found if isinstance(found, str) else token_args((q_t, k_t, v_t), found))


def state_args(kernel: str, tensors: tuple[Tensor, ...], make: Callable[..., StateArgs | str]) -> StateArgs | str:
    """`make(*tensors)`: the kernel's arguments for these state tensors, or why it cannot take them; kept for the next
    call with the same tensor objects at the same addresses. The library and the no-gradient check are looked at every
    call (grad mode may change between calls)."""
    library = native_library()
    if isinstance(library, str):
        return library
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return NO_BACKWARD
    key = (kernel, id(tensors[0]))
    last = _STATE_ARGS.get(key)
    addresses = [t.data_ptr() for t in tensors]  # a parameter's storage swapped in place (`.data =`) is seen here
    if last is not None and all(map(operator.is_, [r() for r in last[0]], tensors)) and last[1] == addresses:
        return last[2]
    made = make(*tensors)
    if not isinstance(made, str):
        if len(_STATE_ARGS) >= _KEPT:
            _STATE_ARGS.clear()
        _STATE_ARGS[key] = (tuple(weakref.ref(t) for t in tensors), addresses, made)
    return made


def token_args(tokens: tuple[Tensor, Tensor, Tensor], state: StateArgs) -> list[int] | str:
    """The token's q (B, H, 1, D), k and v (B, H_kv, 1, D) as the kernels take them (H, then each one's address, batch
    stride and head stride: views of a longer sequence are fine), or why they cannot: CPU, float32, no gradient, a
    contiguous last dimension, shapes that fit the state's B, H_kv and D (H a multiple of H_kv). Spelled out for the
    three tensors, no loop: it runs every token."""
    q, k, v = tokens
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return NO_BACKWARD
    for t in tokens:
        if not t.is_cpu or t.dtype is not _FLOAT32:
            return tensor_reason(t)
    B, H_kv, D = state.batch, state.kv_heads, state.head_dim
    batch, H, one, head_dim = q.shape
    kv_shape = (B, H_kv, 1, D)
    if k.shape != kv_shape or v.shape != kv_shape or (batch, one, head_dim) != (B, 1, D) or H % H_kv:
        return (
            f"the token's shapes {tuple(q.shape)}, {tuple(k.shape)} do not fit the state's (B={B}, H_kv={H_kv}, D={D})"
        )
    qs, ks, vs = q.stride(), k.stride(), v.stride()
    if qs[3] != 1 or ks[3] != 1 or vs[3] != 1:
        return CONTIGUOUS_ROWS
    return [H, q.data_ptr(), qs[0], qs[1], k.data_ptr(), ks[0], ks[1], v.data_ptr(), vs[0], vs[1]]


def _distilled_state(kv: Tensor, z: Tensor, weight: Tensor, bias: Tensor) -> StateArgs | str:
    """distilled_step_f32's state argument (kv, z, weight, bias, B, H_kv, P, D, F), or why not."""
    why = _state_reason((kv, z, weight, bias))
    if why is not None:
        return why
    B, H_kv, _, F2, D = kv.shape
    P, _, _, F = weight.shape
    if F2 != 2 * F or z.numel() != B * H_kv * F2 or weight.shape[2] != D or bias.numel() != P * F or P not in (1, H_kv):
        return "the sums' and the feature map's shapes disagree"
    fields = DistilledArgs(kv.data_ptr(), z.data_ptr(), weight.data_ptr(), bias.data_ptr(), B, H_kv, P, D, F)
    return StateArgs(ctypes.addressof(fields), fields, B, H_kv, D)


def _window_linear_state(
    ring_k: Tensor,
    ring_v: Tensor,
    ring_real: Tensor,
    kv: Tensor,
    z: Tensor,
    weight: Tensor,
    bias: Tensor,
    log_gamma: Tensor,
) -> StateArgs | str:
    """window_linear_step_f32's state argument (the ring, the sums, the map, B, H_kv, P, W, D, F, scale), or why
    not."""
    sums = _distilled_state(kv, z, weight, bias)
    why = sums if isinstance(sums, str) else _state_reason((ring_k, ring_v, log_gamma))
    if why is not None:
        return why
    B, H_kv, W, D = ring_k.shape
    if W > MAX_RING:  # the kernel scores the ring on its stack
        return f"takes a ring of at most {MAX_RING} slots, got {W}"
    P, F = sums.fields.P, sums.fields.F
    if ring_v.shape != ring_k.shape or (B, H_kv, D) != sums[2:] or log_gamma.numel() != P:
        return "the ring's, the sums' and log_gamma's shapes disagree"
    if ring_real.dtype is not torch.bool or not ring_real.is_contiguous() or ring_real.shape != (B, W):
        return "needs a contiguous (B, W) bool ring_real"
    ring = (ring_k.data_ptr(), ring_v.data_ptr(), ring_real.data_ptr())
    sums_and_map = (sums.fields.kv, sums.fields.z, sums.fields.W, sums.fields.bias, log_gamma.data_ptr())
    fields = WindowLinearArgs(*ring, *sums_and_map, B, H_kv, P, W, D, F, softmax_scale(D))
    return StateArgs(ctypes.addressof(fields), fields, B, H_kv, D)


def _state_reason(tensors: tuple[Tensor, ...]) -> str | None:
    """Why the kernels cannot take these state tensors, or None: on CPU, float32, contiguous (read as dense arrays and
    updated in place)."""
    for t in tensors:
        if not t.is_cpu or t.dtype is not _FLOAT32:
            return tensor_reason(t)
        if not t.is_contiguous():
            return "needs contiguous state tensors"
    return None


def _reason(found: list[Any] | str) -> str | None:
    """A reason, or None for arguments found."""
    return found if isinstance(found, str) else None
