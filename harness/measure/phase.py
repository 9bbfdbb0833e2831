"""A cell's stages in order, each named and its typed result kept as it finishes: the one path every cell runs.

the memory check (harness.measure.roofline: a CPU cell whose inputs and float64 reference exceed the host's free
memory is "oom" before anything is allocated) -> inputs (harness.measure.context) -> the trivial answers' errors (prefill attention cells) -> for a cell matched to an
error budget, build and refuse, then the search for its config (harness.measure.tuning; none found: "unreachable";
a config another budget's cell of this process measured: its measurement, `tuning.measured_with` naming it) ->
build the config measured -> refuse -> calibrate (learnable variants, on other seeds) -> prepare (set-up, untimed) ->
the checked call (accuracy against float64; also the warm-up and the timer's first estimate) -> peak memory of one
call and the kernels it ran (harness.measure.memory) -> timing (harness.measure.speedup: paired with the baseline in
alternating blocks, or alone) -> the last timed call's output scored against the checked call's reference (a variant
right only on its checked call is an error row) -> FLOPs and TFLOP/s (harness.measure.flops). From prepare on, a cell
kind supplies what differs (harness.measure.kind.Phase): a prefill's (harness.measure.prefill), a decode's
(harness.measure.decode) or a layer's (harness.measure.layer). A padded cell passes its kv_mask to every call.

stage(name) runs a block as a named stage: an exception inside it is re-raised as StageFailed, so the row's reason
says during which stage the cell failed. Each stage's typed result goes into its slot of the cell's Record as the stage
finishes, so a cell that fails later still reports what its earlier stages measured (backend, errors, memory). A
refusal, whichever stage finds it, is a NotSupportedError with every reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator, NamedTuple

import torch

from harness.measure.accuracy import BadOutput
from harness.measure.calibration import Calibration, calibrated
from harness.measure.context import MEASURED, CellInputs, MeasureContext, Measured, measured_key, shared
from harness.measure.decode import DecodePhase
from harness.measure.flops import Flops
from harness.measure.roofline import host_memory_reason
from harness.measure.kind import Phase, Prepared
from harness.measure.layer import LayerPhase
from harness.measure.memory import Memory, memory_and_kernel
from harness.measure.outcome import Deadline
from harness.measure.prefill import PrefillPhase
from harness.measure.reference import TrivialErrors, baseline_errors
from harness.measure.settings import DTYPES, MeasureSettings
from harness.measure.speedup import Timing, timed_fields
from harness.measure.tuning import tune
from harness.cell_rules import kv_refusals, scores_reason, tricks_reason
from harness.measure.scores_quant import call_backend, scores_features
from harness.schema import Cell
from variants import NotSupportedError, build_variant


class Outcome(NamedTuple):
    """How a cell's stages ended: its status and reason (an exception is classified by harness.measure.outcome)."""

    status: str
    reason: str | None = None


@dataclass(slots=True)
class Record:
    """What a cell's stages returned, each in its slot as its stage finishes (in stage order)."""

    trivial: TrivialErrors | None = None  # the trivial answers' errors (prefill attention cells)
    backend: str | None = None  # the backend the config built resolves
    search: dict[str, Any] | None = None  # an error-budget cell's search (harness.measure.tuning.Tuned.fields)
    calibration: Calibration | None = None
    prepared: Prepared | None = None
    errors: dict[str, Any] | None = None  # the checked call's accuracy fields (a timed call's where they disagree)
    memory: Memory | None = None
    timing: Timing | None = None
    flops: Flops | None = None

    def row_fields(self) -> dict[str, Any]:
        """The row fields of every slot filled, slot after slot (a later slot's field replaces an earlier one's)."""
        parts = [getattr(self, f.name) for f in dataclasses.fields(self)]
        return {name: value for part in parts for name, value in _fields_of(part).items()}


def _fields_of(result: Any) -> dict[str, Any]:
    """A slot's row fields: a typed result's fields, a mapping's items, the backend by its name; none when empty."""
    if result is None:
        return {}
    if isinstance(result, str):
        return {"backend": result}
    if isinstance(result, dict):
        return result
    return {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}


