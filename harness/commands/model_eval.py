"""`python -m harness model-eval`: swap each variant into every attention layer of all-MiniLM-L6-v2 and compare embeddings."""

from __future__ import annotations

import argparse
import sys
import time

import torch

from harness.commands._study_args import add_study_arguments, parse_ints, parse_overrides
from harness.devices import check_device
from harness.errors import UsageError
from harness.inputs import minilm
from harness.plugins import load_plugins
from harness.studies import model_eval
from harness.studies.results_io import output_dir
from harness.studies.selection import check_overrides, select_variants
from variants.calibrate import DEFAULT_STEPS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-lens",
        default="128,512",
        help=f"comma-separated token limits per passage, each <= {minilm.BertConfig().max_positions}",
    )
    parser.add_argument("--texts", type=int, default=96, help="evaluation passages")
    parser.add_argument(
        "--calibration-texts",
        type=int,
        default=16,
        help="passages whose q, k, v calibrate learnable variants (never evaluated)",
    )
    parser.add_argument("--calibration-steps", type=int, default=DEFAULT_STEPS, help="calibration steps per layer")
    add_study_arguments(parser, model_eval.STEM, set_example="sliding_window.window=32")


def run(args: argparse.Namespace) -> int:
    reason = minilm.missing_extra_reason()
    if reason:
        raise UsageError(reason)
    load_plugins(args.plugin)
    device = check_device(args.device)
    max_lens = parse_ints(args.max_lens, "--max-lens", "128,512")
    try:
        for n in max_lens:
            minilm.check_max_len(n)
    except ValueError as exc:
        raise UsageError(f"--max-lens: {exc}") from None
    if args.texts < 2 or args.calibration_texts < 0 or args.calibration_steps < 0:
        raise UsageError(
            f"need --texts >= 2 (retrieval needs neighbours), --calibration-texts >= 0, --calibration-steps >= 0; "
            f"got {args.texts}, {args.calibration_texts}, {args.calibration_steps}"
        )
    variants = select_variants(args.variants)
    overrides = parse_overrides(args.set)
    check_overrides(overrides, variants, max(max_lens))
    for n in max_lens:
        try:
            model_eval.split_passages(n, args.texts, args.calibration_texts)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    folder = output_dir(model_eval.STEM, run=args.run, out=args.out)
    start = time.perf_counter()
    try:
        rows, meta = model_eval.run_model_eval(
            variants,
            max_lens,
            n_eval=args.texts,
            n_calibration=args.calibration_texts,
            steps=args.calibration_steps,
            device=device,
            seed=args.seed,
            overrides=overrides,
            log=print,
        )
    except RuntimeError as exc:  # the dense swap did not reproduce the model: a failure, not a usage error
        print(f"error: {exc}", file=sys.stderr)
        return 1
    meta.update(
        variants=variants,
        overrides=overrides,
        device=device,
        seed=args.seed,
        wall_s=time.perf_counter() - start,
        torch_threads=torch.get_num_threads(),
    )
    paths = model_eval.write_model_eval(folder, rows, meta)
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0
