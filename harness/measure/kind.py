"""What a cell kind supplies to the measurement path (harness.measure.phase), and the typed results of its parts.

A kind (a prefill at the attention scope: harness.measure.prefill; a decode: harness.measure.decode; a layer:
harness.measure.layer) supplies only what differs between them: its set-up, its checked call, the step to time and its
baseline, how a timed output is scored, and its FLOPs. Each part returns a typed result whose fields are the row's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

from harness.measure.flops import Flops
from harness.measure.speedup import Baseline


@dataclass(frozen=True)
class Prepared:
    """The set-up before the checked call, untimed: its seconds, a decode cell's state, the K/V store and a layer
    cell's weights (row fields)."""

    setup_s: float | None = None  # compilation, block masks, a decode cell's state for its context
    state_bytes: int | None = None  # a decode cell's state right after the context: the capacity it holds
    state_live_bytes: int | None = None  # of which live: what a step reads
    decode_step: str | None = None  # the step init_state prepared where the config chooses (variants' decode_backend)
    kv_bytes: int | None = None  # a prefill attention cell's K and V as stored (harness.measure.kv_quant)
    k_quant_rel_l2: float | None = None  # quantization's own error on K (None: kv_dtype none)
    v_quant_rel_l2: float | None = None  # and on V
    scores_kernel: str | None = None  # the integer matmul of a prefill attention cell's int8 scores (Cell.scores_dtype)
    scores_quant_rel_l2: float | None = None  # the int8 scores' own error (harness.measure.scores_quant; None: none)
    weight_bytes: int | None = None  # a layer cell's blocks' weights as held (harness.measure.layer_quant)


@dataclass(frozen=True)
class Checked:
    """The checked call: its accuracy fields (row fields: they vary with the kind and the mode), its seconds (the
    timer's first estimate) and what is non-finite in it."""

    errors: dict[str, Any]
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


class Phase(ABC):
    """What one kind of cell supplies to the measurement path (see module doc)."""

    prepare_stage = "prepare"  # the set-up stage's name in a failed row's reason

    @abstractmethod
    def prepare(self) -> Prepared:
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
    def flops(self, latency_s: float) -> Flops:
        """flops, useful_flops and tflops of one timed call (per unit, as the latency is)."""

    def score_timed(self, output: Any) -> tuple[dict[str, Any], str | None]:
        """A timed call's output scored against the checked call's reference: (its error fields, what is non-finite
        in it); ({}, None) where the phase keeps no reference to score against."""
        return {}, None
