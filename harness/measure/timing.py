"""Per-call seconds of a step: torch.utils.benchmark on CPU, triton.testing.do_bench (else CUDA events) on CUDA."""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import torch

from harness.measure.contention import ThreadClock, contention_fields
from harness.measure.settings import MeasureSettings

L2_FLUSH_BYTES = 256 << 20  # zeroed between timed CUDA calls so none starts with a warm L2


def time_step(
    step: Callable[[], Any],
    settings: MeasureSettings,
    device: torch.device,
    *,
    first_call_s: float,
    clock: ThreadClock | None = None,
) -> tuple[list[float], int]:
    """Per-call seconds of the timed blocks and the number of timed calls; `first_call_s` is an untimed first estimate.
    On CPU, `clock` also notes each block's CPU time (harness.measure.contention)."""
    if device.type == "cuda":
        return time_cuda(step, settings, device, first_call_s=first_call_s)
    return time_cpu(step, settings, slow=first_call_s >= settings.time_budget_s, clock=clock)


def time_with_clocks(
    step: Callable[[], Any], settings: MeasureSettings, device: torch.device, *, first_call_s: float
) -> tuple[list[float], int, dict[str, Any]]:
    """time_step, and on CPU the second clock's fields of the timed blocks (cpu_latency_s, cpu_share, contended:
    harness.measure.contention); {} on CUDA."""
    clock = ThreadClock() if device.type != "cuda" else None
    times, repeats = time_step(step, settings, device, first_call_s=first_call_s, clock=clock)
    number = repeats // max(1, len(times))  # calls per timed block
    extra = contention_fields(clock.timer_blocks([t * number for t in times]), number) if clock else {}
    return times, repeats, extra


def time_cpu(
    step: Callable[[], Any], settings: MeasureSettings, *, slow: bool, clock: ThreadClock | None = None
) -> tuple[list[float], int]:
    """Per-call seconds of each timed block (torch.utils.benchmark, at this process's thread count) and the call count.

    `slow`: one call already took the whole budget, so skip blocked_autorange's block-size
    estimate (one more untimed call) and time `repeats` single calls. The blocks added to reach `repeats` are timed
    here, not with Timer.timeit, which runs two untimed warm-up calls before each (a slow cell's time tripled).
    `clock`: read as the Timer's clock and here, so it holds each block's CPU seconds too (ThreadClock.timer_blocks
    finds the timed ones).
    """
    from torch.utils.benchmark import Timer

    read = clock.timer if clock is not None else time.perf_counter
    timer = Timer(stmt="step()", globals={"step": step}, num_threads=torch.get_num_threads(), timer=read)
    if slow:
        times, number = [], 1
    else:
        measurement = timer.blocked_autorange(min_run_time=settings.time_budget_s)
        times, number = list(measurement.times), measurement.number_per_run
    while len(times) * number < settings.repeats:
        start = read()
        for _ in range(number):
            step()
        times.append((read() - start) / number)
    return times, len(times) * number


def time_cuda(
    step: Callable[[], Any], settings: MeasureSettings, device: torch.device, *, first_call_s: float
) -> tuple[list[float], int]:
    """Per-call seconds on CUDA, L2 flushed between calls: triton.testing.do_bench when importable, else CUDA events.

    do_bench runs int(rep / its own estimate) calls, so a `rep` of the time budget gives a call slower than
    budget / repeats fewer than `repeats` samples; `rep` is sized from `first_call_s` (bench_rep_ms) so one do_bench call
    returns them all, and the cell is not timed a second time through CUDA events.
    """
    try:
        from triton.testing import do_bench
    except Exception:  # triton missing or broken: CUDA events below
        do_bench = None
    if do_bench is not None:
        budget_ms = settings.time_budget_s * 1000
        try:
            ms = do_bench(
                step, warmup=max(1, int(budget_ms / 4)), rep=bench_rep_ms(settings, first_call_s), return_mode="all"
            )
        except (TypeError, AssertionError):  # an older triton: no return_mode (TypeError) or not "all" (AssertionError)
            ms = None
        if isinstance(ms, (list, tuple)) and len(ms) >= settings.repeats:
            return [t / 1e3 for t in ms], len(ms)
    return time_cuda_events(step, settings, device)


# do_bench's own estimate (5 warm calls) may read slower than our first call did: rep covers `repeats` calls at this
# many times our estimate, so an estimate of do_bench's up to this much slower still yields `repeats` samples.
REP_MARGIN = 1.5


def bench_rep_ms(settings: MeasureSettings, first_call_s: float) -> int:
    """do_bench's `rep` in ms: the time budget, or enough for `repeats` calls (REP_MARGIN over) at `first_call_s`."""
    return max(1, int(settings.time_budget_s * 1000), math.ceil(REP_MARGIN * settings.repeats * first_call_s * 1000))


def time_cuda_events(
    step: Callable[[], Any], settings: MeasureSettings, device: torch.device
) -> tuple[list[float], int]:
    """Per-call seconds from CUDA events around each call, L2 flushed before each."""
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=device)
    step()
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        step()
    end.record()
    torch.cuda.synchronize(device)
    estimate_ms = max(start.elapsed_time(end) / 3, 1e-3)
    n = max(settings.repeats, min(10_000, int(settings.time_budget_s * 1000 / estimate_ms)))
    for _ in range(max(1, n // 4)):
        step()
    return _cuda_call_seconds(step, n, flush, device), n


def cuda_block_timer(device: torch.device) -> Callable[[Callable[[], Any], int], float]:
    """A block timer for harness.measure.pairing on CUDA: seconds per call from CUDA events around each call, L2 flushed before each."""
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=device)

    def timer(step: Callable[[], Any], number: int) -> float:
        return sum(_cuda_call_seconds(step, number, flush, device)) / number

    return timer


def _cuda_call_seconds(step: Callable[[], Any], number: int, flush: torch.Tensor, device: torch.device) -> list[float]:
    """Seconds of each of `number` calls, from CUDA events around each, the L2 cache flushed (zeroed) before each."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(number)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(number)]
    for i in range(number):
        flush.zero_()
        starts[i].record()
        step()
        ends[i].record()
    torch.cuda.synchronize(device)
    return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of values, linearly interpolated."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    lo = int(position)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (position - lo)
