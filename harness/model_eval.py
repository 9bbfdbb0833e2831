"""`python -m harness model-eval`: swap each variant into every attention layer of all-MiniLM-L6-v2 and compare.

For each variant and length limit: every layer's attention becomes ``variants.MultiHeadAttention``
around that variant, with the model's own W^Q, W^K, W^V, W^O; the passages of the evaluation
corpus are embedded one at a time (no padding), and compared to the unmodified model by
- cosine similarity of the sentence embeddings (mean and minimum over passages), and
- retrieval agreement: the share of passages whose nearest neighbour (by cosine, among the
  other evaluation passages) is the same as with the unmodified model.
Learnable variants are calibrated per layer (``variants.calibrate``) on the model's own q, k, v
from calibration passages, which are never evaluated. First, the `dense` swap must reproduce
the unmodified model (cosine > 0.9999 for every passage), or the command fails.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor

from harness import realmodel
from variants import AttentionVariant, NotSupportedError, build_variant, get_variant

STEM = "model_eval"
DENSE_MIN_COSINE = 0.9999  # the dense swap must reproduce every embedding at least this closely


def passages(max_len: int) -> list[str]:
    """Corpus paragraphs joined in order into passages of at most max_len - 2 word pieces each."""
    tokenizer = realmodel.load_tokenizer()
    out, current, length = [], [], 0
    for text in realmodel.corpus():
        n = len(tokenizer.tokens(text))
        if current and length + n > max_len - 2:
            out.append(" ".join(current))
            current, length = [], 0
        current.append(text)
        length += n
    if current:
        out.append(" ".join(current))
    return out


def split_passages(max_len: int, n_eval: int, n_calibration: int) -> tuple[list[str], list[str]]:
    """Disjoint (evaluation, calibration) passages: every 4th calibrates, the others evaluate.

    Raises ValueError when the corpus has fewer passages than asked for.
    """
    texts = passages(max_len)
    calibration = [t for i, t in enumerate(texts) if i % 4 == 3]
    evaluation = [t for i, t in enumerate(texts) if i % 4 != 3]
    if n_eval > len(evaluation) or n_calibration > len(calibration):
        raise ValueError(
            f"at max_len={max_len} the corpus makes {len(evaluation)} evaluation and {len(calibration)} calibration "
            f"passages; asked for {n_eval} and {n_calibration}: pass smaller --texts / --calibration-texts"
        )
    return evaluation[:n_eval], calibration[:n_calibration]


def encode_each(tokenizer: realmodel.Tokenizer, texts: list[str], max_len: int, device: str) -> list[tuple[Tensor, Tensor]]:
    """Each text alone as (ids (1, N), mask (1, N)): no padding, so every variant sees only real tokens."""
    return [tokenizer.encode([t], max_len=max_len, device=device) for t in texts]


@torch.no_grad()
def embed_all(model: realmodel.MiniLM, encoded: list[tuple[Tensor, Tensor]]) -> Tensor:
    """Sentence embeddings (len(encoded), E), float32."""
    return torch.cat([model.embed(ids, mask).float() for ids, mask in encoded])


def compare(reference: Tensor, candidate: Tensor) -> dict[str, float]:
    """Cosine of each embedding to its reference (mean, min) and top-1 retrieval agreement."""
    cosine = (reference * candidate).sum(-1) / (reference.norm(dim=-1) * candidate.norm(dim=-1)).clamp_min(1e-12)
    return {
        "cosine_mean": float(cosine.mean()),
        "cosine_min": float(cosine.min()),
        "retrieval_agreement": float((nearest(reference) == nearest(candidate)).float().mean()),
    }


def nearest(embeddings: Tensor) -> Tensor:
    """Index of each row's nearest other row by cosine, (n,)."""
    unit = embeddings / embeddings.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    sims = unit @ unit.T
    sims.fill_diagonal_(float("-inf"))
    return sims.argmax(-1)


