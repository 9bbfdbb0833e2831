"""What a calibration minimises and measures: the loss chosen, the teacher's targets, a batch's loss, the errors.

The protocol itself (the steps, early stopping, the report) is variants/calibrate.py; this module is its objective.
"""

from __future__ import annotations

import inspect
from typing import Any, Iterable, Sequence

import torch
from torch import Tensor, nn

from variants._checks import check_qkv
from variants._gqa import sdpa, weighted_values
from variants.reference import attention_weights

ERROR_ROWS = 256  # query rows the training and held-out errors are measured on when both sides give weights on rows
_TINY = 1e-12  # floor inside log() of the weight cross-entropy

Batch = Sequence[Tensor]  # (q, k, v), each (B, H, N, D) / (B, H, M, D)


class Objective:
    """One fit's loss and errors: the batches, what the teacher gives on them, and the student scored against it.

    `measured` training batches (the first ones) and the held-out ones are the batches errors are measured on
    (`scored`): ERROR_ROWS fixed rows of each when both sides give weights on rows (R x M work per check, never the
    N-row call), else all rows.
    """

    def __init__(
        self,
        variant: nn.Module,
        teacher: Any,
        kind: str,
        batches: list[tuple[Tensor, Tensor, Tensor]],
        held: list[tuple[Tensor, Tensor, Tensor]],
        *,
        measured: int,
        causal: bool,
        rows: int,
    ):
        self.variant, self.teacher, self.kind = variant, teacher, kind
        self.batches, self.causal, self.rows = batches, causal, rows
        self.sampled = kind == "weight_ce" and _takes_rows(variant) and (teacher is None or _takes_rows(teacher))
        self.measured = range(measured)
        scored = batches[:measured] + held
        checked_rows = [_error_rows(q.shape[2], i) if self.sampled else None for i, (q, _, _) in enumerate(scored)]
        outputs = [_teacher_output(teacher, *batch, causal, r) for batch, r in zip(scored, checked_rows)]
        self.scored, self.checked_rows, self.outputs = scored, checked_rows, outputs
        self.targets = (
            None  # mse's: every training batch, every row (never sampled, so the measured ones are outputs already)
        )
        if kind == "mse":
            self.targets = outputs[:measured] + [_teacher_output(teacher, *b, causal) for b in batches[measured:]]
        self.trained_at, self.held_at = range(measured), range(measured, len(scored))  # indices into scored
        self.generator = torch.Generator().manual_seed(0)

    def batch_loss(self, i: int, fixed: bool = False) -> Tensor:
        """The loss of training batch i (weight_ce: on `rows` query rows drawn afresh, or fixed per batch)."""
        q, k, v = self.batches[i]
        variant, causal = self.variant, self.causal
        if self.kind == "mse":
            return (variant(q, k, v, causal=causal).float() - self.targets[i]).pow(2).mean()
        N = q.shape[2]
        picked = None
        if self.sampled and N > self.rows:
            g = torch.Generator().manual_seed(i) if fixed else self.generator
            picked = torch.randperm(N, generator=g)[: self.rows].sort().values.to(q.device)
        extra = {} if picked is None else {"rows": picked}
        want = _weights(self.teacher, q, k, causal, extra)
        student = variant.attention_weights(q, k, causal=causal, kv_mask=None, **extra)  # (B, H, R, M)
        return -(want * student.clamp_min(_TINY).log()).sum(-1).mean()

    def mean_loss(self) -> float:
        """The mean loss over the measured batches, on fixed rows, so before and after compare."""
        with torch.no_grad():
            return sum(float(self.batch_loss(i, fixed=True)) for i in self.measured) / len(self.measured)

    def error(self, which: range) -> float:
        """The mean relative L2 error of the student's outputs on the scored batches `which`."""
        with torch.no_grad():
            errors = [
                _rel_l2(_output(self.variant, *self.scored[i], self.causal, self.checked_rows[i]), self.outputs[i])
                for i in which
            ]
            return sum(errors) / len(errors)


def checked_batches(batches: Iterable[Batch], causal: bool) -> list[tuple[Tensor, Tensor, Tensor]]:
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


def pick_loss(variant: Any, teacher: Any, loss: str) -> str:
    """The loss a fit uses: `loss`, or for "auto" weight_ce when both sides give probabilities, else mse."""
    student_has = _gives_distribution(variant)
    teacher_has = teacher is None or _gives_distribution(teacher)
    if loss == "auto":
        return "weight_ce" if student_has and teacher_has else "mse"
    if loss == "weight_ce" and not (student_has and teacher_has):
        who = "the variant" if not student_has else "the teacher"
        raise ValueError(
            f"loss='weight_ce' needs {who} to expose attention_weights(q, k, *, causal, kv_mask) that are probabilities "
            "(not the default that declines, not signed like linformer's); "
            "use loss='mse' (or 'auto')"
        )
    return loss


def _takes_rows(obj: Any) -> bool:
    """Whether obj.attention_weights takes rows= (query indices), so a loss can score sampled rows only."""
    fn = getattr(obj, "attention_weights", None)
    try:
        return callable(fn) and "rows" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _weights(teacher: Any, q: Tensor, k: Tensor, causal: bool, extra: dict[str, Tensor]) -> Tensor:
    """The teacher's attention weights for the rows in `extra` (all rows without), float32, no grad."""
    with torch.no_grad():
        if teacher is None:
            return attention_weights(q, k, causal=causal, dtype=torch.float32, **extra)
        return teacher.attention_weights(q, k, causal=causal, kv_mask=None, **extra).float()


def _rel_l2(out: Tensor, want: Tensor) -> float:
    return float((out - want).norm() / want.norm().clamp_min(1e-30))


def _gives_distribution(obj: Any) -> bool:
    """Whether obj's attention_weights can be cross-entropy's distribution: it has its own (AttentionVariant's default,
    marked `declines`, gives none) and does not declare them signed (Linformer's)."""
    fn = getattr(obj, "attention_weights", None)
    return callable(fn) and not getattr(fn, "declines", False) and not getattr(obj, "signed_weights", False)


def _error_rows(N: int, i: int) -> Tensor | None:
    """The ERROR_ROWS query rows batch i's errors are measured on, the same at every check (None: all, N not larger)."""
    if N <= ERROR_ROWS:
        return None
    return torch.randperm(N, generator=torch.Generator().manual_seed(i))[:ERROR_ROWS].sort().values


def _output(obj: Any, q: Tensor, k: Tensor, v: Tensor, causal: bool, rows: Tensor | None = None) -> Tensor:
    """obj's output for one batch, float32: the call, or on query rows `rows` its attention weights applied to v."""
    if rows is None:
        return obj(q, k, v, causal=causal).float()
    weights = obj.attention_weights(q, k, causal=causal, kv_mask=None, rows=rows.to(q.device)).float()
    return weighted_values(weights, v.float())


def _teacher_output(teacher: Any, q: Tensor, k: Tensor, v: Tensor, causal: bool, rows: Tensor | None = None) -> Tensor:
    """The teacher's output for one batch (on query rows `rows`, default all), float32, no grad."""
    with torch.no_grad():
        if rows is not None:
            return weighted_values(_weights(teacher, q, k, causal, {"rows": rows.to(q.device)}), v.float())
        if teacher is None:  # exact float32 attention without an N x M matrix, so long calibrations stay cheap
            return sdpa(q.float(), k.float(), v.float(), is_causal=causal)  # k, v may have fewer (GQA) heads
        return teacher(q, k, v, causal=causal).float()
