"""Benchmark the learned approximations (distilled, linformer): accuracy before/after calibration,
forward time and counted peak memory against the sequence length.

    python scripts/bench_learned.py --what accuracy,time,memory

Accuracy: relative L2 error against float64 exact attention on held-out inputs (seed 0), before
and after calibration on batches from the same distribution with other seeds (1000, 1001, ...).
The distilled student is fitted once at --calib-len and evaluated at every length (its feature
map is length-independent); a Linformer is per position, so it is built with max_seq_len = N
and fitted at each evaluation length N.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from harness.inputs import make_inputs, parse_inputs  # noqa: E402
from harness.measure.memory import measure_peak_memory  # noqa: E402
from variants import build_variant, calibrate, reference_attention  # noqa: E402


def sinusoid_qkv(
    B: int,
    H: int,
    N: int,
    D: int,
    *,
    seed: int,
    amp: float = 0.5,
    noise: float = 0.5,
    periods: tuple[float, ...] = (128.0, 512.0, 2048.0),
) -> tuple[torch.Tensor, ...]:
    """q, k = noise * N(0, 1) + amp * sinusoidal position code with a few periods; v = N(0, 1).

    q_i . k_j ~ amp^2 * D/(2*len(periods)) * sum_p cos(2 pi (i - j) / p): attention leans towards
    the diagonal with a width of tens of positions (a softer structure than harness "local").
    """
    g = torch.Generator().manual_seed(seed)
    omega = 2 * math.pi / torch.tensor(periods)
    omega = omega[torch.arange(D // 2) % len(periods)]  # (D/2,)
    angle = torch.arange(N, dtype=torch.float32)[:, None] * omega  # (N, D/2)
    code = torch.cat([angle.cos(), angle.sin()], dim=-1)  # (N, D)
    q = noise * torch.randn(B, H, N, D, generator=g) + amp * code
    k = noise * torch.randn(B, H, N, D, generator=g) + amp * code
    v = torch.randn(B, H, N, D, generator=g)
    return q, k, v


def inputs(label: str, B: int, H: int, N: int, D: int, seed: int) -> tuple[torch.Tensor, ...]:
    """'sinusoid' (this script's) or any harness distribution label such as 'local:scale=4'."""
    if label == "sinusoid":
        return sinusoid_qkv(B, H, N, D, seed=seed)
    name, knobs = parse_inputs(label)
    return make_inputs(name, knobs, B=B, H=H, N=N, D=D, seed=seed)


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.double() - ref).norm() / ref.norm())


def accuracy(args: argparse.Namespace) -> None:
    B, H, D = args.batch, args.heads, args.head_dim
    lens = [int(n) for n in args.accuracy_lens.split(",")]
    held_out = {n: inputs(args.inputs, B, H, n, D, seed=0) for n in lens}
    refs = {n: reference_attention(*held_out[n]) for n in lens}
    budget = dict(steps=args.calib_steps, lr=args.calib_lr, loss=args.loss)
    print(f"accuracy on {args.inputs!r}, B={B} H={H} D={D}, budget {budget}, {args.calib_batches} batches")

    def calib_batches(n: int) -> list:
        return [inputs(args.inputs, B, H, n, D, seed=1000 + i) for i in range(args.calib_batches)]

    torch.manual_seed(0)
    student = build_variant("distilled", features=args.features)
    before = {n: _error(student, held_out[n], refs[n]) for n in lens}
    report = calibrate(student, calib_batches(args.calib_len), **budget)
    for n in lens:
        after = _error(student, held_out[n], refs[n])
        print(
            f"distilled N={n:5d}  rel_l2 {before[n]:.3f} -> {after:.3f}  (x{after / before[n]:.2f})  "
            f"fitted at N={args.calib_len} in {report.wall_s:.1f}s, loss {report.loss} "
            f"{report.loss_before:.3g} -> {report.loss_after:.3g}"
        )
    for n in lens:
        torch.manual_seed(0)
        lin = build_variant("linformer", k=args.k, max_seq_len=n, init=args.linformer_init)
        before_n = _error(lin, held_out[n], refs[n])
        report = calibrate(lin, calib_batches(n), **budget)
        after = _error(lin, held_out[n], refs[n])
        print(
            f"linformer N={n:5d}  rel_l2 {before_n:.3f} -> {after:.3f}  (x{after / before_n:.2f})  "
            f"fitted at N={n} in {report.wall_s:.1f}s, loss {report.loss}"
        )


