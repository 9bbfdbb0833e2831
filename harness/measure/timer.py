"""The one timer: every second the harness measures is read here, wall and CPU time at the same moments.

- `measure(step, ...)`: a cell's timed step. CPU: torch.utils.benchmark's Timer.blocked_autorange at this process's
  thread count, its clock a `_Readings` that notes the timing thread's CPU time at each of the Timer's own readings, so
  each kept block (handed to blocked_autorange's callback as it ends) carries both. CUDA: triton.testing.do_bench when
  importable, else CUDA events around each call; the L2 cache is flushed between calls.
- `measure(step, setup=...)`: each timed call gets a fresh argument built outside the timed region (a decode
  generation from a fresh state).
- `StepTimer.block(step, calls)`: one block of back-to-back calls, for paired timing (harness.measure.pairing).
- `Stopwatch`: the seconds of one stretch of code (a first call, a fit, a set-up), the device synchronised at both ends.

Everything returns `Block`s, gathered in a `Measurement` (in the spirit of torch.utils.benchmark's): per-call seconds,
the calls behind them, and the timing thread's CPU seconds on CPU (None on CUDA), from which
harness.measure.contention says whether the machine took the cores away.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils.benchmark import Timer

L2_FLUSH_BYTES = 256 << 20  # zeroed between timed CUDA calls so none starts with a warm L2
# do_bench's own estimate (5 warm calls) may read slower than our first call did: rep covers `repeats` calls at this
# many times our estimate, so an estimate of do_bench's up to this much slower still yields `repeats` samples.
REP_MARGIN = 1.5
MAX_FRESH_CALLS = 1000  # timed calls from a fresh argument at most (a fast decode generation)

Step = Callable[[], Any]


@dataclass(frozen=True)
class Block:
    """`calls` back-to-back calls of one step, timed as a whole."""

    calls: int
    wall_s: float  # the whole block's wall seconds
    cpu_s: float | None = None  # the timing thread's CPU seconds over the same readings (None on CUDA)

    @property
    def per_call_s(self) -> float:
        return self.wall_s / self.calls

    @property
    def cpu_per_call_s(self) -> float | None:
        return None if self.cpu_s is None else self.cpu_s / self.calls


@dataclass(frozen=True)
class Measurement:
    """The timed blocks of one step, in order."""

    blocks: tuple[Block, ...]

    @property
    def times(self) -> list[float]:
        """Per-call seconds of each block: the samples the median and quantiles are taken over."""
        return [b.per_call_s for b in self.blocks]

    @property
    def repeats(self) -> int:
        """Timed calls over all blocks."""
        return sum(b.calls for b in self.blocks)

    def latency_fields(self, per: int = 1) -> dict[str, Any]:
        """latency_s (median), latency_p20_s, latency_p80_s of the per-call seconds divided by `per` (the tokens of
        a decode generation), and repeats."""
        times = [t / per for t in self.times]
        return {
            "latency_s": statistics.median(times),
            "latency_p20_s": quantile(times, 0.2),
            "latency_p80_s": quantile(times, 0.8),
            "repeats": self.repeats,
        }


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of values, linearly interpolated."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    lo = int(position)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (position - lo)


class Stopwatch:
    """Seconds of one stretch of code (`with Stopwatch(device) as watch: ...; watch.seconds`), the device synchronised
    at both ends so queued CUDA work is inside; `seconds` reads the time so far while the stretch runs."""

    def __init__(self, device: torch.device | str | None = None):
        self._sync = _synchronizer(device)
        self._start: float | None = None
        self._seconds: float | None = None

    @classmethod
    def started(cls, device: torch.device | str | None = None) -> Stopwatch:
        """A stopwatch already running: `seconds` is the time since this call (for a stretch that is not one block)."""
        return cls(device).__enter__()

    def __enter__(self) -> Stopwatch:
        self._sync()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sync()
        self._seconds = time.perf_counter() - self._start

    @property
    def seconds(self) -> float:
        return self._seconds if self._seconds is not None else time.perf_counter() - self._start


class StepTimer:
    """Times steps on one device: whole measurements (`measure`) and single blocks (`block`)."""

    def __init__(self, device: torch.device | str):
        self.device = torch.device(device)
        self._flush: torch.Tensor | None = None

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"

    def block(self, step: Step, calls: int) -> Block:
        """`calls` back-to-back calls of `step` as one block: wall and thread CPU seconds on CPU; on CUDA the sum of
        CUDA-event seconds of each call, the L2 flushed before each."""
        if self.cuda:
            return Block(calls, sum(self._cuda_calls(step, calls)))
        cpu, wall = time.thread_time(), time.perf_counter()
        for _ in range(calls):
            step()
        wall_s, cpu_s = time.perf_counter() - wall, time.thread_time() - cpu
        return Block(calls, wall_s, cpu_s)

    def measure(
        self,
        step: Callable[..., Any],
        *,
        budget_s: float,
        repeats: int,
        first_call_s: float,
        setup: Callable[[], Any] | None = None,
    ) -> Measurement:
        """The step timed within `budget_s`, at least `repeats` timed calls; `first_call_s` is an untimed estimate.

        With `setup`, each timed call is `step(setup())`, the argument built outside the timed region (one call per
        block). Otherwise on CPU: Timer.blocked_autorange, or, for a step that alone takes the budget (`first_call_s`
        >= budget_s), `repeats` single calls with no block-size estimate (one more untimed call); blocks added to reach
        `repeats` are timed here, not with Timer.timeit, which runs untimed warm-up calls before each (a slow cell's
        time tripled). On CUDA: do_bench, else CUDA events.
        """
        if setup is not None:
            count = max(repeats, min(MAX_FRESH_CALLS, int(budget_s / max(first_call_s, 1e-6))))
            return Measurement(tuple(self._fresh_call(step, setup) for _ in range(count)))
        if self.cuda:
            return self._measure_cuda(step, budget_s, repeats, first_call_s)
        blocks: list[Block] = []
        if first_call_s < budget_s:
            readings = _Readings()
            timer = Timer(stmt="step()", globals={"step": step}, num_threads=torch.get_num_threads(), timer=readings)
            timer.blocked_autorange(
                callback=lambda number, _: blocks.append(readings.block(number)), min_run_time=budget_s
            )
        number = blocks[-1].calls if blocks else 1
        while sum(b.calls for b in blocks) < repeats:
            blocks.append(self.block(step, number))
        return Measurement(tuple(blocks))

    def _fresh_call(self, step: Callable[[Any], Any], setup: Callable[[], Any]) -> Block:
        argument = setup()
        with Stopwatch(self.device) as watch:
            cpu = time.thread_time()
            step(argument)
            cpu_s = None if self.cuda else time.thread_time() - cpu
        del argument
        return Block(1, watch.seconds, cpu_s)

    def _measure_cuda(self, step: Step, budget_s: float, repeats: int, first_call_s: float) -> Measurement:
        """do_bench runs int(rep / its own estimate) calls, so a `rep` of the budget gives a call slower than
        budget / repeats fewer than `repeats` samples; `rep` is sized from `first_call_s` (bench_rep_ms) so one do_bench
        call returns them all, and the cell is not timed a second time through CUDA events."""
        try:
            from triton.testing import do_bench  # optional: triton ships with CUDA builds of torch only
        except Exception:  # triton missing or broken: CUDA events below
            do_bench = None
        if do_bench is not None:
            rep = bench_rep_ms(budget_s, repeats, first_call_s)
            try:
                ms = do_bench(step, warmup=max(1, int(budget_s * 250)), rep=rep, return_mode="all")
            except (TypeError, AssertionError):  # an older triton: no return_mode (TypeError) or not "all"
                ms = None
            if isinstance(ms, (list, tuple)) and len(ms) >= repeats:
                return Measurement(tuple(Block(1, t / 1e3) for t in ms))
        return self._measure_cuda_events(step, budget_s, repeats)

    def _measure_cuda_events(self, step: Step, budget_s: float, repeats: int) -> Measurement:
        """Per-call seconds from CUDA events around each call, L2 flushed before each, after a warm-up of a quarter."""
        step()
        estimate_s = max(self.block(step, 3).per_call_s, 1e-6)
        n = max(repeats, min(10_000, int(budget_s / estimate_s)))
        for _ in range(max(1, n // 4)):
            step()
        return Measurement(tuple(Block(1, s) for s in self._cuda_calls(step, n)))

    def _cuda_calls(self, step: Step, number: int) -> list[float]:
        """Seconds of each of `number` calls, from CUDA events around each, the L2 cache flushed (zeroed) before each."""
        if self._flush is None:
            self._flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=self.device)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(number)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(number)]
        for i in range(number):
            self._flush.zero_()
            starts[i].record()
            step()
            ends[i].record()
        torch.cuda.synchronize(self.device)
        return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]


def bench_rep_ms(budget_s: float, repeats: int, first_call_s: float) -> int:
    """do_bench's `rep` in ms: the time budget, or enough for `repeats` calls (REP_MARGIN over) at `first_call_s`."""
    return max(1, int(budget_s * 1000), math.ceil(REP_MARGIN * repeats * first_call_s * 1000))


class _Readings:
    """torch's Timer clock: wall time (what the Timer computes its blocks from), the thread's CPU time read with it.

    Timer reads its clock once before and once after each block, so the last two readings bracket the block that just
    ended: blocked_autorange's callback, called right after each kept block, takes them (`block`)."""

    def __init__(self) -> None:
        self._last: list[tuple[float, float]] = []  # (wall, cpu) of the last two readings

    def __call__(self) -> float:
        cpu = time.thread_time()
        wall = time.perf_counter()
        self._last = [*self._last[-1:], (wall, cpu)]
        return wall

    def block(self, calls: int) -> Block:
        (wall0, cpu0), (wall1, cpu1) = self._last
        return Block(calls, max(wall1 - wall0, 1e-9), cpu1 - cpu0)  # Timer's own floor of 1 ns


def _synchronizer(device: torch.device | str | None) -> Callable[[], None]:
    if device is not None and torch.device(device).type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None
