"""The tasks study's training: its presets, one task at one length (Problem), and train_and_test for one variant.

Every variant gets the same model (same width, depth, heads, same initial weights outside the
attention), the same seeded data stream and the same budget (steps x tokens per step); only the
attention inside ``variants.MultiHeadAttention`` differs. MQAR is scored per query token,
ListOps per sequence. Variant configs with a ``max_seq_len`` field are built with max_seq_len = N.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from harness.measure.timer import Stopwatch
from harness.studies.selection import variant_fields
from harness.studies.task_data import IGNORE, TASK_NAMES, Batch, ListOpsSpec, MQARSpec, listops_batch, mqar_batch
from harness.studies.task_model import TinyTransformer
from harness.report.study_outcomes import FAILURES, failed, with_outcome
from variants import build_variant
from variants._checks import did_you_mean


@dataclass(frozen=True, kw_only=True)
class TaskPreset:
    """Model size and training budget, the same for every variant."""

    d_model: int = 64  # model width E
    layers: int = 2  # transformer blocks
    heads: int = 4  # attention heads (head_dim = d_model / heads)
    # N of each problem (one-hop MQAR at N=256 needs more steps than a CPU budget)
    seq_lens: tuple[int, ...] = (
        64,
        128,
    )
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
    "gpu": TaskPreset(
        d_model=128,
        layers=2,
        heads=4,
        seq_lens=(256, 1024, 4096),
        steps=3000,
        tokens_per_step=32768,
        lr=1e-3,
        test_size=1024,
        mqar_pairs_per_token=1 / 16,
        mqar_values=64,
    ),
}


@dataclass(frozen=True)
class Problem:
    """A task at one length (what every variant is trained and tested on): its batch maker, sizes and chance level."""

    task: str  # "mqar" | "listops"
    seq_len: int  # N
    make: Callable[[int, int], Batch]  # (batch, seed) -> Batch
    vocab: int  # input tokens
    classes: int  # output classes
    per_token: bool  # MQAR: per query token; ListOps: per sequence
    value_vocab: int  # size of the second input stream (one-hop MQAR: 1 + V), 0 = none
    chance: float  # accuracy of a uniform guess
    details: dict[str, Any]  # the generator's sizes, for the rows


def make_problem(task: str, N: int, preset: TaskPreset) -> Problem:
    """`task` at length N under `preset`; ValueError for an unknown task or too short N."""
    if task == "mqar":
        pairs = max(2, int(N * preset.mqar_pairs_per_token))
        spec = MQARSpec(
            seq_len=N,
            num_pairs=pairs,
            num_keys=max(64, pairs),
            num_values=preset.mqar_values,
            one_hop=preset.mqar_one_hop,
        )
        make = lambda b, s: mqar_batch(spec, b, s)  # noqa: E731
        value_vocab = 1 + spec.num_values if spec.one_hop else 0
        return Problem(
            task,
            N,
            make,
            spec.vocab_size,
            spec.num_classes,
            True,
            value_vocab,
            1 / spec.num_values,
            dataclasses.asdict(spec),
        )
    if task == "listops":
        lspec = ListOpsSpec(seq_len=N)
        make = lambda b, s: listops_batch(lspec, b, s)  # noqa: E731
        return Problem(
            task,
            N,
            make,
            lspec.vocab_size,
            lspec.num_classes,
            False,
            0,
            1 / lspec.num_classes,
            dataclasses.asdict(lspec),
        )
    raise ValueError(unknown_task_message(task))


def unknown_task_message(task: str) -> str:
    """'Unknown task ...' with the tasks there are and the nearest name."""
    return f"Unknown task {task!r}. Available: {', '.join(TASK_NAMES)}{did_you_mean(task, TASK_NAMES)}"


def train_and_test(
    problem: Problem,
    variant: str,
    preset: TaskPreset,
    *,
    seed: int = 0,
    device: str = "cpu",
    overrides: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train a fresh TinyTransformer with `variant` on `problem` and measure test accuracy: one result row."""
    fields = variant_fields(variant, problem.seq_len, overrides)
    row = _empty_row(problem, variant, preset, seed=seed, device=device)
    test = _to(problem.make(preset.test_size, 10**9 + seed), device)
    row["majority"] = _majority(test.targets)
    try:
        model = _build_model(problem, variant, fields, preset, seed=seed)
        row["config"] = model.blocks[0].attention.attention.config.to_dict()
        model.to(device)
        with torch.no_grad():  # the probe also creates lazily built variant parameters before the optimizer sees them
            model(*_inputs(test, slice(0, 2)))
    except FAILURES as exc:  # e.g. a config that does not fit this problem
        return failed(row, exc)
    row["params"] = sum(p.numel() for p in model.parameters())
    with Stopwatch(device) as training:
        loss = _train(model, problem, preset, seed, device)
    row["train_s"] = training.seconds
    row["final_loss"] = loss
    if not math.isfinite(loss):
        return with_outcome(row, "nonfinite", f"training loss became {loss}")
    row["accuracy"] = evaluate(model, test)
    return row


def _empty_row(problem: Problem, variant: str, preset: TaskPreset, *, seed: int, device: str) -> dict[str, Any]:
    """The row of `variant` on `problem` before it is built or trained: status ok, every result None."""
    return {
        "task": problem.task,
        "variant": variant,
        "config": None,
        "seq_len": problem.seq_len,
        "status": "ok",
        "reason": None,
        "accuracy": None,
        "chance": problem.chance,
        "majority": None,
        "delta_to_dense": None,
        "final_loss": None,
        "steps": preset.steps,
        "batch": preset.batch_size(problem.seq_len),
        "d_model": preset.d_model,
        "layers": preset.layers,
        "heads": preset.heads,
        "lr": preset.lr,
        "params": None,
        "train_s": None,
        "seed": seed,
        "device": device,
        "test_size": preset.test_size,
        "task_details": problem.details,
    }


def _build_model(
    problem: Problem,
    variant: str,
    fields: dict[str, Any],
    preset: TaskPreset,
    *,
    seed: int,
) -> TinyTransformer:
    """A fresh TinyTransformer for `problem` with `variant` in every block, seeded so only the attention differs."""
    torch.manual_seed(seed)  # the same initial weights outside the attention for every variant
    model = TinyTransformer(
        vocab=problem.vocab,
        classes=problem.classes,
        seq_len=problem.seq_len,
        d_model=preset.d_model,
        layers=preset.layers,
        heads=preset.heads,
        per_token=problem.per_token,
        value_vocab=problem.value_vocab,
    )
    torch.manual_seed(seed + 1)
    model.set_attention(lambda: build_variant(variant, **fields))
    return model


def _train(model: TinyTransformer, problem: Problem, preset: TaskPreset, seed: int, device: str) -> float:
    """AdamW with warm-up and cosine decay; returns the mean loss of the last 10% of steps."""
    opt = torch.optim.AdamW(model.parameters(), lr=preset.lr, betas=(0.9, 0.98), weight_decay=0.01)
    warmup = max(1, preset.steps // 10)
    schedule = lambda s: min(1.0, (s + 1) / warmup) * (0.1 + 0.45 * (1 + math.cos(math.pi * s / preset.steps)))  # noqa: E731
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
    tail: list[float] = []
    model.train()
    for step in range(preset.steps):
        batch = _to(problem.make(preset.batch_size(problem.seq_len), seed * 10**6 + step), device)
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
