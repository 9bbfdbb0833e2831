"""Which SDPA kernel torch really ran: the aten op names of one call under torch.profiler, outside the timed region.

``torch.nn.functional.scaled_dot_product_attention`` dispatches to one of several kernels and may
fall back to the math one silently (an unsupported mask, dtype or head dim). The row records the
kernel that ran, read from the profiler, not the one asked for. memory_and_kernel is the memory stage
of every cell kind: the call's peak memory and, from the same profiled call where there is one, its kernel.
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


def memory_and_kernel(ready: Callable[[], Callable[[], Any]], device: torch.device) -> dict[str, Any]:
    """peak_memory_bytes, memory_method and sdpa_kernel of one call of the step `ready()` returns.

    `ready` makes the step ready to call once, untimed and before the memory is counted (a decode cell
    builds a fresh state in it); it is called again when the memory measurement saw no op names (CUDA)
    and the kernel needs a profiled call of its own.
    """
    from harness.measure.memory import measure_peak_memory

    peak = measure_peak_memory(ready(), device)
    fields, ops = {"peak_memory_bytes": peak.bytes, "memory_method": peak.method}, peak.op_names
    del peak  # its result (the call's output) is freed before another call
    return {**fields, "sdpa_kernel": sdpa_kernel(ops if ops is not None else profiled_ops(ready()))}


def profiled_ops(step: Callable[[], Any]) -> set[str]:
    """The names of the ops one call of `step` ran (CPU and, where present, CUDA activity)."""
    from torch.profiler import ProfilerActivity, profile

    from harness.measure.memory import quiet_native_stderr

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with quiet_native_stderr(), profile(activities=activities) as prof:
        step()
    return {event.name for event in prof.events()}