def measure_stages(
    cell: Cell, settings: MeasureSettings, context: MeasureContext, record: Record, clock: Deadline
) -> Outcome:
    """The cell's stages in order (see the module doc), each result in its slot of `record`; how the last one ended."""
    device = torch.device(settings.device)
    too_big = host_memory_reason(cell)  # before anything is allocated: the row says what it would have needed
    if too_big is not None:
        return Outcome("oom", too_big)
    with stage("inputs"):
        inputs = context.cell_inputs(cell, settings, device)
    if cell.phase == "prefill" and cell.scope == "attention":
        with stage("accuracy"):  # the trivial answers' errors, also for a cell whose budget turns out unreachable
            q, k, v, kv_mask = inputs.q, inputs.k, inputs.v, inputs.kv_mask
            rows, seed = settings.error_rows, cell.seed
            record.trivial = baseline_errors(q, k, v, causal=cell.causal, error_rows=rows, seed=seed, kv_mask=kv_mask)
    if cell.matched_budget is not None:
        with stage("build"):  # refusals come before the search: a setting the variant cannot run is not searched
            _, record.backend, reasons = built(cell, inputs, device)  # the search builds its own candidates
            if reasons:
                raise NotSupportedError(cell.variant, reasons)
        # the cheapest config meeting the budget on held-out seeds (harness.measure.tuning), on the fit's clock
        with stage("tuning"), clock.fitting("the error-budget search"):
            tuned = tune(cell, settings, context, device, inputs.parsed)
            record.search = tuned.fields  # what the search tried, also when it failed
            if tuned.failure is not None:
                raise tuned.failure
        if tuned.cell is None:
            return Outcome("unreachable", tuned.reason)
        cell = tuned.cell  # the config found is measured as any other, once for every budget that finds it
        if measured_key(cell) in context.measured:
            return shared(context.measured[measured_key(cell)], record)
    with stage("build"):
        attn, record.backend, reasons = built(cell, inputs, device)
        if reasons:
            raise NotSupportedError(cell.variant, reasons)
    if attn.capabilities.learnable:
        with stage("calibration"), clock.fitting("the calibration"):
            attn, record.calibration = calibrated(attn, cell, inputs.parsed, settings, context, device)
    with stage("build"):
        attn = attn.to(dtype=DTYPES[cell.dtype]).train(cell.mode == "train")
    outcome = run_phase(kind_of(attn, cell, inputs, settings, context, device), settings, device, record)
    if cell.matched_budget is not None:
        context.remember(measured_key(cell), Measured(cell.cell_id, {s: getattr(record, s) for s in MEASURED}, outcome))
    return outcome


def kind_of(
    attn: Any, cell: Cell, inputs: CellInputs, settings: MeasureSettings, context: MeasureContext, device: torch.device
) -> Phase:
    """What the cell's kind supplies to the measurement path: a decode's, a layer's or a prefill's part."""
    qkv, kv_mask = (inputs.q, inputs.k, inputs.v), inputs.kv_mask
    if cell.phase == "decode":
        return DecodePhase(attn, cell, qkv, kv_mask, settings, device)
    if cell.scope == "layer":
        return LayerPhase(attn, cell, inputs.q, kv_mask, settings, device)
    return PrefillPhase(attn, cell, qkv, kv_mask, settings, context, device)


def built(cell: Cell, inputs: CellInputs, device: torch.device) -> tuple[Any, str, list[str]]:
    """The variant built from the cell's config on `device` (seeded: its initialisation is part of the cell), the
    backend it resolves (with the cell's call features: harness.measure.scores_quant) and every reason it cannot run the
    cell: a combination of memory tricks or a scores_dtype not measured (planning skips these; a cell made by hand is
    refused with the same words), its prefill refusals, or for a decode cell its decode refusals."""
    training, q, k, v, kv_mask = cell.mode == "train", inputs.q, inputs.k, inputs.v, inputs.kv_mask
    torch.manual_seed(cell.seed)
    attn = build_variant(cell.variant, **cell.config).to(device)
    backend = call_backend(attn, q, training=training, scores_dtype=cell.scores_dtype)
    tricks, N = tricks_reason(cell.fields()) or scores_reason(cell.fields(), attn.capabilities), cell.seq_len
    if tricks is not None:
        reasons = [tricks]
    elif cell.phase != "decode":
        features = scores_features(cell.scores_dtype)  # int8 scores: the variant's own refusals of them too
        reasons = attn.not_supported_reasons(
            q, k, v, causal=cell.causal, kv_mask=kv_mask, training=training, **features
        )
    elif cell.scope == "layer":
        reasons = ["decode is measured for the attention scope only (a layer cell times a prefill block)"]
    else:
        reasons = attn.decode_reasons(q[:, :, N : N + 1], k[:, :, :N], v[:, :, :N], kv_mask=kv_mask)
    return attn, backend, reasons + kv_refusals(attn.capabilities, cell.kv_dtype)


