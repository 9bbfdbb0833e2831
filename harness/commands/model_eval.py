"""`python -m harness model-eval`: swap each variant into the attention layers of a pretrained model and compare.

Without --model: all-MiniLM-L6-v2 (sentence embeddings); with --model PATH: any causal LM transformers
loads (perplexity, top-1 agreement, KL, greedy continuation agreement with dense and decode tokens/s at each
--seq-lens).
"""

from __future__ import annotations

import argparse
import sys

import torch

from harness.commands._study_args import add_study_arguments, bounded, parse_ints, parse_overrides
from harness.devices import check_device
from harness.errors import UsageError
from harness.models import hf_adapter, hf_model, minilm
from harness.text_files import read_user_text
from harness.measure.timer import Stopwatch
from harness.plugins import load_plugins
from harness.spec.convert import SpecError, lengths
from harness.spec.convert import budgets as parse_budgets  # its own name: `budgets` is the parsed value below
from harness.studies import budget_search, lm_eval, lm_generate, model_eval, passages
from harness.studies.results_io import output_dir
from harness.studies.selection import check_overrides, select_variants
from variants.calibrate import DEFAULT_STEPS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-lens",
        default="128,512",
        help=f"comma-separated token limits per passage, each <= {minilm.BertConfig().max_positions} (default: 128,512)",
    )
    parser.add_argument(
        "--model",
        metavar="PATH_OR_HUB_ID",
        help="any causal LM transformers loads (AutoModelForCausalLM: a local folder, a hub id where you have the hub): "
        "perplexity, top-1 agreement and KL per --seq-lens; without it the built-in all-MiniLM-L6-v2 encoder "
        "(sentence embeddings, --max-lens)",
    )
    parser.add_argument(
        "--seq-lens",
        default="256,1024",
        help="--model: window lengths in tokens: '256,1k,4k' or '256..8192' (default: 256,1024)",
    )
    parser.add_argument("--layers", help="--model: comma-separated layer indices to swap (default: every layer)")
    parser.add_argument("--text", metavar="FILE", help="--model: UTF-8 text to evaluate on (default: Python's docs)")
    parser.add_argument("--texts", type=int, help="evaluation passages (MiniLM: 96) or windows (--model: 4)")
    parser.add_argument(
        "--calibration-texts",
        type=int,
        help="passages or windows whose q, k, v calibrate learnable variants, never evaluated (MiniLM: 16, --model: 2)",
    )
    parser.add_argument("--calibration-steps", type=int, default=DEFAULT_STEPS, help="calibration steps per layer")
    parser.add_argument(
        "--error-budgets",
        metavar="LIST",
        default="",
        help="error budgets, e.g. '0.01,0.05': each variant with a free quality knob (window, k, features) gets the "
        "cheapest value whose error on the calibration texts is within each budget, then is evaluated at it",
    )
    parser.add_argument(
        "--error-metric",
        metavar="METRIC",
        help="--model: what a budget bounds, kl (KL(dense||variant) per token, nats; default), perplexity "
        "(relative increase) or disagreement (1 - greedy continuation agreement with dense: 0.1 asks agreement "
        ">= 0.9); MiniLM: 1 - mean embedding cosine",
    )
    parser.add_argument(
        "--generate-tokens",
        type=int,
        default=lm_generate.DEFAULT_TOKENS,
        help=f"--model: tokens greedy generate() continues each window with, compared to dense's and timed "
        f"(default: {lm_generate.DEFAULT_TOKENS}; 0: no generation)",
    )
    parser.add_argument(
        "--tokenizer",
        choices=hf_model.TOKENIZERS,
        default="model",
        help="--model: the model's own tokenizer (default; one that does not load is an error) or the text's UTF-8 "
        "bytes modulo the vocabulary (a folder without a tokenizer); the results record which",
    )
    add_study_arguments(parser, model_eval.STEM, set_example="sliding_window.window=32")


def run(args: argparse.Namespace) -> int:
    if args.model:
        return run_model(args)
    if args.tokenizer != "model":
        raise UsageError(f"--tokenizer {args.tokenizer} is for --model; MiniLM runs on its own tokenizer: drop it")
    args.texts = 96 if args.texts is None else args.texts
    args.calibration_texts = 16 if args.calibration_texts is None else args.calibration_texts
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
    budgets = _budgets(args, {"cosine": model_eval.ERROR}, args.calibration_texts)
    variants = select_variants(args.variants)
    overrides = parse_overrides(args.set)
    check_overrides(overrides, variants, max(max_lens))
    for n in max_lens:
        try:
            passages.split_passages(n, args.texts, args.calibration_texts)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    folder = output_dir(model_eval.STEM, run=args.run, out=args.out)
    watch = Stopwatch.started()
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
            budgets=budgets,
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
        wall_s=watch.seconds,
        torch_threads=torch.get_num_threads(),
    )
    paths = model_eval.write_model_eval(folder, rows, meta)
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0


