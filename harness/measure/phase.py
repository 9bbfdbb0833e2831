"""The one measurement path: what every cell kind runs once its variant is built, refused or fitted.

prepare (set-up, untimed) -> the checked call (accuracy against float64; also the warm-up and the timer's first
estimate) -> peak memory of one call and the kernels it ran -> timing (harness.measure.speedup: paired with the
baseline in alternating blocks, or alone) -> the last timed call's output scored against the checked call's reference
(a variant right only on its checked call is an error row) -> FLOPs and TFLOP/s (harness.measure.flops).
A phase (prefill: harness.measure.prefill; decode: harness.measure.decode; a layer: harness.measure.layer) supplies
only what differs: its set-up, its checked call, the step to time and its baseline, how a timed output is scored, and
its FLOPs. Each stage's fields go to the cell's StageRecorder as it finishes, so a later failure leaves them in the row.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from harness.measure.accuracy import BadOutput
from harness.measure.memory import memory_and_kernel
from harness.measure.outcome import StageRecorder, stage
from harness.measure.settings import MeasureSettings
from harness.measure.speedup import Baseline, timed_fields


@dataclass(frozen=True)
class Checked:
    """The checked call: its accuracy fields, its seconds (the timer's first estimate) and what is non-finite in it."""

    fields: dict[str, Any]
    call_s: float
    nonfinite: str | None = None


@dataclass(frozen=True)
class TimedStep:
    """What the timing stage times: `step()`, or `step(setup())` with the argument built untimed before each call (a
    decode generation from a fresh state); latencies per `per` units (its generated tokens); paired with `baseline`."""

    step: Callable[..., Any]
    setup: Callable[[], Any] | None = None
    per: int = 1
    baseline: Baseline = field(default_factory=lambda: Baseline(None))  # no step: timed alone


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


class Phase(ABC):
    """What one kind of cell supplies to the measurement path (see module doc)."""

    prepare_stage = "prepare"  # the set-up stage's name in a failed row's reason

    @abstractmethod
    def prepare(self) -> dict[str, Any]:
        """Set-up before the checked call (setup_s; a decode cell's state_bytes), untimed."""

    @abstractmethod
    def check(self) -> Checked:
        """The checked call: accuracy against the float64 reference on sampled rows (gradients in train mode)."""

    @abstractmethod
    def ready(self) -> Callable[[], Any]:
        """The step ready to call once, its set-up done before the memory is counted (harness.measure.memory)."""

    @abstractmethod
    def timed_step(self) -> TimedStep:
        """The step the timing stage times and its baseline."""

    @abstractmethod
    def flops(self, latency_s: float) -> dict[str, Any]:
        """flops, useful_flops and tflops of one timed call (per unit, as the latency is)."""

    def score_timed(self, output: Any) -> tuple[dict[str, Any], str | None]:
        """A timed call's output scored against the checked call's reference: (its error fields, what is non-finite
        in it); ({}, None) where the phase keeps no reference to score against."""
        return {}, None


def run_phase(phase: Phase, settings: MeasureSettings, device: torch.device, recorder: StageRecorder) -> dict[str, Any]:
    """The cell's measured fields through every stage of the path, in order (see module doc)."""
    with stage(phase.prepare_stage):
        recorder.record(phase.prepare())
    with stage("accuracy"):
        checked = phase.check()
        recorder.record(checked.fields)
    if checked.nonfinite:
        return recorder.outcome("nonfinite", checked.nonfinite)
    with stage("memory"):
        recorder.record(memory_and_kernel(phase.ready, device))
    with stage("timing"):
        timed = phase.timed_step()
        last = LastOutput(timed.step)  # the last timed call's output is scored too
        fields = timed_fields(
            last, timed.baseline, settings, device, first_call_s=checked.call_s, setup=timed.setup, per=timed.per
        )
        recorder.record(fields)
    with stage("accuracy of a timed call"):
        errors, bad = phase.score_timed(last.value)
        del last
        if bad:
            return recorder.outcome("nonfinite", f"a timed call's {bad}")
        mismatch = timed_mismatch(checked.fields.get("rel_l2_error"), errors.get("rel_l2_error"))
        if mismatch:
            recorder.record(errors)  # the row shows the timed call's errors, the reason both
            raise BadOutput(mismatch)
    with stage("flops"):
        return recorder.outcome("ok", **phase.flops(fields["latency_s"]))
