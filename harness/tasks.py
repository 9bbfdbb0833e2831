"""`python -m harness tasks`: tiny transformers trained from scratch per variant on MQAR and ListOps.

Every variant gets the same model (same width, depth, heads, same initial weights outside the
attention), the same seeded data stream and the same budget (steps x tokens per step); only the attention
inside ``variants.MultiHeadAttention`` differs. The model is a bidirectional encoder (pre-LN,
sinusoidal positions): MQAR is scored per query token, ListOps per sequence (masked mean pooling).
Reports test accuracy per variant and its delta to dense; a variant that cannot run a setting
is an `unsupported` row with its reason. Variant configs with a ``max_seq_len`` field are built
with max_seq_len = N.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from harness.accuracy_io import select_variants, variant_fields
from harness.task_data import IGNORE, TASK_NAMES, Batch, ListOpsSpec, MQARSpec, listops_batch, mqar_batch
from variants import MultiHeadAttention, NotSupportedError, build_variant

STEM = "tasks"


@dataclass(frozen=True, kw_only=True)
class TaskPreset:
    """Model size and training budget, the same for every variant."""

    d_model: int = 64  # model width E
    layers: int = 2  # transformer blocks
    heads: int = 4  # attention heads (head_dim = d_model / heads)
    seq_lens: tuple[int, ...] = (64, 128)  # N of each setting (one-hop MQAR at N=256 needs more steps than a CPU budget)
    steps: int = 300  # AdamW steps
    tokens_per_step: int = 1024  # batch = tokens_per_step // N sequences (at least 1): the same tokens at every N
    lr: float = 3e-3  # peak learning rate (linear warm-up over 10%, cosine decay to 10%)
    test_size: int = 256  # held-out sequences (drawn from a seed no training batch uses)
    mqar_pairs_per_token: float = 1 / 16  # MQAR key-value pairs P = N * this (at least 2)
    mqar_values: int = 32  # MQAR value vocabulary V (chance accuracy 1/V)
    mqar_one_hop: bool = True  # MQAR form: one position per pair (learnable in minutes) or Zoology's two (see MQARSpec)

    def batch_size(self, N: int) -> int:
        """Sequences per step at length N."""
        return max(1, self.tokens_per_step // N)


PRESETS = {
    "cpu": TaskPreset(),  # all variants, both tasks, in a few minutes on 2 CPU cores
    # Longer sequences, a larger model and budget; still one-hop MQAR (--mqar-two-hop for Zoology's form).
    "gpu": TaskPreset(d_model=128, layers=2, heads=4, seq_lens=(256, 1024, 4096), steps=3000, tokens_per_step=32768, lr=1e-3,
                      test_size=1024, mqar_pairs_per_token=1 / 16, mqar_values=64),
}


# ---- the model ------------------------------------------------------------------------------
class Block(nn.Module):
    """Pre-LN transformer block around a swappable attention."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attention = MultiHeadAttention(d_model, heads, "dense")
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: Tensor, kv_mask: Tensor | None) -> Tensor:
        x = x + self.attention(self.norm1(x), kv_mask=kv_mask)
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    """Token embeddings + fixed sinusoidal positions, `layers` blocks, a classifier per token or per sequence.

    Fixed positions, not learned ones: offsets like "the previous token" (which MQAR needs) are
    then equally easy at every position, so a short budget is not spent learning N position vectors.
    """

    def __init__(self, *, vocab: int, classes: int, seq_len: int, preset: TaskPreset, per_token: bool, value_vocab: int = 0):
        super().__init__()
        self.per_token = per_token
        self.embed = nn.Embedding(vocab, preset.d_model)
        self.value_embed = nn.Embedding(value_vocab, preset.d_model) if value_vocab else None  # one-hop MQAR's second stream
        self.register_buffer("position", sinusoids(seq_len, preset.d_model), persistent=False)  # (N, E), fixed
        self.blocks = nn.ModuleList(Block(preset.d_model, preset.heads) for _ in range(preset.layers))
        self.norm = nn.LayerNorm(preset.d_model)
        self.head = nn.Linear(preset.d_model, classes)

    def set_attention(self, make: Callable[[], nn.Module]) -> None:
        """Put `make()` (a variant) inside every block's MultiHeadAttention."""
        for block in self.blocks:
            block.attention.attention = make()

    def forward(self, tokens: Tensor, mask: Tensor, values: Tensor | None = None) -> Tensor:
        """tokens, mask (and values): (B, N). Returns logits (B, N, classes) per token or (B, classes) per sequence."""
        x = self.embed(tokens) + self.position[: tokens.shape[1]]  # (B, N, E)
        if self.value_embed is not None and values is not None:
            x = x + self.value_embed(values)
        kv_mask = None if bool(mask.all()) else mask
        for block in self.blocks:
            x = block(x, kv_mask)
        x = self.norm(x)
        if self.per_token:
            return self.head(x)
        weights = mask.to(x.dtype)[..., None]
        return self.head((x * weights).sum(1) / weights.sum(1).clamp_min(1.0))