def run_phase(phase: Phase, settings: MeasureSettings, device: torch.device, record: Record) -> Outcome:
    """The measurement path of a built (and fitted) variant, from prepare to FLOPs, in order (see the module doc)."""
    with stage(phase.prepare_stage):
        record.prepared = phase.prepare()
    with stage("accuracy"):
        checked = phase.check()
        record.errors = checked.errors
    if checked.nonfinite:
        return Outcome("nonfinite", checked.nonfinite)
    with stage("memory"):
        record.memory = memory_and_kernel(phase.ready, device)
    with stage("timing"):
        timed = phase.timed_step()
        last = LastOutput(timed.step)  # the last timed call's output is scored too
        record.timing = timed_fields(
            last, timed.baseline, settings, device, first_call_s=checked.call_s, setup=timed.setup, per=timed.per
        )
    with stage("accuracy of a timed call"):
        errors, bad = phase.score_timed(last.value)
        del last
        if bad:
            return Outcome("nonfinite", f"a timed call's {bad}")
        mismatch = timed_mismatch(checked.errors.get("rel_l2_error"), errors.get("rel_l2_error"))
        if mismatch:
            record.errors = {**checked.errors, **errors}  # the row shows the timed call's errors, the reason both
            raise BadOutput(mismatch)
    with stage("flops"):
        record.flops = phase.flops(record.timing.latency_s)
    return Outcome("ok")


class LastOutput:
    """A step that keeps what its last call returned (the step's output, or (output, grads) in train mode), so a
    timed call's output can be scored after the timing: one reference kept per call, nothing computed."""

    def __init__(self, step: Callable[..., Any]):
        self.step, self.value = step, None

    def __call__(self, *args: Any) -> Any:
        self.value = self.step(*args)
        return self.value


# a timed call whose error exceeds the checked call's by more than this factor (and this much) is an error: not
# run-to-run noise of a deterministic kernel (identical outputs) nor of GPU atomics (relative 1e-6)
TIMED_FACTOR, TIMED_SLACK = 2.0, 1e-3


def timed_mismatch(checked: float | None, timed: float | None) -> str | None:
    """Why a timed call's rel L2 error disagrees with the checked call's, or None when it does not."""
    if checked is None or timed is None or timed <= TIMED_FACTOR * checked + TIMED_SLACK:
        return None
    return (
        f"a timed call's output has rel L2 error {timed:.3g} against the checked call's {checked:.3g}: the variant "
        "must return the same answer on every call"
    )


class StageFailed(Exception):
    """An exception raised inside a named stage of a cell (the stage goes into the reason)."""

    def __init__(self, stage: str, error: BaseException):
        super().__init__(stage)
        self.stage, self.error = stage, error


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Run a block as stage `name`: any failure but the user's Ctrl-C is re-raised as StageFailed(name, error)."""
    try:
        yield
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a row
        if by_user(exc):  # Ctrl-C stops the sweep; a SystemExit or KeyboardInterrupt raised by a variant is a row
            raise
        raise StageFailed(name, exc) from exc


_SIGINT = {"installed": False, "pressed": False}  # whether this process's Ctrl-C is being watched, and was pressed


@contextlib.contextmanager
def user_interrupts() -> Iterator[None]:
    """Watch for the user's Ctrl-C (SIGINT) while a cell runs, so a KeyboardInterrupt a variant raises itself can be
    told apart (by_user) and become an error row. Main thread only; elsewhere every KeyboardInterrupt counts as the
    user's."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield
        return

    def pressed(signum: int, frame: Any) -> None:
        _SIGINT["pressed"] = True
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, pressed)
    _SIGINT.update(installed=True, pressed=False)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _SIGINT["installed"] = False


def by_user(exc: BaseException) -> bool:
    """True for a KeyboardInterrupt that comes from the user's Ctrl-C (or cannot be told apart: no watch installed)."""
    return isinstance(exc, KeyboardInterrupt) and (_SIGINT["pressed"] or not _SIGINT["installed"])
