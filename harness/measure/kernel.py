"""Which SDPA kernel torch really ran: the aten op names of one call under torch.profiler, outside the timed region.

``torch.nn.functional.scaled_dot_product_attention`` dispatches to one of several kernels and may
fall back to the math one silently (an unsupported mask, dtype or head dim). The row records the
kernel that ran, read from the profiler, not the one asked for.
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


def profiled_ops(step: Callable[[], Any]) -> set[str]:
    """The names of the ops one call of `step` ran (CPU and, where present, CUDA activity)."""
    from torch.profiler import ProfilerActivity, profile

    from harness.measure.memory import quiet_native_stderr

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with quiet_native_stderr(), profile(activities=activities) as prof:
        step()
    return {event.name for event in prof.events()}

