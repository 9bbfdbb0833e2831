"""Measure the issue-3 targets: sliding_window vs dense SDPA, chunked vs the dense reference.

    python scripts/bench_sparse_chunked.py --threads 2 --n 4096 8192 16384 --chunked-n 8192

Prints one line per measurement (median seconds from torch.utils.benchmark, peak bytes beyond the
inputs from harness.measure.memory.measure_peak_memory) and the target ratios at the end.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch.utils.benchmark import Timer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.measure.memory import measure_peak_memory  # noqa: E402
from variants import build_variant  # noqa: E402

MiB = 1 << 20


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--window", type=int, default=256, help="sliding_window window (default 256)")
    p.add_argument("--n", type=int, nargs="+", default=[4096, 8192, 16384], help="sliding-window lengths")
    p.add_argument("--sliding-backends", nargs="+", default=["banded", "flex", "masked"])
    p.add_argument(
        "--ceiling",
        action="store_true",
        help="also time banded's one SDPA call alone (block views, no mask, no padding, block 32): its best case",
    )
    p.add_argument("--masked-max-n", type=int, default=8192, help="skip the O(N^2) masked backend above this N")
    p.add_argument("--chunked-n", type=int, nargs="*", default=[8192], help="lengths for chunked vs dense reference")
    p.add_argument("--no-train", action="store_true", help="skip training-mode memory (dense reference needs ~GiBs)")
    p.add_argument("--min-run-time", type=float, default=1.0, help="seconds per blocked_autorange")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def median_seconds(fn: Callable[[], object], threads: int, min_run_time: float) -> tuple[float, int]:
    """Median seconds per call and the number of timed calls (one untimed warm-up first)."""
    fn()
    m = Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads).blocked_autorange(min_run_time=min_run_time)
    return m.median, m.number_per_run * len(m.times)


def banded_kernel_alone(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, b: int = 32
) -> tuple[Callable[[], object], float]:
    """Banded's one SDPA call on its (B*H, nb, b, D) query blocks and (B*H, nb, b + window - 1, D) key windows, as
    views, with no band mask and no padding (the first blocks' windows start at key 0): what the formulation costs
    with every overhead removed, so the share of N/(2w) it reaches bounds banded's. Returns the call and the fraction
    of the N query rows it covers."""
    B, H, N, D = q.shape
    L, nb = b + window - 1, N // b - -(-(window - 1) // b)  # the blocks whose window needs no padding
    qb = q[:, :, N - nb * b :].reshape(B * H, nb, b, D)
    kw, vw = (t[:, :, N - nb * b - (window - 1) :].flatten(0, 1).unfold(1, L, b).transpose(-1, -2) for t in (k, v))
    return (lambda: F.scaled_dot_product_attention(qb, kw, vw)), nb * b / N


def report(
    label: str, N: int, seconds: float | None = None, runs: int = 0, peak: int | None = None, extra: str = ""
) -> None:
    """One aligned line: label, N, median time and runs, peak MiB, extra text."""
    time_s = f"{seconds * 1e3:10.1f} ms ({runs:3d} runs)" if seconds is not None else " " * 25
    mem_s = f"{peak / MiB:10.1f} MiB" if peak is not None else " " * 14
    print(f"{label:34s} N={N:6d} {time_s} {mem_s} {extra}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    g = torch.Generator().manual_seed(args.seed)

    def inputs(N: int, requires_grad: bool = False) -> list[torch.Tensor]:
        shape = (args.batch, args.heads, N, args.head_dim)
        return [torch.randn(shape, generator=g).to(device).requires_grad_(requires_grad) for _ in range(3)]

    def peak(fn: Callable[[], object]) -> int:
        return measure_peak_memory(fn, device).bytes

    print(
        f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, "
        f"B={args.batch} H={args.heads} D={args.head_dim} float32, window={args.window}"
    )
    results: dict[tuple[str, int], tuple[float, int]] = {}  # (label, N) -> (seconds, peak bytes)

    for N in args.n:
        q, k, v = inputs(N)
        with torch.no_grad():
            sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
            t, runs = median_seconds(sdpa, args.threads, args.min_run_time)
            results["sdpa_causal", N] = (t, peak(sdpa))
            report("sdpa causal dense", N, t, runs, results["sdpa_causal", N][1])
            for backend in args.sliding_backends:
                if backend == "masked" and N > args.masked_max_n:
                    continue
                attn = build_variant("sliding_window", window=args.window, backend=backend)
                setup = attn.prepare(q, k, v, causal=True)
                fn = lambda: attn(q, k, v, causal=True)  # noqa: E731
                t, runs = median_seconds(fn, args.threads, args.min_run_time)
                results[backend, N] = (t, peak(fn))
                report(f"sliding_window[{backend}] causal", N, t, runs, results[backend, N][1], f"setup {setup:.1f} s")
            if args.ceiling:
                kernel, covered = banded_kernel_alone(q, k, v, args.window)
                t, runs = median_seconds(kernel, args.threads, args.min_run_time)
                results["ceiling", N] = (t / covered, 0)  # scaled to all N rows
                report("banded SDPA alone (no mask/pad)", N, t, runs, extra=f"{covered:.0%} of the rows")

    for N in args.chunked_n:
        q, k, v = inputs(N)
        pair = (
            ("dense[reference]", build_variant("dense", backend="reference")),
            ("chunked", build_variant("chunked")),
        )
        for label, attn in pair:
            with torch.no_grad():
                fn = lambda: attn(q, k, v)  # noqa: E731
                t, runs = median_seconds(fn, args.threads, args.min_run_time)
                results[label, N] = (t, peak(fn))
            report(f"{label} forward", N, t, runs, results[label, N][1])
            if not args.no_train:
                qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
                train_peak = peak(lambda: attn(qg, kg, vg).sum().backward())
                results[label + " train", N] = (float("nan"), train_peak)
                report(f"{label} train (fwd+bwd)", N, peak=train_peak)

    print("\ntargets:")
    for N in args.chunked_n:
        dense, chunked = results["dense[reference]", N], results["chunked", N]
        print(f"  chunked/dense forward peak memory  N={N}: 1/{dense[1] / max(chunked[1], 1):.1f} (target <= 1/16)")
        print(f"  chunked/dense forward time         N={N}: {chunked[0] / dense[0]:.2f}x (target <= 2x)")
        if not args.no_train:
            d, c = results["dense[reference] train", N][1], results["chunked train", N][1]
            print(f"  chunked/dense train peak memory    N={N}: 1/{d / max(c, 1):.1f} (target <= 1/8)")
    sliding = [b for b in args.sliding_backends if (b, 8192) in results]
    if 8192 in args.n and sliding:
        best = min(sliding, key=lambda b: results[b, 8192][0])
        speedup = results["sdpa_causal", 8192][0] / results[best, 8192][0]
        print(f"  sliding[{best}] speed-up over SDPA causal N=8192: {speedup:.1f}x (target >= 4x)")
        if (best, 16384) in results:
            growth = results[best, 16384][0] / results[best, 8192][0]
            print(f"  sliding[{best}] time(16384)/time(8192): {growth:.2f} (target <= 2.5)")
    for N in args.n:
        if ("ceiling", N) in results:
            share = results["sdpa_causal", N][0] / results["ceiling", N][0] / (N / (2 * args.window))
            print(f"  banded SDPA alone, share of N/(2w) over SDPA causal  N={N}: {share:.2f} (banded's best case)")
        if ("banded", N) in results:
            share = results["sdpa_causal", N][0] / results["banded", N][0] / (N / (2 * args.window))
            print(f"  sliding[banded] share of N/(2w) over SDPA causal      N={N}: {share:.2f} (target >= 0.7 at 16K)")
    if ("banded", 4096) in results and ("banded", 8192) in results:
        ratio = results["banded", 8192][1] / results["banded", 4096][1]
        print(f"  banded peak memory 8192/4096: {ratio:.2f} (target 2 +- 25%)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
