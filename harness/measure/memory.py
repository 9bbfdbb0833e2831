"""Peak memory of a call, in bytes beyond what was allocated before it, on CUDA and on CPU.

CUDA: the caching allocator's own counters (reset_peak_memory_stats / max_memory_allocated).
CPU: torch.profiler's allocation events (every allocation and free through torch's CPU
allocator, with its size), replayed in time order; the peak of the running sum is the answer.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch


@dataclass(frozen=True)
class PeakMemory:
    """Peak bytes allocated by a call beyond those live before it, and how they were counted."""

    bytes: int
    method: str  # "cuda_max_memory_allocated" | "cpu_profiler_events"
    result: Any = None  # what the call returned (kept alive until the measurement ended)
    op_names: frozenset[str] | None = None  # the ops the call ran, where a profiler counted the memory (CPU)


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
    from torch.profiler import ProfilerActivity, profile

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
