"""One calibration protocol for every learnable variant (built-in or plugin); save/load of fitted ones is in checkpoint.py.

A learnable variant (``capabilities.learnable``) is fitted against a teacher (default: exact
softmax attention) on calibration batches that come from the evaluation distribution but from
other seeds, never the evaluation tensors. The budget (steps, lr, and the batches' length) is
given by the call and recorded in the returned ``CalibrationReport``; the defaults below are the
budget the sweep uses, the same for every learnable variant in a comparison.

Losses (``loss=``):
- "weight_ce": attention-weight cross-entropy, -sum_j A_ij log A'_ij (Hedgehog). Needs the student
  and the teacher to expose ``attention_weights(q, k, *, causal, kv_mask) -> (B, H, N, M)``. When both
  also take ``rows=`` (query indices; the built-ins and the exact teacher do) and N > ``rows``, each
  step scores ``rows`` query rows drawn afresh, so the loss holds rows x M weights, never N x M.
- "mse": mean squared error of the outputs (LoLCATs' attention transfer). Works for any variant.
- "auto": "weight_ce" when both sides expose ``attention_weights`` that are probabilities (e.g. distilled against the
  exact teacher or dense), else "mse" (e.g. linformer, whose effective weights are signed: ``signed_weights``).

Generalisation (``heldout=``): batches from other seeds than the training ones. Every ``eval_every``
steps the relative L2 error of the outputs on them is measured; the fit keeps the parameters of the
best one and stops when PATIENCE evaluations in a row improved it by less than 1% (early
stopping), or, given a ``target`` (an error budget), once it cannot reach it even on an optimistic line. The report
gives the relative L2 error on the training batches and on the held-out ones, so a row can show the gap. When both
sides take ``rows=`` (as for a sampled weight_ce loss) and a batch is longer than ERROR_ROWS, its errors are measured on
ERROR_ROWS fixed query rows, each side's weights on them applied to v (the weights contract holds that to the
variant's output), so no check runs the N-row call.
"""

from __future__ import annotations

import inspect
import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import Tensor, nn

from variants._checks import check_choice, check_float, check_int, check_qkv
from variants._gqa import sdpa, weighted_values

DEFAULT_STEPS = 150  # Adam steps: a few seconds on 2 CPU cores at the default length
DEFAULT_LR = 3e-2  # Adam learning rate (parameters are kept at unit scale, so one rate suits all)
DEFAULT_SEQ_LEN = 256  # calibration sequence length (the batches' N) the sweep generates
DEFAULT_BATCHES = 4  # distinct calibration batches the sweep generates (cycled over the steps)
DEFAULT_ROWS = 64  # query rows a weight_ce step scores (all rows when N is not larger)
EVAL_EVERY = 10  # steps between held-out evaluations (early stopping)
PATIENCE = 2  # evaluations in a row without a 1% gain that stop the fit
TARGET_MARGIN = 1.5  # a fit stops as hopeless only when even its optimistic end is this far above the target
MEASURED_BATCHES = 4  # the loss before/after and the training error are measured on the first batches (their cost)
ERROR_ROWS = 256  # query rows the training and held-out errors are measured on when both sides give weights on rows
LOSSES = ("auto", "weight_ce", "mse")
_TINY = 1e-12  # floor inside log() of the weight cross-entropy

Batch = Sequence[Tensor]  # (q, k, v), each (B, H, N, D) / (B, H, M, D)