def sinusoids(N: int, E: int) -> Tensor:
    """(N, E) sine/cosine position codes (Vaswani et al. 2017), wavelengths 2*pi .. 10000*2*pi."""
    position = torch.arange(N, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, E, 2, dtype=torch.float32) / E)  # (E/2,)
    out = torch.zeros(N, E)
    out[:, 0::2] = torch.sin(position * freq)
    out[:, 1::2] = torch.cos(position * freq[: E // 2])
    return out


# ---- one setting ----------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskSetting:
    """A task at one length: its batch maker, sizes and chance level."""

    task: str  # "mqar" | "listops"
    seq_len: int  # N
    make: Callable[[int, int], Batch]  # (batch, seed) -> Batch
    vocab: int  # input tokens
    classes: int  # output classes
    per_token: bool  # MQAR: per query token; ListOps: per sequence
    value_vocab: int  # size of the second input stream (one-hop MQAR: 1 + V), 0 = none
    chance: float  # accuracy of a uniform guess
    details: dict[str, Any]  # the generator's sizes, for the rows


def task_setting(task: str, N: int, preset: TaskPreset) -> TaskSetting:
    """The setting of `task` at length N under `preset`; ValueError for an unknown task or too short N."""
    if task == "mqar":
        pairs = max(2, int(N * preset.mqar_pairs_per_token))
        spec = MQARSpec(seq_len=N, num_pairs=pairs, num_keys=max(64, pairs), num_values=preset.mqar_values, one_hop=preset.mqar_one_hop)
        make = lambda b, s: mqar_batch(spec, b, s)  # noqa: E731
        value_vocab = 1 + spec.num_values if spec.one_hop else 0
        return TaskSetting(task, N, make, spec.vocab_size, spec.num_classes, True, value_vocab, 1 / spec.num_values, dataclasses.asdict(spec))
    if task == "listops":
        lspec = ListOpsSpec(seq_len=N)
        make = lambda b, s: listops_batch(lspec, b, s)  # noqa: E731
        return TaskSetting(task, N, make, lspec.vocab_size, lspec.num_classes, False, 0, 1 / lspec.num_classes, dataclasses.asdict(lspec))
    raise ValueError(unknown_task_message(task))


def unknown_task_message(task: str) -> str:
    from variants._checks import did_you_mean

    return f"Unknown task {task!r}. Available: {', '.join(TASK_NAMES)}{did_you_mean(task, TASK_NAMES)}"


def train_and_test(
    setting: TaskSetting, variant: str, preset: TaskPreset, *, seed: int = 0, device: str = "cpu", overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Train a fresh TinyTransformer with `variant` on `setting` and measure test accuracy: one result row."""
    fields = variant_fields(variant, setting.seq_len, overrides)
    row: dict[str, Any] = {
        "task": setting.task, "variant": variant, "config": None, "seq_len": setting.seq_len, "status": "ok", "reason": None,
        "accuracy": None, "chance": setting.chance, "majority": None, "delta_to_dense": None, "final_loss": None,
        "steps": preset.steps, "batch": preset.batch_size(setting.seq_len), "d_model": preset.d_model, "layers": preset.layers,
        "heads": preset.heads, "lr": preset.lr, "params": None, "train_s": None, "seed": seed, "device": device,
        "test_size": preset.test_size, "task_details": setting.details,
    }
    test = _to(setting.make(preset.test_size, 10**9 + seed), device)
    row["majority"] = _majority(test.targets)
    try:
        torch.manual_seed(seed)  # the same initial weights outside the attention for every variant
        model = TinyTransformer(vocab=setting.vocab, classes=setting.classes, seq_len=setting.seq_len, preset=preset,
                                per_token=setting.per_token, value_vocab=setting.value_vocab)
        torch.manual_seed(seed + 1)
        model.set_attention(lambda: build_variant(variant, **fields))
        row["config"] = model.blocks[0].attention.attention.config.to_dict()
        model.to(device)
        with torch.no_grad():  # the probe also creates lazily built variant parameters before the optimizer sees them
            model(*_inputs(test, slice(0, 2)))
    except NotSupportedError as exc:
        return {**row, "status": "unsupported", "reason": "; ".join(exc.reasons)}
    except (TypeError, ValueError) as exc:  # e.g. a config that does not fit this setting
        return {**row, "status": "error", "reason": f"{type(exc).__name__}: {exc}"}
    row["params"] = sum(p.numel() for p in model.parameters())
    start = time.perf_counter()
    loss = _train(model, setting, preset, seed, device)
    row["train_s"] = time.perf_counter() - start
    row["final_loss"] = loss
    if not math.isfinite(loss):
        return {**row, "status": "nonfinite", "reason": f"training loss became {loss}"}
    row["accuracy"] = evaluate(model, test)
    return row


def _train(model: TinyTransformer, setting: TaskSetting, preset: TaskPreset, seed: int, device: str) -> float:
    """AdamW with warm-up and cosine decay; returns the mean loss of the last 10% of steps."""
    opt = torch.optim.AdamW(model.parameters(), lr=preset.lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = max(1, preset.steps // 10)
    schedule = lambda s: min(1.0, (s + 1) / warmup) * (0.1 + 0.45 * (1 + math.cos(math.pi * s / preset.steps)))  # noqa: E731
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    tail: list[float] = []
    model.train()
    for step in range(preset.steps):
        batch = _to(setting.make(preset.batch_size(setting.seq_len), seed * 10**6 + step), device)
        loss = _loss(model(*_inputs(batch)), batch.targets)
        if not torch.isfinite(loss):
            return float(loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step >= preset.steps - max(1, preset.steps // 10):
            tail.append(float(loss.detach()))
    model.eval()
    return sum(tail) / len(tail)


@torch.no_grad()
def evaluate(model: TinyTransformer, data: Batch, chunk: int = 128) -> float:
    """Accuracy over the scored targets (MQAR: query tokens; ListOps: sequences)."""
    model.eval()
    correct = total = 0
    for i in range(0, data.tokens.shape[0], chunk):
        logits = model(*_inputs(data, slice(i, i + chunk)))
        targets = data.targets[i : i + chunk]
        scored = targets != IGNORE
        correct += int((logits.argmax(-1) == targets)[scored].sum())
        total += int(scored.sum())
    return correct / max(total, 1)


def _inputs(batch: Batch, rows: slice = slice(None)) -> tuple[Tensor, Tensor, Tensor | None]:
    """The model's inputs (tokens, mask, values) for some rows of a batch."""
    return batch.tokens[rows], batch.mask[rows], None if batch.values is None else batch.values[rows]


def _loss(logits: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE)


def _majority(targets: Tensor) -> float:
    scored = targets[targets != IGNORE]
    return float(torch.bincount(scored).max()) / max(scored.numel(), 1)


def _to(batch: Batch, device: str) -> Batch:
    values = None if batch.values is None else batch.values.to(device)
    return Batch(batch.tokens.to(device), batch.targets.to(device), batch.mask.to(device), values)


# ---- the whole run --------------------------------------------------------------------------
def run_tasks(
    tasks: list[str], variants: list[str], preset: TaskPreset, *, seed: int = 0, device: str = "cpu",
    overrides: dict[str, dict[str, Any]] | None = None, log: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Every (task, N, variant): train and test; then each row's delta_to_dense (accuracy - dense's)."""
    rows = []
    for task in tasks:
        for N in preset.seq_lens:
            setting = task_setting(task, N, preset)
            for variant in variants:
                row = train_and_test(setting, variant, preset, seed=seed, device=device, overrides=(overrides or {}).get(variant))
                rows.append(row)
                if log:
                    shown = f"{row['accuracy']:.3f}" if row["accuracy"] is not None else f"{row['status']}: {row['reason']}"
                    log(f"{task:8s} N={N:<5d} {variant:15s} {shown}  ({row['train_s'] or 0:.1f}s)")
    dense = {(r["task"], r["seq_len"]): r["accuracy"] for r in rows if r["variant"] == "dense" and r["accuracy"] is not None}
    for r in rows:
        base = dense.get((r["task"], r["seq_len"]))
        if r["accuracy"] is not None and base is not None:
            r["delta_to_dense"] = r["accuracy"] - base
    return rows


def summary_markdown(rows: list[dict[str, Any]]) -> str:
    """A table: one line per task and variant, accuracy (delta to dense) per N."""
    from harness.accuracy_io import markdown_table, short_reason

    lens = sorted({r["seq_len"] for r in rows})
    header = ["task", "variant"] + [f"N={n}" for n in lens]
    body = []
    for task in dict.fromkeys(r["task"] for r in rows):
        for variant in dict.fromkeys(r["variant"] for r in rows):
            cells: list[Any] = [task, variant]
            for n in lens:
                r = next((r for r in rows if (r["task"], r["variant"], r["seq_len"]) == (task, variant, n)), None)
                if r is None:
                    cells.append(None)
                elif r["accuracy"] is None:
                    cells.append(f"{r['status']}: {short_reason(r['reason'], 60)}")
                elif r["variant"] == "dense" or r["delta_to_dense"] is None:
                    cells.append(f"{r['accuracy']:.3f}")
                else:
                    cells.append(f"{r['accuracy']:.3f} ({r['delta_to_dense']:+.3f})")
            body.append(cells)
    chance = ", ".join(sorted({f"{r['task']} {r['chance']:.3f}" for r in rows}))
    majority = ", ".join(sorted({f"{r['task']} N={r['seq_len']} {r['majority']:.3f}" for r in rows if r["majority"] is not None}))
    return (markdown_table(header, body) + f"\nTest accuracy (delta to dense). Chance: {chance}. "
            f"Majority class of the test set: {majority}.\n")


def plot(rows: list[dict[str, Any]], path: Path) -> Path:
    """Grouped bars: accuracy per variant for each task and N, with each task's chance level."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(dict.fromkeys(r["task"] for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.6), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        lens = sorted({r["seq_len"] for r in rows if r["task"] == task})
        width = 0.8 / max(len(variants), 1)
        for j, variant in enumerate(variants):
            acc = []
            for n in lens:
                r = next((r for r in rows if (r["task"], r["variant"], r["seq_len"]) == (task, variant, n)), None)
                acc.append(r["accuracy"] if r and r["accuracy"] is not None else float("nan"))
            ax.bar([i + j * width for i in range(len(lens))], acc, width, label=variant)
        chance = next(r["chance"] for r in rows if r["task"] == task)
        ax.axhline(chance, color="grey", linestyle="--", linewidth=1, label="chance")
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(lens))], [f"N={n}" for n in lens])
        ax.set_ylim(0, 1)
        ax.set_title(task)
        ax.set_ylabel("test accuracy")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# ---- CLI ------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    from harness.accuracy_io import add_output_arguments

    parser.add_argument("--tasks", default=",".join(TASK_NAMES), help=f"comma-separated: {', '.join(TASK_NAMES)} (default: all)")
    parser.add_argument("--variants", default="*", help="comma-separated globs over registered variants (default: all)")
    parser.add_argument("--preset", default="cpu", choices=sorted(PRESETS), help="cpu: minutes on 2 cores; gpu: larger model, longer N")
    parser.add_argument("--seq-lens", help="comma-separated N (default: the preset's)")
    parser.add_argument("--steps", type=int, help="training steps (default: the preset's)")
    parser.add_argument("--mqar-two-hop", action="store_true", help="Zoology's MQAR form (key and value on two positions); needs far more steps")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and the data")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--set", action="append", default=[], metavar="VARIANT.FIELD=VALUE", help="override a variant config field, e.g. sliding_window.window=16")
    parser.add_argument("--plugin", action="append", default=[], metavar="MODULE_OR_FILE", help="import a user's variants first")
    add_output_arguments(parser, STEM)


