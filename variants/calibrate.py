"""One calibration protocol for every learnable variant (built-in or plugin); save/load of fitted ones is in checkpoint.py.

A learnable variant (``capabilities.learnable``) is fitted against a teacher (default: exact
softmax attention) on calibration batches that come from the evaluation distribution but from
other seeds, never the evaluation tensors. The budget (steps, lr, and the batches' length) is
given by the call and recorded in the returned ``CalibrationReport``; the defaults below are the
budget the sweep uses, the same for every learnable variant in a comparison.

Losses (``loss=``):
- "weight_ce": attention-weight cross-entropy, -sum_j A_ij log A'_ij (Hedgehog). Needs the student
  and the teacher to expose ``attention_weights(q, k, *, causal, kv_mask) -> (B, H, N, M)``; it
  materialises N x M, so use it on short calibration sequences.
- "mse": mean squared error of the outputs (LoLCATs' attention transfer). Works for any variant.
- "auto": "weight_ce" when both sides expose ``attention_weights`` (e.g. distilled against the
  exact teacher), else "mse" (e.g. linformer, whose weights are over projected rows).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import Tensor, nn

from variants._checks import check_choice, check_float, check_int, check_qkv

DEFAULT_STEPS = 150  # Adam steps: a few seconds on 2 CPU cores at the default length
DEFAULT_LR = 3e-2  # Adam learning rate (parameters are kept at unit scale, so one rate suits all)
DEFAULT_SEQ_LEN = 256  # calibration sequence length (the batches' N) the sweep generates
DEFAULT_BATCHES = 4  # distinct calibration batches the sweep generates (cycled over the steps)
LOSSES = ("auto", "weight_ce", "mse")
_TINY = 1e-12  # floor inside log() of the weight cross-entropy

Batch = Sequence[Tensor]  # (q, k, v), each (B, H, N, D) / (B, H, M, D)


@dataclass(frozen=True)
class CalibrationReport:
    """What a calibration did: the budget, the loss before and after, and how long it took."""

    variant: str  # registry name of the calibrated variant
    learnable: bool  # False: nothing was fitted (the call returned at once)
    loss: str | None  # the loss used ("weight_ce" | "mse"), None when not learnable
    loss_before: float | None  # mean loss over the calibration batches before fitting
    loss_after: float | None  # the same after fitting
    steps: int  # optimizer steps taken
    lr: float  # Adam learning rate
    seq_len: int | None  # N of the calibration batches (the longest, if they differ)
    batches: int  # distinct calibration batches (cycled over the steps)
    causal: bool  # fitted with the causal mask
    teacher: str  # "exact" or the teacher's name
    wall_s: float  # seconds for the whole call

    def to_dict(self) -> dict[str, Any]:
        """The report as a plain dict, as it goes into a result row's `calibration` field."""
        return asdict(self)


