"""Where does a timing's run-to-run spread come from? Each suspected source measured as a ratio inside ONE process.

Issue 44: two quiet runs of one sweep moved absolute latencies by 20-26% and chunked's speed-up by more than its
interval. Each experiment below times the same steps two ways, back to back, several times, with the harness's own
timer (harness.measure.timer.StepTimer.block) and warm-up (harness.measure.pairing.warm_up), and prints the ratio:

  first seconds   dense 2K: per-call time over the process's first second / over its seconds 2-4
  warm-up         dense 2K on fresh inputs: the block after one warm call / the rate after warm_up (stable)
  threads         dense 2K: per-call time at 1 thread / at 2, and the blocks' c.v. at each
  allocator       chunked 1K: the block after a 512 MiB tensor is made, filled and freed / its steady block
  cell order      chunked 1K timed right after a dense 2K cell / timed before it
  allocations     chunked vs dense 1K paired, 5 times on fresh copies of q, k, v: max/min (beside: on the same ones)
  rounds          chunked vs dense 1K paired: max/min of 8 rounds' speed-ups inside one 2 s stretch, and the
                  between-round s.d. of log speed-up over what the pairs inside rounds imply
  cells apart     the same paired speed-up in 6 cells of 0.25 s, each after 0.75 s of other work: max / min
  processes       the same paired speed-up in 4 fresh processes: max / min (beside: 4 times in this one)
  huge pages      the same in 4 processes whose large tensors torch aligns to huge pages (THP_MEM_ALLOC_ENABLE=1)

A ratio near 1.00 (and a narrow range) says the source does not move the numbers. Run it on a quiet machine (about
a minute on 2 cores), then paste the table into docs/timing.md, "Sources of the spread":

    python scripts/spread_sources.py
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.measure.pairing import calls_per_block, time_pairs, warm_up  # noqa: E402 - after the repo is on the path
from harness.measure.rounds import round_interval, within_se  # noqa: E402
from harness.measure.timer import StepTimer  # noqa: E402
from variants import build_variant  # noqa: E402

B, H, D = 1, 8, 64  # the CPU default sweep's cell shape (harness/spec/cpu.toml)
BLOCK_S = 0.05  # seconds per timed block
REPEATS = 4  # repetitions of each two-way comparison
TIMER = StepTimer("cpu")
Step = Callable[[], Any]


def inputs(n: int, seed: int = 0) -> list[torch.Tensor]:
    """Seeded gaussian q, k, v of length n, in fresh memory."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, n, D, generator=generator) for _ in range(3)]


def step_of(variant: str, n: int, seed: int = 0, qkv: list[torch.Tensor] | None = None) -> Step:
    """A warm-able call of a built-in variant (default config) on `qkv`, else fresh seeded inputs of length n."""
    q, k, v = qkv if qkv is not None else inputs(n, seed)
    module = build_variant(variant).eval()

    def step() -> Any:
        with torch.no_grad():
            return module(q, k, v)

    return step


def per_call(step: Step, blocks: int = 5) -> list[float]:
    """Per-call seconds of `blocks` blocks of about BLOCK_S each (one untimed call first sizes them)."""
    step()
    number = calls_per_block(TIMER.block(step, 1).per_call_s, BLOCK_S)
    return [TIMER.block(step, number).per_call_s for _ in range(blocks)]


def first_seconds() -> tuple[list[float], str]:
    """Per-call time over the first second of timing in this process over that of seconds 2-4 (one value)."""
    step = step_of("dense", 2048)
    step()
    number = calls_per_block(TIMER.block(step, 1).per_call_s, BLOCK_S)
    elapsed, first, later = 0.0, [], []
    while elapsed < 4.0:
        block = TIMER.block(step, number)
        (first if elapsed < 1.0 else later if elapsed >= 2.0 else []).append(block.per_call_s)
        elapsed += block.wall_s
    return [statistics.median(first) / statistics.median(later)], "first 1 s / seconds 2-4"


