"""`python -m harness tasks`: train tiny transformers per variant on MQAR and ListOps; test accuracy and delta to dense."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import torch

from harness.commands._study_args import add_study_arguments, bounded, parse_ints, parse_overrides
from harness.devices import check_device
from harness.errors import UsageError
from harness.measure.timer import Stopwatch
from harness.plugins import load_plugins
from harness.report.study_results import equal_to_dense_notes
from harness.studies import tasks
from harness.studies.results_io import output_dir
from harness.studies.selection import check_overrides, select_variants
from harness.studies.task_data import DEFAULT_TASKS, TASK_NAMES
from harness.studies.task_training import PRESETS, unknown_task_message


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tasks",
        default=",".join(DEFAULT_TASKS),
        help=f"comma-separated: {', '.join(TASK_NAMES)} (default: %(default)s; listops needs far more steps than the "
        "cpu preset gives: there every variant, dense included, stays near its majority class)",
    )
    parser.add_argument(
        "--preset", default="cpu", choices=sorted(PRESETS), help="cpu: minutes on 2 cores; gpu: larger model, longer N"
    )
    parser.add_argument("--seq-lens", help="comma-separated N (default: the preset's)")
    parser.add_argument("--steps", type=int, help="training steps (default: the preset's)")
    parser.add_argument(
        "--mqar-two-hop",
        action="store_true",
        help="Zoology's MQAR form (key and value on two positions); needs far more steps",
    )
    add_study_arguments(parser, tasks.STEM, set_example="sliding_window.window=16")


def run(args: argparse.Namespace) -> int:
    load_plugins(args.plugin)
    device = check_device(args.device)
    names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    for task in names:
        if task not in TASK_NAMES:
            raise UsageError(unknown_task_message(task))
    variants = select_variants(args.variants)
    changes: dict[str, Any] = {}
    if args.seq_lens:
        changes["seq_lens"] = tuple(bounded(parse_ints(args.seq_lens, "--seq-lens", "64,256"), "--seq-lens"))
    if args.steps is not None:
        changes["steps"] = args.steps
    if args.mqar_two_hop:
        changes["mqar_one_hop"] = False
    preset = dataclasses.replace(PRESETS[args.preset], **changes)
    if any(n < 16 for n in preset.seq_lens) or preset.steps < 1:
        raise UsageError(
            f"--seq-lens must be >= 16 and --steps >= 1, got seq_lens={list(preset.seq_lens)}, steps={preset.steps}"
        )
    overrides = parse_overrides(args.set)
    check_overrides(overrides, variants, max(preset.seq_lens))
    folder = output_dir(tasks.STEM, run=args.run, out=args.out)
    watch = Stopwatch.started()
    rows = tasks.run_tasks(names, variants, preset, seed=args.seed, device=device, overrides=overrides, log=print)
    meta = {
        "preset": args.preset,
        **dataclasses.asdict(preset),
        "seed": args.seed,
        "device": device,
        "tasks": names,
        "variants": variants,
        "overrides": overrides,
        "wall_s": watch.seconds,
        "torch_threads": torch.get_num_threads(),
    }
    paths = tasks.write_tasks(folder, rows, meta)
    for note in equal_to_dense_notes(rows):
        print(f"warning: {note}")
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0