def layer_batches(model: realmodel.MiniLM, encoded: list[tuple[Tensor, Tensor]]) -> list[list[tuple[Tensor, Tensor, Tensor]]]:
    """For each layer, the (q, k, v) of every calibration passage under the unmodified model."""
    per_layer: list[list[tuple[Tensor, Tensor, Tensor]]] = [[] for _ in model.layers]
    for ids, mask in encoded:
        for layer, qkv in zip(per_layer, model.capture_qkv(ids, mask)):
            layer.append(qkv)
    return per_layer


def swapped_model(
    name: str, fields: dict[str, Any], *, device: str, seed: int, calibration: list[list[tuple[Tensor, Tensor, Tensor]]] | None,
    steps: int,
) -> tuple[realmodel.MiniLM, dict[str, Any] | None]:
    """A fresh model with `name` in every layer; learnable variants calibrated per layer. Returns (model, calibration summary)."""
    from variants.calibrate import calibrate

    torch.manual_seed(seed)
    learnable = get_variant(name).capabilities.learnable
    reports = []

    def make(layer: int) -> AttentionVariant:
        variant = build_variant(name, **fields).to(device)
        if learnable:
            if not calibration:
                raise ValueError(f"{name} is learnable and needs calibration passages (--calibration-texts >= 1)")
            reports.append(calibrate(variant, calibration[layer], steps=steps).to_dict())
            variant.eval()
        return variant

    model = realmodel.swap_attention(realmodel.load_model(device=device), make)
    if not learnable:
        return model, None
    summary = {
        "steps_per_layer": steps, "layers": len(reports), "passages": len(calibration[0]) if calibration else 0,
        "loss": reports[0]["loss"], "loss_before_mean": sum(r["loss_before"] for r in reports) / len(reports),
        "loss_after_mean": sum(r["loss_after"] for r in reports) / len(reports), "per_layer": reports,
    }
    return model, summary