def warm_up_length() -> tuple[list[float], str]:
    """The block after a single warm call over the rate warm_up settles at, on fresh inputs each repeat."""
    ratios = []
    for seed in range(REPEATS):
        step = step_of("dense", 2048, seed)
        step()
        number = calls_per_block(TIMER.block(step, 1).per_call_s, BLOCK_S)
        early = TIMER.block(step, number).per_call_s
        ratios.append(early / warm_up(step, TIMER.block, number))
    return ratios, "after 1 warm call / after warm_up"


def threads() -> tuple[list[float], str]:
    """Per-call time at one thread over two (alternating), with the blocks' coefficient of variation at each."""
    before = torch.get_num_threads()
    step = step_of("dense", 2048)
    ratios, cvs = [], {1: [], 2: []}
    try:
        for _ in range(REPEATS):
            medians = {}
            for count in (1, 2):
                torch.set_num_threads(count)
                times = per_call(step, blocks=6)
                medians[count] = statistics.median(times)
                cvs[count].append(statistics.stdev(times) / statistics.fmean(times))
            ratios.append(medians[1] / medians[2])
    finally:
        torch.set_num_threads(before)
    cv = ", ".join(f"c.v. {statistics.median(cvs[c]):.1%} at {c}" for c in (1, 2))
    return ratios, f"1 thread / 2 threads ({cv})"


def allocator() -> tuple[list[float], str]:
    """chunked's block right after a large tensor was made, touched and freed, over its steady block."""
    step = step_of("chunked", 1024)
    ratios = []
    for _ in range(REPEATS):
        steady = statistics.median(per_call(step, blocks=4))
        big = torch.ones(512 << 20, dtype=torch.uint8)  # 512 MiB, every page touched
        del big
        number = calls_per_block(steady, BLOCK_S)
        ratios.append(TIMER.block(step, number).per_call_s / steady)
    return ratios, "after a 512 MiB tensor freed / steady"


def cell_order() -> tuple[list[float], str]:
    """chunked 1K timed as a cell right after a dense 2K cell, over chunked timed before it (alternating orders)."""
    chunked, dense = step_of("chunked", 1024), step_of("dense", 2048)
    after, before = [], []
    for i in range(2 * REPEATS):
        first, second = (dense, chunked) if i % 2 == 0 else (chunked, dense)
        times = [statistics.median(per_call(s, blocks=4)) for s in (first, second)]
        (after if i % 2 == 0 else before).append(times[1] if i % 2 == 0 else times[0])
    return [a / b for a, b in zip(after, before)], "after dense / before dense"


def paired(variant: Step, baseline: Step, *, pairs: int, rounds: int = 1):
    """Paired times of two warm steps, blocks of BLOCK_S / 2 seconds each."""
    na = calls_per_block(warm_up(variant, TIMER.block, 1), BLOCK_S / 2)
    nb = calls_per_block(warm_up(baseline, TIMER.block, 1), BLOCK_S / 2)
    return time_pairs(variant, baseline, TIMER.block, pairs=pairs, number_variant=na, number_baseline=nb, rounds=rounds)


def rounds() -> tuple[list[float], str]:
    """max/min of round speed-ups in one stretch; the between-round s.d. over the within-round floor beside it."""
    chunked, dense = step_of("chunked", 1024), step_of("dense", 1024)
    values, excess = [], []
    for _ in range(REPEATS):
        times = paired(chunked, dense, pairs=32, rounds=8)
        parts = times.by_round(times.ratios)
        medians = [statistics.median(p) for p in parts]
        values.append(max(medians) / min(medians))
        excess.append(round_interval(parts).between_sd / max(within_se(parts), 1e-12))
    return values, f"max / min of 8 rounds (between s.d. / within floor: {statistics.median(excess):.2f})"