def run(args: argparse.Namespace) -> int:
    from harness.accuracy_io import check_overrides, output_dir, parse_overrides, write_table
    from harness.cli import UsageError, check_device, load_plugins

    load_plugins(args.plugin)
    args.device = check_device(args.device)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    for task in tasks:
        if task not in TASK_NAMES:
            raise UsageError(unknown_task_message(task))
    variants = select_variants(args.variants)
    preset = PRESETS[args.preset]
    changes: dict[str, Any] = {}
    if args.seq_lens:
        try:
            changes["seq_lens"] = tuple(int(n) for n in args.seq_lens.split(","))
        except ValueError:
            raise UsageError(f"--seq-lens {args.seq_lens!r}: expected comma-separated integers like 64,256") from None
    if args.steps is not None:
        changes["steps"] = args.steps
    if args.mqar_two_hop:
        changes["mqar_one_hop"] = False
    preset = dataclasses.replace(preset, **changes)
    bad = [n for n in preset.seq_lens if n < 16]
    if bad or preset.steps < 1:
        raise UsageError(f"--seq-lens must be >= 16 and --steps >= 1, got seq_lens={list(preset.seq_lens)}, steps={preset.steps}")
    overrides = parse_overrides(args.set)
    check_overrides(overrides, variants, max(preset.seq_lens))
    folder = output_dir(args, STEM)
    start = time.perf_counter()
    rows = run_tasks(tasks, variants, preset, seed=args.seed, device=args.device, overrides=overrides, log=print)
    meta = {"preset": args.preset, **dataclasses.asdict(preset), "seed": args.seed, "device": args.device, "tasks": tasks,
            "variants": variants, "overrides": overrides, "wall_s": time.perf_counter() - start, "torch_threads": torch.get_num_threads()}
    paths = write_table(folder, STEM, rows, meta)
    (folder / f"{STEM}.md").write_text(summary_markdown(rows))
    paths += [folder / f"{STEM}.md", plot(rows, folder / f"{STEM}.png")]
    print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0
