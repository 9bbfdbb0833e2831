"""`python -m harness deploy`: export each variant (torch.export, ONNX) and run it in onnxruntime on CPU and in WebAssembly.

Writes deploy.jsonl (a row as each finishes), deploy.csv/.json/.md and the exported files (deploy/) into --out DIR or
--run RUN_DIR, whose report then shows the "Deployable?" table (docs/deploy.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from harness.commands._study_args import add_study_arguments, bounded, parse_ints, parse_overrides
from harness.errors import UsageError
from harness.measure.timer import Stopwatch
from harness.plugins import load_plugins
from harness.spec.convert import MAX_BATCH, MAX_HEAD_DIM, MAX_HEADS
from harness.studies import deploy, deploy_targets, deploy_wasm
from harness.report.deploy_table import TARGETS
from harness.studies.results_io import output_dir
from harness.studies.selection import check_overrides, select_variants
from variants._checks import did_you_mean


def add_arguments(parser: argparse.ArgumentParser) -> None:
    shape = deploy.DeployShape()
    parser.add_argument(
        "--seq-lens",
        default="128,256",
        help="comma-separated sequence lengths, at least two (the program is exported at the first; default: 128,256)",
    )
    parser.add_argument("--batch", type=int, default=shape.batch, help=f"B (default: {shape.batch})")
    parser.add_argument("--heads", type=int, default=shape.heads, help=f"H (default: {shape.heads})")
    parser.add_argument("--head-dim", type=int, default=shape.head_dim, help=f"D (default: {shape.head_dim})")
    parser.add_argument("--causal", action="store_true", help="export the causal call (default: not causal)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads of PyTorch eager and onnxruntime (default: 1, as onnxruntime-web's WebAssembly backend runs)",
    )
    parser.add_argument(
        "--targets",
        default=",".join(TARGETS),
        help=f"comma-separated targets (default: all of {', '.join(TARGETS)})",
    )
    parser.add_argument(
        "--npm-cache",
        metavar="DIR",
        help=f"folder `npm ci` installs the pinned onnxruntime-web into (default: {deploy_wasm.default_cache()})",
    )
    add_study_arguments(parser, deploy.STEM, set_example="sliding_window.backend=masked")
    parser.set_defaults(device="cpu")  # onnxruntime's CPU provider and WebAssembly: PyTorch eager on CPU beside them


def run(args: argparse.Namespace) -> int:
    if args.device != "cpu":
        raise UsageError(f"--device {args.device!r}: deploy runs on CPU (onnxruntime's CPU provider, WebAssembly)")
    seq_lens, shape, wanted = _checked(args)
    reason = deploy_targets.missing_extra_reason()
    if reason:
        raise UsageError(reason)
    load_plugins(args.plugin)
    variants = select_variants(args.variants)
    overrides = parse_overrides(args.set)
    check_overrides(overrides, variants, max(seq_lens))
    folder = output_dir(deploy.STEM, run=args.run, out=args.out)
    npm_cache = Path(args.npm_cache) if args.npm_cache else deploy_wasm.default_cache()
    torch.set_num_threads(args.threads)  # onnxruntime takes the same count (harness.studies.deploy_targets)
    watch = Stopwatch.started()
    rows = deploy.run_deploy(
        variants,
        seq_lens,
        shape=shape,
        overrides=overrides,
        seed=args.seed,
        wanted=wanted,
        folder=folder,
        npm_cache=npm_cache,
    )
    meta = {
        "variants": variants,
        "overrides": overrides,
        "seq_lens": seq_lens,
        "shape": {"batch": shape.batch, "heads": shape.heads, "head_dim": shape.head_dim, "causal": shape.causal},
        "targets": list(wanted),
        "opset": deploy_targets.OPSET,
        "runtimes": sorted({str(r["runtime"]) for r in rows if r.get("runtime")}),
        "npm_cache": str(npm_cache),
        "seed": args.seed,
        "torch_threads": torch.get_num_threads(),
        "wall_s": watch.seconds,
    }
    paths = deploy.write_deploy(folder, rows, meta)
    print(f"wrote {folder / (deploy.STEM + '.jsonl')}, {', '.join(str(p) for p in paths)}")
    return 0


def _checked(args: argparse.Namespace) -> tuple[list[int], deploy.DeployShape, tuple[str, ...]]:
    """--seq-lens, the shape and --targets, checked: UsageError with one line for a bad value."""
    seq_lens = bounded(parse_ints(args.seq_lens, "--seq-lens", "128,256"), "--seq-lens")
    if len(set(seq_lens)) < 2 or min(seq_lens) < 2:
        raise UsageError(
            f"--seq-lens {args.seq_lens!r}: need at least two different lengths >= 2 (the exported program must run "
            "at two), e.g. 128,256"
        )
    for flag, value, maximum in (
        ("--batch", args.batch, MAX_BATCH),
        ("--heads", args.heads, MAX_HEADS),
        ("--head-dim", args.head_dim, MAX_HEAD_DIM),
        ("--threads", args.threads, None),
    ):
        if value < 1:
            raise UsageError(f"{flag} {value}: expected an integer >= 1")
        if maximum is not None:
            bounded([value], flag, maximum)  # the sweep's bounds: no shape a machine cannot hold
    wanted = tuple(t.strip() for t in args.targets.split(",") if t.strip())
    unknown = [t for t in wanted if t not in TARGETS]
    if unknown or not wanted:
        hint = did_you_mean(unknown[0], list(TARGETS)) if unknown else ""
        raise UsageError(f"--targets {args.targets!r}: expected some of {', '.join(TARGETS)}{hint}")
    shape = deploy.DeployShape(batch=args.batch, heads=args.heads, head_dim=args.head_dim, causal=args.causal)
    return list(dict.fromkeys(seq_lens)), shape, tuple(t for t in TARGETS if t in wanted)
