"""The memory stage: peak memory of one call, in bytes beyond what was allocated before it, and the kernels it ran.

CUDA: the caching allocator's own counters (reset_peak_memory_stats / max_memory_allocated).
CPU: torch.profiler's allocation events (every allocation and free through torch's CPU
allocator, with its size), replayed in time order; the peak of the running sum is the answer.

Which kernels: Which SDPA kernel torch ran and which operator xformers chose: the op names of one profiled call, not timed.

``torch.nn.functional.scaled_dot_product_attention`` dispatches to one of several kernels and may
fall back to the math one silently (an unsupported mask, dtype or head dim). xformers'
memory_efficient_attention dispatches too, and without the flash-attn package its operators run
torch's own kernels (xformers' "-pt" operators), so "xformers vs sdpa" may time the same kernel twice.
The row records what ran, read from the profiler, not what was asked for. memory_and_kernel is the
memory stage of every cell kind: the call's peak memory and, from the same profiled call where there
is one, its kernels.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import torch
from torch.profiler import ProfilerActivity, profile


@dataclass(frozen=True)
class PeakMemory:
    """Peak bytes allocated by a call beyond those live before it, and how they were counted."""

    bytes: int
    method: str  # "cuda_max_memory_allocated" | "cpu_profiler_events"
    result: Any = None  # what the call returned (kept alive until the measurement ended)
    op_names: frozenset[str] | None = None  # the ops the call ran, where a profiler counted the memory (CPU)


@dataclass(frozen=True)
class Memory:
    """The memory stage's row fields: one call's peak memory and the kernels it ran."""

    peak_memory_bytes: int  # beyond what was allocated before the call
    memory_method: str  # PeakMemory.method
    sdpa_kernel: str | None  # flash, efficient, cudnn or math; None when no SDPA op ran
    xformers_op: str | None  # the operator xformers' dispatch ran; None when it ran none


def measure_peak_memory(fn: Callable[[], Any], device: torch.device | str) -> PeakMemory:
    """Run fn() once and return its peak allocation beyond the memory live before the call."""
    device = torch.device(device)
    if device.type == "cuda":
        return _cuda_peak(fn, device)
    if device.type == "cpu":
        return _cpu_peak(fn)
    raise ValueError(f"peak memory is measured on 'cpu' or 'cuda' devices, got {device}")


def _cuda_peak(fn: Callable[[], Any], device: torch.device) -> PeakMemory:
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    result = fn()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    return PeakMemory(max(int(peak), 0), "cuda_max_memory_allocated", result)


def _cpu_peak(fn: Callable[[], Any]) -> PeakMemory:
    with quiet_native_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    # Only CPU activity is profiled, so every memory event is a CPU allocation or free.
    all_events = prof.profiler.kineto_results.events()
    events = [e for e in all_events if e.name() == "[memory]"]
    running = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        running += event.nbytes()  # + for an allocation, - for a free
        peak = max(peak, running)
    return PeakMemory(int(peak), "cpu_profiler_events", result, frozenset(e.name() for e in all_events))


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """Silence the profiler's native start/stop lines on fd 2 (Python exceptions still propagate)."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


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


def memory_and_kernel(ready: Callable[[], Callable[[], Any]], device: torch.device) -> Memory:
    """The peak memory and the kernels of one call of the step `ready()` returns.

    `ready` makes the step ready to call once, untimed and before the memory is counted (a decode cell
    builds a fresh state in it); it is called again when the memory measurement saw no op names (CUDA)
    and the kernel needs a profiled call of its own.
    """
    peak = measure_peak_memory(ready(), device)
    peak_bytes, method, ops = peak.bytes, peak.method, peak.op_names
    del peak  # its result (the call's output) is freed before another call
    ops = ops if ops is not None else profiled_ops(ready())
    return Memory(peak_bytes, method, sdpa_kernel(ops), xformers_op(ops))


def profiled_ops(step: Callable[[], Any]) -> set[str]:
    """The names of the ops one call of `step` ran (CPU and, where present, CUDA activity)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with quiet_native_stderr(), profile(activities=activities) as prof:
        step()
    return {event.name for event in prof.events()}