def _error(attn, batch, ref) -> float:
    with torch.no_grad():
        return rel_l2(attn(*batch), ref)


def _cases(max_len: int) -> list[tuple[str, object, bool]]:
    torch.manual_seed(0)
    return [
        ("distilled", build_variant("distilled"), False),
        ("distilled causal", build_variant("distilled"), True),
        ("linformer", build_variant("linformer", k=64, max_seq_len=max_len), False),
    ]


def timing(args: argparse.Namespace) -> None:
    from torch.utils.benchmark import Timer

    lens = [int(n) for n in args.time_lens.split(",")]
    print(
        f"forward time, B=1 H={args.heads} D={args.head_dim}, float32, {torch.get_num_threads()} thread(s), "
        f"best median of {args.rounds} rounds"
    )
    for label, attn, causal in _cases(max(lens)):
        data = {n: [torch.randn(1, args.heads, n, args.head_dim) for _ in range(3)] for n in lens}
        times = [math.inf] * len(lens)
        # Rounds alternate the lengths and keep each one's best median, so a burst of load from
        # other processes on a shared machine inflates neither length alone.
        for _ in range(args.rounds):
            for i, n in enumerate(lens):
                q, k, v = data[n]
                timer = Timer(
                    "with torch.no_grad(): attn(q, k, v, causal=causal)",
                    globals=dict(attn=attn, q=q, k=k, v=v, causal=causal, torch=torch),
                    num_threads=torch.get_num_threads(),
                )
                times[i] = min(times[i], timer.blocked_autorange(min_run_time=args.min_run_time).median)
        cells = "  ".join(f"N={n}: {t * 1e3:.1f} ms" for n, t in zip(lens, times))
        print(f"{label:17s} {cells}  ratio last/first {times[-1] / times[0]:.2f} (length x{lens[-1] / lens[0]:.0f})")


def memory(args: argparse.Namespace) -> None:
    lens = [int(n) for n in args.memory_lens.split(",")]
    print(f"peak memory beyond the inputs (counted bytes), B=1 H={args.heads} D={args.head_dim}, float32")
    for label, attn, causal in _cases(max(lens)):
        peaks = []
        for n in lens:
            q, k, v = (torch.randn(1, args.heads, n, args.head_dim) for _ in range(3))
            with torch.no_grad():
                peaks.append(measure_peak_memory(lambda: attn(q, k, v, causal=causal), "cpu").bytes)
        cells = "  ".join(f"N={n}: {b / 2**20:.1f} MiB" for n, b in zip(lens, peaks))
        steps = ", ".join(f"{b / a:.2f}" for a, b in zip(peaks, peaks[1:]))
        print(f"{label:17s} {cells}  step ratios {steps}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--what", default="accuracy,time,memory", help="comma list of: accuracy, time, memory")
    p.add_argument("--inputs", default="sinusoid", help="'sinusoid' or a harness distribution, e.g. 'local:scale=4'")
    p.add_argument("--accuracy-lens", default="256,512,1024")
    p.add_argument("--time-lens", default="4096,16384")
    p.add_argument("--memory-lens", default="1024,4096,16384")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--features", type=int, default=128, help="distilled: F (the registry default)")
    p.add_argument("--k", type=int, default=64, help="linformer: projected length")
    p.add_argument("--linformer-init", default="scaled_random")
    p.add_argument("--calib-steps", type=int, default=300)
    p.add_argument("--calib-lr", type=float, default=3e-2)
    p.add_argument("--calib-len", type=int, default=1024, help="distilled: calibration sequence length")
    p.add_argument("--calib-batches", type=int, default=4)
    p.add_argument("--loss", default="auto")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--min-run-time", type=float, default=1.0, help="seconds per timed measurement")
    p.add_argument("--rounds", type=int, default=3, help="timing rounds; each length keeps its best median")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    jobs = {"accuracy": accuracy, "time": timing, "memory": memory}
    for what in args.what.split(","):
        if what not in jobs:
            p.error(f"--what takes accuracy, time, memory; got {what!r}")
        jobs[what](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