def allocations() -> tuple[list[float], str]:
    """max/min of chunked's paired speed-up over dense at 1K over 5 repeats on fresh copies of q, k, v (new memory,
    pages touched anew, each repeat), beside the same on one set of tensors: the process's memory placement."""
    same = inputs(1024)
    spreads: dict[bool, list[float]] = {False: [], True: []}
    for i in range(REPEATS // 2):  # same, fresh
        fresh = i % 2 == 1
        values = []
        for _ in range(5):
            qkv = [x.clone() for x in same] if fresh else same
            times = paired(step_of("chunked", 1024, qkv=qkv), step_of("dense", 1024, qkv=qkv), pairs=8)
            values.append(statistics.median(times.ratios))
        spreads[fresh].append(max(values) / min(values))
    return spreads[True], f"max / min over fresh copies (same tensors: {statistics.median(spreads[False]):.3f})"


def cells_apart() -> tuple[list[float], str]:
    """The paired speed-up of chunked over dense at 1K in 6 short cells, each after 0.75 s of dense 4K: max / min."""
    chunked, dense, other = step_of("chunked", 1024), step_of("dense", 1024), step_of("dense", 4096)
    values = []
    for _ in range(REPEATS // 2):
        speedups = []
        for _ in range(6):
            per_call(other, blocks=int(0.75 / BLOCK_S))
            speedups.append(statistics.median(paired(chunked, dense, pairs=4).ratios))
        values.append(max(speedups) / min(speedups))
    return values, "max / min over 6 cells 1 s apart"


def one_speedup() -> float:
    """chunked's paired speed-up over dense at 1K on seeded inputs: what each child process of `processes` prints."""
    qkv = inputs(1024)
    return statistics.median(
        paired(step_of("chunked", 1024, qkv=qkv), step_of("dense", 1024, qkv=qkv), pairs=16).ratios
    )


def in_processes(count: int, **env: str) -> list[float]:
    """The paired speed-up of one_speedup measured in `count` fresh processes (this script with --child), with `env`
    added to their environment."""
    command = [sys.executable, __file__, "--child"]
    environment = {**os.environ, **env}
    return [
        float(subprocess.run(command, capture_output=True, text=True, check=True, env=environment).stdout)
        for _ in range(count)
    ]


def processes() -> tuple[list[float], str]:
    """max/min of the same paired speed-up measured in 4 fresh processes, beside the max/min of 4 measurements here:
    what a new process changes (memory placement, thread placement, its start)."""
    there, here = in_processes(4), [one_speedup() for _ in range(4)]
    return [max(there) / min(there)], f"max / min over 4 processes: {shown(there)} (here 4 times: {shown(here)})"


def huge_pages() -> tuple[list[float], str]:
    """The same over 4 processes with torch's allocator aligning tensors of 2 MiB and more to huge pages
    (THP_MEM_ALLOC_ENABLE=1, read once per process; the kernel's transparent huge pages set to madvise or always)."""
    there = in_processes(4, THP_MEM_ALLOC_ENABLE="1")
    return [max(there) / min(there)], f"max / min over 4 processes, THP_MEM_ALLOC_ENABLE=1: {shown(there)}"


def shown(values: list[float]) -> str:
    return " ".join(f"{v:.3f}" for v in sorted(values))


EXPERIMENTS = {  # first_seconds first: it needs this process's first seconds
    "first seconds": first_seconds,
    "warm-up": warm_up_length,
    "threads": threads,
    "allocator": allocator,
    "cell order": cell_order,
    "allocations": allocations,
    "rounds": rounds,
    "cells apart": cells_apart,
    "processes": processes,
    "huge pages": huge_pages,
}


def main() -> int:
    if sys.argv[1:] == ["--child"]:
        print(one_speedup())
        return 0
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; B={B} H={H} D={D} float32", flush=True)
    print("| source | compared | ratio (median) | range | repeats |", flush=True)
    print("|---|---|---|---|---|", flush=True)
    for name, experiment in EXPERIMENTS.items():
        values, compared = experiment()
        low, high = min(values), max(values)
        ratio = statistics.median(values)
        print(f"| {name} | {compared} | {ratio:.3f} | {low:.3f}-{high:.3f} | {len(values)} |", flush=True)
        if not all(math.isfinite(v) for v in values):
            print(f"  ({name}: a value is not finite)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
