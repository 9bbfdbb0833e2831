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

The objective (the loss chosen, the teacher's targets, a batch's loss, the errors) is variants/_calibrate_objective.py;
this module is the protocol: the budget checked, the steps, early stopping on the held-out batches, the report.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, NamedTuple

import torch
from torch import Tensor, nn

from variants._calibrate_objective import ERROR_ROWS, Batch, Objective, checked_batches, pick_loss  # noqa: F401 - ERROR_ROWS re-exported
from variants._checks import check_choice, check_float, check_int

DEFAULT_STEPS = 150  # Adam steps: a few seconds on 2 CPU cores at the default length
DEFAULT_LR = 3e-2  # Adam learning rate (parameters are kept at unit scale, so one rate suits all)
DEFAULT_SEQ_LEN = 256  # calibration sequence length (the batches' N) the sweep generates
DEFAULT_BATCHES = 4  # distinct calibration batches the sweep generates (cycled over the steps)
DEFAULT_ROWS = 64  # query rows a weight_ce step scores (all rows when N is not larger)
EVAL_EVERY = 10  # steps between held-out evaluations (early stopping)
PATIENCE = 2  # evaluations in a row without a 1% gain that stop the fit
TARGET_MARGIN = 1.5  # a fit stops as hopeless only when even its optimistic end is this far above the target
MEASURED_BATCHES = 4  # the loss before/after and the training error are measured on the first batches (their cost)
LOSSES = ("auto", "weight_ce", "mse")


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
    _check_budget(steps, lr, loss, rows)
    batches = checked_batches(batches, causal)
    held = checked_batches(heldout, causal) if heldout is not None else []
    kind = pick_loss(variant, teacher, loss)
    measured = min(len(batches), MEASURED_BATCHES)
    objective = Objective(variant, teacher, kind, batches, held, measured=measured, causal=causal, rows=rows)
    fitted = _fit_in_train_mode(variant, objective, steps=steps, lr=lr, target=target)
    return _report(
        name, fitted, kind=kind, lr=lr, batches=batches, held=held, causal=causal, teacher=teacher_name, start=start
    )


class _Fitted(NamedTuple):
    """What the fit did: the loss before and after, the steps taken, whether it stopped early, the errors after."""

    before: float
    after: float
    taken: int
    stopped: bool
    train_error: float
    heldout_error: float | None


def _report(
    name: str,
    fitted: _Fitted,
    *,
    kind: str,
    lr: float,
    batches: list,
    held: list,
    causal: bool,
    teacher: str,
    start: float,
) -> CalibrationReport:
    """The report of a learnable variant's calibration (`start`: when the call began, perf_counter seconds)."""
    return CalibrationReport(
        variant=name,
        learnable=True,
        loss=kind,
        loss_before=fitted.before,
        loss_after=fitted.after,
        steps=fitted.taken,
        lr=float(lr),
        seq_len=max(q.shape[2] for q, _, _ in batches),  # the longest
        batches=len(batches),
        causal=causal,
        teacher=teacher,
        wall_s=time.perf_counter() - start,
        train_error=fitted.train_error,
        heldout_error=fitted.heldout_error,
        heldout_batches=len(held),
        stopped_early=fitted.stopped,
    )


def _check_budget(steps: int, lr: float, loss: str, rows: int) -> None:
    """The budget's arguments, each with a message that names it (ValueError / TypeError)."""
    check_int("steps", steps, minimum=0)
    check_float("lr", lr, positive=True)
    check_choice("loss", loss, LOSSES)
    check_int("rows", rows, minimum=1)


def _fit_in_train_mode(
    variant: nn.Module, objective: Objective, *, steps: int, lr: float, target: float | None
) -> _Fitted:
    """The fit in train mode (the variant's own mode restored after): the loss and errors measured around it."""
    was_training = variant.training
    variant.train()
    try:
        before = objective.mean_loss()  # also creates lazily built parameters (e.g. distilled's)
        params = [p for p in variant.parameters() if p.requires_grad]
        taken, stopped = _fit(objective, params, steps=steps, lr=lr, target=target) if params and steps else (0, False)
        after = objective.mean_loss()
        train_error = objective.error(objective.trained_at)
        heldout_error = objective.error(objective.held_at) if objective.held_at else None
    finally:
        variant.train(was_training)
    return _Fitted(before, after, taken, stopped, train_error, heldout_error)


def _fit(
    objective: Objective, params: list[nn.Parameter], *, steps: int, lr: float, target: float | None
) -> tuple[int, bool]:
    """Adam steps on the training batches, cycled; with held-out batches, early stopping and the best parameters kept.

    Returns (steps taken, whether the held-out error stopped the fit before `steps`)."""
    held = bool(objective.held_at)
    opt = torch.optim.Adam(params, lr=lr)
    watch = _HeldOut(objective, steps, target) if held else None
    taken, stopped = 0, False
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        objective.batch_loss(step % len(objective.batches)).backward()
        opt.step()
        taken = step + 1
        evaluated = watch is not None and (taken % EVAL_EVERY == 0 or taken == steps)
        if evaluated and watch.evaluate(params, taken) and taken < steps:
            stopped = True
            break
    if watch is not None and watch.best_state is not None:  # the parameters of the best held-out evaluation
        with torch.no_grad():
            for p, saved in zip(params, watch.best_state):
                p.copy_(saved)
    return taken, stopped


class _HeldOut:
    """Early stopping on the held-out batches: the best error and its parameters, and whether to stop."""

    def __init__(self, objective: Objective, steps: int, target: float | None):
        self.objective, self.steps, self.target = objective, steps, target
        self.best, self.best_state, self.stale = math.inf, None, 0
        self.last = objective.error(objective.held_at) if target is not None else math.inf

    def evaluate(self, params: list[nn.Parameter], taken: int) -> bool:
        """Measure the held-out error after `taken` steps; True when the fit should stop (stale or hopeless)."""
        current = self.objective.error(self.objective.held_at)
        if current < self.best:
            self.stale = self.stale + 1 if current > self.best * 0.99 else 0
            self.best, self.best_state = current, [p.detach().clone() for p in params]
        else:
            self.stale += 1
        evals_left = math.ceil((self.steps - taken) / EVAL_EVERY)
        gain = max(self.last - current, 0.0) if math.isfinite(self.last) else math.inf
        hopeless = self.target is not None and current - gain * evals_left > TARGET_MARGIN * self.target
        self.last = current
        return self.stale >= PATIENCE or hopeless