def run_model(args: argparse.Namespace) -> int:
    """model-eval --model PATH: a causal LM; every refusal is one line and exit 2."""
    reason = hf_adapter.missing_transformers_reason()
    if reason:
        raise UsageError(reason)
    load_plugins(args.plugin)
    device = check_device(args.device)
    seq_lens, layers, n_eval, n_calibration = _lm_sizes(args)
    _check_lm(args, seq_lens, layers)
    budgets = _budgets(args, budget_search.ERRORS, n_calibration)
    text = _read_text(args.text)
    variants = select_variants(args.variants)
    overrides = parse_overrides(args.set)
    check_overrides(overrides, variants, max(seq_lens))
    folder = output_dir(lm_eval.STEM, run=args.run, out=args.out)
    watch = Stopwatch.started()
    try:
        rows, meta = lm_eval.run_lm_eval(
            args.model,
            variants,
            seq_lens,
            text=text,
            n_eval=n_eval,
            n_calibration=n_calibration,
            steps=args.calibration_steps,
            layers=layers,
            device=device,
            seed=args.seed,
            overrides=overrides,
            budgets=budgets,
            metric=args.error_metric or next(iter(budget_search.ERRORS)),
            generate_tokens=args.generate_tokens,
            tokenizer=args.tokenizer,
            log=print,
        )
    except ValueError as exc:  # the text is too short for the windows, the model or its tokenizer does not load
        raise UsageError(str(exc)) from None
    meta.update(variants=variants, overrides=overrides, device=device, seed=args.seed)
    meta.update(wall_s=watch.seconds, torch_threads=torch.get_num_threads())
    paths = lm_eval.write_lm_eval(folder, rows, meta)
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0


def _lm_sizes(args: argparse.Namespace) -> tuple[list[int], list[int] | None, int, int]:
    """--seq-lens, --layers, --texts and --calibration-texts of a --model run, parsed (UsageError for a bad one)."""
    try:
        seq_lens = [n for item in args.seq_lens.split(",") for n in lengths(item, "--seq-lens")]  # 1k, 4k, 256..8192
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    bounded(seq_lens, "--seq-lens")  # before the model is read; a model without max_position_embeddings has no other
    layers = parse_ints(args.layers, "--layers", "0,1") if args.layers else None
    n_eval = 4 if args.texts is None else args.texts
    n_calibration = 2 if args.calibration_texts is None else args.calibration_texts
    if n_eval < 1 or n_calibration < 0 or args.calibration_steps < 0 or args.generate_tokens < 0:
        raise UsageError(
            f"need --texts >= 1, --calibration-texts >= 0, --calibration-steps >= 0, --generate-tokens >= 0; "
            f"got {n_eval}, {n_calibration}, {args.calibration_steps}, {args.generate_tokens}"
        )
    return seq_lens, layers, n_eval, n_calibration


def _check_lm(args: argparse.Namespace, seq_lens: list[int], layers: list[int] | None) -> None:
    """UsageError unless --model is a causal LM that has the --seq-lens (its max_position_embeddings) and --layers."""
    try:
        config = hf_model.load_config(args.model)
    except ValueError as exc:
        raise UsageError(f"--model: {exc}") from None
    if not hf_model.is_causal_lm(config):
        raise UsageError(
            f"--model {args.model!r} is not a causal LM (architectures {getattr(config, 'architectures', None)}); "
            "model-eval --model takes causal LMs, and all-MiniLM-L6-v2 without --model is the encoder study"
        )
    limit = getattr(config, "max_position_embeddings", None)
    too_long = [n for n in seq_lens if n < 2 or (limit and n > limit)]
    if too_long:
        raise UsageError(f"--seq-lens {too_long} outside 2..{limit} (the model's max_position_embeddings)")
    layer_count = int(getattr(config, "num_hidden_layers", 0) or 0)
    if layers is not None and any(not 0 <= i < layer_count for i in layers):
        raise UsageError(f"--layers {layers}: the model has layers 0..{layer_count - 1}")


def _budgets(args: argparse.Namespace, metrics: dict[str, str], n_calibration: int) -> tuple[float, ...]:
    """--error-budgets as the sweep reads them (in (0, 2], ascending); UsageError for a bad value, a metric this model
    has not (`metrics`: the ones it has -> their names, the first the default) or no calibration texts to search on."""
    try:
        found = parse_budgets(args.error_budgets, "--error-budgets", bounds=" or ".join(metrics.values()))
    except SpecError as exc:
        raise UsageError(str(exc)) from None
    if args.error_metric is not None and args.error_metric not in metrics:
        raise UsageError(
            f"--error-metric {args.error_metric!r}: this model's budgets bound {' or '.join(metrics)}; "
            + ("pass one of those" if len(metrics) > 1 else "drop --error-metric")
        )
    if found and args.error_metric == "disagreement" and args.generate_tokens < 1:
        raise UsageError("--error-metric disagreement bounds generated tokens: pass --generate-tokens >= 1")
    if found and n_calibration < 1:
        raise UsageError("--error-budgets are searched on calibration texts: pass --calibration-texts >= 1")
    return found


def _read_text(path: str | None) -> str:
    """The evaluation text: the file given (a regular file, bounded: harness.text_files), else Python's documentation."""
    if path is None:
        return "\n\n".join(minilm.corpus())
    return read_user_text(path, what="--text")