def calibrate(
    variant: nn.Module,  # an AttentionVariant (not imported: base.fit imports this module)
    batches: Iterable[Batch],
    *,
    steps: int,
    lr: float = DEFAULT_LR,
    teacher: nn.Module | Callable[..., Tensor] | None = None,
    loss: str = "auto",
    causal: bool = False,
) -> CalibrationReport:
    """Fit a learnable variant to a teacher on calibration batches with Adam; a no-op otherwise.

    Args:
        variant: the variant to fit in place (a non-learnable one returns at once).
        batches: a list or iterable of (q, k, v) tuples, each (B, H, N, D) / (B, H, M, D),
            cast to float32; cycled over the steps. Never the evaluation tensors.
        steps: optimizer steps (0: only measure the loss).
        lr: Adam learning rate.
        teacher: exact softmax attention when None; else a variant or callable
            teacher(q, k, v, causal=...) -> output (with ``attention_weights`` for "weight_ce").
        loss: "auto" | "weight_ce" | "mse" (see the module docstring).
        causal: fit under the causal mask.
    Returns:
        A CalibrationReport (loss before/after, budget, wall time).
    """
    start = time.perf_counter()
    learnable = bool(getattr(variant, "capabilities", None) and variant.capabilities.learnable)
    teacher_name = "exact" if teacher is None else getattr(teacher, "name", type(teacher).__name__)
    name = getattr(variant, "name", type(variant).__name__)
    if not learnable:
        return CalibrationReport(
            name, False, None, None, None, 0, float(lr), None, 0, causal, teacher_name, time.perf_counter() - start
        )
    check_int("steps", steps, minimum=0)
    check_float("lr", lr, positive=True)
    check_choice("loss", loss, LOSSES)
    batches = _checked_batches(batches, causal)
    kind = _pick_loss(variant, teacher, loss)
    targets = [_target(teacher, kind, q, k, v, causal) for q, k, v in batches]

    def batch_loss(i: int) -> Tensor:
        q, k, v = batches[i]
        if kind == "weight_ce":
            student = variant.attention_weights(q, k, causal=causal, kv_mask=None)  # (B, H, N, M)
            return -(targets[i] * student.clamp_min(_TINY).log()).sum(-1).mean()
        return (variant(q, k, v, causal=causal).float() - targets[i]).pow(2).mean()

    def mean_loss() -> float:
        with torch.no_grad():
            return sum(float(batch_loss(i)) for i in range(len(batches))) / len(batches)

    was_training = variant.training
    variant.train()
    try:
        before = mean_loss()  # also creates lazily built parameters (e.g. distilled's)
        params = [p for p in variant.parameters() if p.requires_grad]
        if params and steps:
            opt = torch.optim.Adam(params, lr=lr)
            for step in range(steps):
                opt.zero_grad(set_to_none=True)
                batch_loss(step % len(batches)).backward()
                opt.step()
        after = mean_loss()
    finally:
        variant.train(was_training)
    seq_len = max(q.shape[2] for q, _, _ in batches)
    return CalibrationReport(
        name,
        True,
        kind,
        before,
        after,
        steps if params else 0,
        float(lr),
        seq_len,
        len(batches),
        causal,
        teacher_name,
        time.perf_counter() - start,
    )


def _checked_batches(batches: Iterable[Batch], causal: bool) -> list[tuple[Tensor, Tensor, Tensor]]:
    """The batches as a list of float32 (q, k, v), each checked against the contract."""
    if isinstance(batches, Tensor) or batches is None:
        raise TypeError(f"batches must be a list or iterable of (q, k, v) tuples, got {type(batches).__name__}")
    out = []
    for i, batch in enumerate(batches):
        if isinstance(batch, Tensor) or not isinstance(batch, (tuple, list)) or len(batch) != 3:
            got = f"a Tensor of shape {tuple(batch.shape)}" if isinstance(batch, Tensor) else repr(type(batch).__name__)
            raise TypeError(f"batch {i} must be a (q, k, v) tuple of tensors, got {got}; pass e.g. [(q, k, v), ...]")
        try:
            check_qkv(*batch, causal=causal)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"batch {i}: {exc}") from None
        out.append(tuple(t.detach().float() for t in batch))
    if not out:
        raise ValueError(
            "batches is empty: calibrate needs at least one (q, k, v) batch (from seeds other than the evaluation's)"
        )
    return out


def _pick_loss(variant: Any, teacher: Any, loss: str) -> str:
    student_has = callable(getattr(variant, "attention_weights", None))
    teacher_has = teacher is None or callable(getattr(teacher, "attention_weights", None))
    if loss == "auto":
        return "weight_ce" if student_has and teacher_has else "mse"
    if loss == "weight_ce" and not (student_has and teacher_has):
        who = "the variant" if not student_has else "the teacher"
        raise ValueError(
            f"loss='weight_ce' needs {who} to expose attention_weights(q, k, *, causal, kv_mask); "
            "use loss='mse' (or 'auto')"
        )
    return loss


def _target(teacher: Any, kind: str, q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
    """The teacher's attention weights (weight_ce) or output (mse) for one batch, float32, no grad."""
    from variants.reference import attention_weights

    with torch.no_grad():
        if kind == "weight_ce":
            if teacher is None:
                return attention_weights(q, k, causal=causal, dtype=torch.float32)
            return teacher.attention_weights(q, k, causal=causal, kv_mask=None).float()
        if teacher is None:  # exact float32 attention without an N x M matrix, so long calibrations stay cheap
            from variants._gqa import sdpa

            return sdpa(q.float(), k.float(), v.float(), is_causal=causal)  # k, v may have fewer (GQA) heads
        return teacher(q, k, v, causal=causal).float()