def evaluate_variant(
    name: str, max_len: int, *, reference: Tensor, encoded: list[tuple[Tensor, Tensor]],
    calibration: Callable[[], list[list[tuple[Tensor, Tensor, Tensor]]]], steps: int, device: str, seed: int,
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One row: `name` swapped into the model at this length limit, compared to `reference` embeddings."""
    from harness.accuracy_io import variant_fields

    fields = variant_fields(name, max_len, overrides)
    lengths = [int(mask.sum()) for _, mask in encoded]
    row: dict[str, Any] = {
        "model": realmodel.MODEL_NAME, "variant": name, "config": None, "max_len": max_len, "seq_len_mean": sum(lengths) / len(lengths),
        "seq_len_max": max(lengths), "texts": len(encoded), "status": "ok", "reason": None, "cosine_mean": None, "cosine_min": None,
        "retrieval_agreement": None, "calibration": None, "calibration_s": None, "eval_s": None, "device": device, "seed": seed,
    }
    try:
        row["config"] = build_variant(name, **fields).config.to_dict()
        start = time.perf_counter()
        needs = get_variant(name).capabilities.learnable
        model, row["calibration"] = swapped_model(name, fields, device=device, seed=seed, calibration=calibration() if needs else None, steps=steps)
        row["calibration_s"] = time.perf_counter() - start if needs else None
        start = time.perf_counter()
        embeddings = embed_all(model, encoded)
        row["eval_s"] = time.perf_counter() - start
    except NotSupportedError as exc:
        return {**row, "status": "unsupported", "reason": "; ".join(exc.reasons)}
    except (TypeError, ValueError) as exc:
        return {**row, "status": "error", "reason": f"{type(exc).__name__}: {exc}"}
    if not torch.isfinite(embeddings).all():
        return {**row, "status": "nonfinite", "reason": "an embedding has NaN or inf entries"}
    return {**row, **compare(reference, embeddings)}


def run_model_eval(
    variants: list[str], max_lens: list[int], *, n_eval: int, n_calibration: int, steps: int, device: str = "cpu", seed: int = 0,
    overrides: dict[str, dict[str, Any]] | None = None, log: Callable[[str], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows for every (max_len, variant), and meta with the dense-swap check per max_len.

    Raises RuntimeError when the dense swap does not reproduce the unmodified model.
    """
    tokenizer = realmodel.load_tokenizer()
    rows, checks = [], {}
    for max_len in max_lens:
        evaluation, calibration_texts = split_passages(max_len, n_eval, n_calibration)
        encoded = encode_each(tokenizer, evaluation, max_len, device)
        original = realmodel.load_model(device=device)
        reference = embed_all(original, encoded)
        cache: dict[str, Any] = {}

        def calibration() -> list[list[tuple[Tensor, Tensor, Tensor]]]:
            if "batches" not in cache:  # captured once per length, only if a learnable variant asks
                cache["batches"] = layer_batches(original, encode_each(tokenizer, calibration_texts, max_len, device))
            return cache["batches"]

        dense = embed_all(realmodel.swap_attention(realmodel.load_model(device=device), lambda i: build_variant("dense").to(device)), encoded)
        checks[max_len] = compare(reference, dense)
        if checks[max_len]["cosine_min"] <= DENSE_MIN_COSINE:
            raise RuntimeError(
                f"the dense swap does not reproduce {realmodel.MODEL_NAME} at max_len={max_len}: minimum cosine "
                f"{checks[max_len]['cosine_min']:.6f} <= {DENSE_MIN_COSINE}; the swap or the weights are wrong"
            )
        for name in variants:
            row = evaluate_variant(name, max_len, reference=reference, encoded=encoded, calibration=calibration, steps=steps,
                                   device=device, seed=seed, overrides=(overrides or {}).get(name))
            rows.append(row)
            if log:
                shown = (f"cosine {row['cosine_mean']:.5f} (min {row['cosine_min']:.5f}), retrieval {row['retrieval_agreement']:.3f}"
                         if row["status"] == "ok" else f"{row['status']}: {row['reason']}")
                log(f"max_len={max_len:<4d} {name:15s} {shown}")
    meta = {"model": realmodel.MODEL_NAME, "corpus": "pydoc_data.topics (CPython's documentation), paragraphs joined into passages",
            "texts": n_eval, "calibration_texts": n_calibration, "calibration_steps": steps, "max_lens": max_lens,
            "dense_check": {str(k): v for k, v in checks.items()}, "dense_min_cosine_required": DENSE_MIN_COSINE}
    return rows, meta


def summary_markdown(rows: list[dict[str, Any]]) -> str:
    """One line per variant and length limit: cosine (mean, min), retrieval agreement."""
    from harness.accuracy_io import markdown_table, short_reason

    body = []
    for r in rows:
        if r["status"] == "ok":
            body.append([r["variant"], r["max_len"], round(r["seq_len_mean"]), f"{r['cosine_mean']:.5f}", f"{r['cosine_min']:.5f}",
                         f"{r['retrieval_agreement']:.3f}", ""])
        else:
            body.append([r["variant"], r["max_len"], round(r["seq_len_mean"]), None, None, None, f"{r['status']}: {short_reason(r['reason'])}"])
    header = ["variant", "max_len", "mean tokens", "cosine mean", "cosine min", "retrieval agreement", "note"]
    return (markdown_table(header, body) + f"\nEach variant swapped into every layer of {realmodel.MODEL_NAME}; "
            "embeddings compared to the unmodified model over the evaluation passages.\n")


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    """Two panels per length limit: 1 - mean cosine (log) and retrieval agreement, one bar per variant."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(dict.fromkeys(r["variant"] for r in rows))
    lens = sorted({r["max_len"] for r in rows})
    width = 0.8 / max(len(lens), 1)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for j, max_len in enumerate(lens):
        by = {r["variant"]: r for r in rows if r["max_len"] == max_len and r["status"] == "ok"}
        xs = [i + j * width for i in range(len(variants))]
        ax1.bar(xs, [max(1 - by[v]["cosine_mean"], 1e-8) if v in by else float("nan") for v in variants], width, label=f"max_len {max_len}")
        ax2.bar(xs, [by[v]["retrieval_agreement"] if v in by else float("nan") for v in variants], width, label=f"max_len {max_len}")
    for ax in (ax1, ax2):
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(variants))], variants, rotation=20)
    ax1.set_yscale("log")
    ax1.set_ylabel("1 - cosine to the original\n(lower is better; floor 1e-8)")
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("nearest neighbour unchanged")
    handles, labels = ax1.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.suptitle(f"{realmodel.MODEL_NAME}: every attention layer swapped")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---- CLI ------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    from harness.accuracy_io import add_output_arguments
    from variants.calibrate import DEFAULT_STEPS

    parser.add_argument("--variants", default="*", help="comma-separated globs over registered variants (default: all)")
    parser.add_argument("--max-lens", default="128,512", help=f"comma-separated token limits per passage, each <= {realmodel.BertConfig().max_positions}")
    parser.add_argument("--texts", type=int, default=96, help="evaluation passages")
    parser.add_argument("--calibration-texts", type=int, default=16, help="passages whose q, k, v calibrate learnable variants (never evaluated)")
    parser.add_argument("--calibration-steps", type=int, default=DEFAULT_STEPS, help="calibration steps per layer")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--set", action="append", default=[], metavar="VARIANT.FIELD=VALUE", help="override a variant config field, e.g. sliding_window.window=32")
    parser.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE", help="import a user's variants first")
    add_output_arguments(parser, STEM)


def run(args: argparse.Namespace) -> int:
    from harness.accuracy_io import check_overrides, output_dir, parse_overrides, select_variants, write_table
    from harness.cli import UsageError, check_device, load_plugins

    reason = realmodel.missing_extra_reason()
    if reason:
        raise UsageError(reason)
    load_plugins(args.plugin)
    args.device = check_device(args.device)
    try:
        max_lens = [int(n) for n in args.max_lens.split(",")]
    except ValueError:
        raise UsageError(f"--max-lens {args.max_lens!r}: expected comma-separated integers like 128,512") from None
    try:
        for n in max_lens:
            realmodel.check_max_len(n)
    except ValueError as exc:
        raise UsageError(f"--max-lens: {exc}") from None
    if args.texts < 2 or args.calibration_texts < 0 or args.calibration_steps < 0:
        raise UsageError(f"need --texts >= 2 (retrieval needs neighbours), --calibration-texts >= 0, --calibration-steps >= 0; "
                         f"got {args.texts}, {args.calibration_texts}, {args.calibration_steps}")
    variants = select_variants(args.variants)
    overrides = parse_overrides(args.set)
    check_overrides(overrides, variants, max(max_lens))
    for n in max_lens:
        try:
            split_passages(n, args.texts, args.calibration_texts)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    folder = output_dir(args, STEM)
    start = time.perf_counter()
    try:
        rows, meta = run_model_eval(variants, max_lens, n_eval=args.texts, n_calibration=args.calibration_texts,
                                    steps=args.calibration_steps, device=args.device, seed=args.seed, overrides=overrides, log=print)
    except RuntimeError as exc:  # the dense swap did not reproduce the model: a failure, not a usage error
        print(f"error: {exc}", file=sys.stderr)
        return 1
    meta.update(variants=variants, overrides=overrides, device=args.device, seed=args.seed, wall_s=time.perf_counter() - start,
                torch_threads=torch.get_num_threads())
    paths = write_table(folder, STEM, rows, meta)
    (folder / f"{STEM}.md").write_text(summary_markdown(rows))
    paths += [folder / f"{STEM}.md", plot(rows, folder / f"{STEM}.png")]
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0