@dataclass(frozen=True)
class CalibrationReport:
    """What a calibration did: the budget, the loss before and after, and how long it took."""

    variant: str  # registry name of the calibrated variant
    learnable: bool  # False: nothing was fitted (the call returned at once)
    loss: str | None  # the loss used ("weight_ce" | "mse"), None when not learnable
    loss_before: float | None  # mean loss over the first MEASURED_BATCHES calibration batches before fitting
    loss_after: float | None  # the same after fitting
    steps: int  # optimizer steps taken
    lr: float  # Adam learning rate
    seq_len: int | None  # N of the calibration batches (the longest, if they differ)
    batches: int  # distinct calibration batches (cycled over the steps)
    causal: bool  # fitted with the causal mask
    teacher: str  # "exact" or the teacher's name
    wall_s: float  # seconds for the whole call
    # relative L2 error of the outputs on the first MEASURED_BATCHES training batches (on ERROR_ROWS rows of each, sampled)
    train_error: float | None = None
    heldout_error: float | None = None  # the same on the held-out batches (None without them)
    heldout_batches: int = 0  # held-out batches early stopping watched
    stopped_early: bool = False  # the held-out error stopped improving, or could not reach `target`, before `steps`

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
    heldout: Iterable[Batch] | None = None,
    rows: int = DEFAULT_ROWS,
    target: float | None = None,
) -> CalibrationReport:
    """Fit a learnable variant to a teacher on calibration batches with Adam; a no-op otherwise.

    Args:
        variant: the variant to fit in place (a non-learnable one returns at once).
        batches: a list or iterable of (q, k, v) tuples, each (B, H, N, D) / (B, H, M, D),
            cast to float32; cycled over the steps. Never the evaluation tensors.
        steps: optimizer steps at most (0: only measure the loss).
        lr: Adam learning rate.
        teacher: exact softmax attention when None; else a variant or callable
            teacher(q, k, v, causal=...) -> output (with ``attention_weights`` for "weight_ce").
        loss: "auto" | "weight_ce" | "mse" (see the module docstring).
        causal: fit under the causal mask.
        heldout: batches from still other seeds, for early stopping and the held-out error (None: all steps run).
        rows: query rows per weight_ce step (sampled when N is larger).
        target: a held-out error worth reaching (an error budget): with held-out batches, the fit also stops once its
            held-out error, falling by its last gain at every remaining evaluation (an optimistic line: fits slow
            down), would still end above TARGET_MARGIN x target; what it reports is then an upper bound.
    Returns:
        A CalibrationReport (loss before/after, training and held-out errors, budget, wall time).
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
    check_int("rows", rows, minimum=1)
    batches = _checked_batches(batches, causal)
    held = _checked_batches(heldout, causal) if heldout is not None else []
    kind = _pick_loss(variant, teacher, loss)
    sampled = kind == "weight_ce" and _takes_rows(variant) and (teacher is None or _takes_rows(teacher))
    measured = range(min(len(batches), MEASURED_BATCHES))
    # the batches errors are measured on (the first training ones, the held-out ones) and their rows: ERROR_ROWS fixed
    # rows per batch when both sides give weights on rows (R x M work per check, never the N-row call); else all rows
    scored = batches[: len(measured)] + held
    checked_rows = [_error_rows(q.shape[2], i) if sampled else None for i, (q, _, _) in enumerate(scored)]
    outputs = [_teacher_output(teacher, *batch, causal, r) for batch, r in zip(scored, checked_rows)]
    targets = None  # mse's: every training batch, every row (never sampled, so the measured ones are outputs already)
    if kind == "mse":
        targets = outputs[: len(measured)] + [_teacher_output(teacher, *b, causal) for b in batches[len(measured) :]]
    generator = torch.Generator().manual_seed(0)

    def batch_loss(i: int, fixed: bool = False) -> Tensor:
        q, k, v = batches[i]
        if kind == "mse":
            return (variant(q, k, v, causal=causal).float() - targets[i]).pow(2).mean()
        N = q.shape[2]
        picked = None
        if sampled and N > rows:
            g = torch.Generator().manual_seed(i) if fixed else generator
            picked = torch.randperm(N, generator=g)[:rows].sort().values.to(q.device)
        extra = {} if picked is None else {"rows": picked}
        want = _weights(teacher, q, k, causal, extra)
        student = variant.attention_weights(q, k, causal=causal, kv_mask=None, **extra)  # (B, H, R, M)
        return -(want * student.clamp_min(_TINY).log()).sum(-1).mean()

    def mean_loss() -> float:  # on fixed rows, so before and after compare
        with torch.no_grad():
            return sum(float(batch_loss(i, fixed=True)) for i in measured) / len(measured)

    trained_at, held_at = range(len(measured)), range(len(measured), len(scored))  # indices into scored

    def error(which: range) -> float:
        with torch.no_grad():
            errors = [_rel_l2(_output(variant, *scored[i], causal, checked_rows[i]), outputs[i]) for i in which]
            return sum(errors) / len(errors)

    was_training = variant.training
    variant.train()
    stopped = False
    try:
        before = mean_loss()  # also creates lazily built parameters (e.g. distilled's)
        params = [p for p in variant.parameters() if p.requires_grad]
        taken = 0
        if params and steps:
            opt = torch.optim.Adam(params, lr=lr)
            best, best_state, stale = math.inf, None, 0
            last = error(held_at) if held and target is not None else math.inf
            for step in range(steps):
                opt.zero_grad(set_to_none=True)
                batch_loss(step % len(batches)).backward()
                opt.step()
                taken = step + 1
                if held and (taken % EVAL_EVERY == 0 or taken == steps):
                    current = error(held_at)
                    if current < best:
                        stale = stale + 1 if current > best * 0.99 else 0
                        best, best_state = current, [p.detach().clone() for p in params]
                    else:
                        stale += 1
                    evals_left = math.ceil((steps - taken) / EVAL_EVERY)
                    gain = max(last - current, 0.0) if math.isfinite(last) else math.inf
                    hopeless = target is not None and current - gain * evals_left > TARGET_MARGIN * target
                    last = current
                    if (stale >= PATIENCE or hopeless) and taken < steps:
                        stopped = True
                        break
            if best_state is not None:  # the parameters of the best held-out evaluation
                with torch.no_grad():
                    for p, saved in zip(params, best_state):
                        p.copy_(saved)
        after = mean_loss()
        train_error = error(trained_at)
        heldout_error = error(held_at) if held else None
    finally:
        variant.train(was_training)
    seq_len = max(q.shape[2] for q, _, _ in batches)
    return CalibrationReport(
        name,
        True,
        kind,
        before,
        after,
        taken if params else 0,
        float(lr),
        seq_len,
        len(batches),
        causal,
        teacher_name,
        time.perf_counter() - start,
        train_error,
        heldout_error,
        len(held),
        stopped,
    )


def _takes_rows(obj: Any) -> bool:
    """Whether obj.attention_weights takes rows= (query indices), so a loss can score sampled rows only."""
    fn = getattr(obj, "attention_weights", None)
    try:
        return callable(fn) and "rows" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def _weights(teacher: Any, q: Tensor, k: Tensor, causal: bool, extra: dict[str, Tensor]) -> Tensor:
    """The teacher's attention weights for the rows in `extra` (all rows without), float32, no grad."""
    from variants.reference import attention_weights

    with torch.no_grad():
        if teacher is None:
            return attention_weights(q, k, causal=causal, dtype=torch.float32, **extra)
        return teacher.attention_weights(q, k, causal=causal, kv_mask=None, **extra).float()


def _rel_l2(out: Tensor, want: Tensor) -> float:
    return float((out - want).norm() / want.norm().clamp_min(1e-30))


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


def _gives_distribution(obj: Any) -> bool:
    """Whether obj's attention_weights can be cross-entropy's distribution: it has its own (AttentionVariant's default,
    marked `declines`, gives none) and does not declare them signed (Linformer's)."""
    fn = getattr(obj, "attention_weights", None)
    return callable(fn) and not getattr(fn, "declines", False) and not getattr(obj, "signed_weights", False)


def _pick_loss(variant: Any, teacher: Any, loss: str) -> str:
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
