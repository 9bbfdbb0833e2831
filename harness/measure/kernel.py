"""Which SDPA kernel torch ran and which operator xformers chose: the op names of one profiled call, not timed.

``torch.nn.functional.scaled_dot_product_attention`` dispatches to one of several kernels and may
fall back to the math one silently (an unsupported mask, dtype or head dim). xformers'
memory_efficient_attention dispatches too, and without the flash-attn package its operators run
torch's own kernels (xformers' "-pt" operators), so "xformers vs sdpa" may time the same kernel twice.
The row records what ran, read from the profiler, not what was asked for. memory_and_kernel is the
memory stage of every cell kind: the call's peak memory and, from the same profiled call where there
is one, its kernels.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

# aten op -> kernel name (forward ops only: a backward op's name has "_backward" appended, never matched exactly).
SDPA_OPS = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_attention_math_for_mps": "math",
}


def sdpa_kernel(op_names: Iterable[str]) -> str | None:
    """The SDPA kernel(s) among these op names ("flash"; "efficient+math" when a call used two), or None if no SDPA op ran."""
    found = sorted({SDPA_OPS[name] for name in op_names if name in SDPA_OPS})
    return "+".join(found) if found else None


# xformers' forward operators as the profiler names them -> xformers' own operator name (fmha.<op>.FwOp.NAME, version
# dropped; "-pt": the operator runs torch's kernel, the one SDPA may run too).
XFORMERS_OPS = {
    "xformers_flash3::flash_fwd": "fa3F",  # FlashAttention-3 (Hopper), from the flash_attn_3 package
    "xformers_flash::flash_fwd": "fa2F",  # FlashAttention-2: the flash-attn package's, or torch's (below)
}
TORCH_FLASH_OP = "aten::_flash_attention_forward"  # torch's FlashAttention-2 kernel, called by name
TORCH_EFFICIENT_OP = "aten::_efficient_attention_forward"  # torch's cutlass (memory-efficient) kernel, called by name


def xformers_op(op_names: Iterable[str]) -> str | None:
    """The operator xformers ran among these op names (fa3F, fa2F, fa2F-pt, cutlassF-pt), or None when it ran none.

    xformers' cutlass operator calls torch's efficient kernel directly (no op of its own), so that kernel with no
    SDPA op around it reads as cutlassF-pt; inside SDPA the same kernel is SDPA's ("efficient").
    """
    names = set(op_names)
    found = sorted({XFORMERS_OPS[name] for name in names if name in XFORMERS_OPS})
    if "fa2F" in found and TORCH_FLASH_OP in names:
        found[found.index("fa2F")] = "fa2F-pt"
    if not found and TORCH_EFFICIENT_OP in names and sdpa_kernel(names) is None:
        found = ["cutlassF-pt"]
    return "+".join(found) if found else None


def memory_and_kernel(ready: Callable[[], Callable[[], Any]], device: torch.device) -> dict[str, Any]:
    """peak_memory_bytes, memory_method, sdpa_kernel and xformers_op of one call of the step `ready()` returns.

    `ready` makes the step ready to call once, untimed and before the memory is counted (a decode cell
    builds a fresh state in it); it is called again when the memory measurement saw no op names (CUDA)
    and the kernel needs a profiled call of its own.
    """
    from harness.measure.memory import measure_peak_memory

    peak = measure_peak_memory(ready(), device)
    fields, ops = {"peak_memory_bytes": peak.bytes, "memory_method": peak.method}, peak.op_names
    del peak  # its result (the call's output) is freed before another call
    ops = ops if ops is not None else profiled_ops(ready())
    return {**fields, "sdpa_kernel": sdpa_kernel(ops), "xformers_op": xformers_op(ops)}


def profiled_ops(step: Callable[[], Any]) -> set[str]:
    """The names of the ops one call of `step` ran (CPU and, where present, CUDA activity)."""
    from torch.profiler import ProfilerActivity, profile

    from harness.measure.memory import quiet_native_stderr

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with quiet_native_stderr(), profile(activities=activities) as prof:
        step()
    return {event.name for event in prof.events()}
