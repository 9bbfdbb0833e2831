"""A cell's timed fields: the variant paired with the baseline (harness.schema.BASELINE, backend auto) in alternating blocks.

The baseline's own cells (the baseline variant with its default config) get speedup None (a ratio to itself would be 1
by construction) and are paired with a fixed reference kernel instead (harness.measure.yardstick: reference_speedup). Every other cell times its step
and the baseline's step on the same q, k, v in alternation (harness.measure.pairing), so the paired
speed-up survives a load that drifts during the cell. Both steps are first warmed up to a stable rate
(pairing.warm_up), and the pairs are timed in ROUNDS consecutive rounds whose spread enters the interval
(harness.measure.rounds). A baseline that is unsupported or fails leaves
the speed-up fields None, the variant timed alone, and says why in noise_reason; it never fails the row.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any, Callable

import torch

from harness.measure.contention import contention_fields
from harness.measure.context import MeasureContext
from harness.measure.noise import RETIME_SPREAD
from harness.measure.outcome import CellTimeout, classify_exception, release_memory
from harness.measure.pairing import (
    BlockTimer,
    PairedTimes,
    bootstrap_interval,
    pair_plan,
    spread,
    time_pairs,
    warm_up,
)
from harness.measure.rounds import round_interval
from harness.measure.settings import MeasureSettings
from harness.measure.timer import Measurement, StepTimer
from harness.measure.yardstick import reference_step
from harness.schema import BASELINE, Cell, series_suffix
from variants import NotSupportedError

Step = Callable[[], Any]


class BaselineFailed(Exception):
    """The baseline's step raised: the variant's row goes on without a paired speed-up."""


@dataclasses.dataclass(frozen=True)
class Baseline:
    """The paired baseline of a cell: its step (None when there is none) and why not."""

    step: Step | None
    note: str | None = None  # why there is no pairing (None for the baseline's own cells: nothing to say)
    cache_key: tuple | None = None  # where MeasureContext keeps the baseline's warm per-call seconds on these inputs
    known_call_s: dict[tuple, float] = dataclasses.field(default_factory=dict)
    # the baseline's own cells: the fixed reference kernel they are paired with instead (harness.measure.yardstick)
    reference: Step | None = None


@dataclasses.dataclass(frozen=True)
class Timing:
    """The timing stage's row fields (None where not measured: a speed-up without a baseline, CPU time on CUDA)."""

    latency_s: float  # median seconds per call (per generated token for decode)
    latency_p20_s: float
    latency_p80_s: float
    repeats: int
    speedup: float | None = None  # geometric mean of the rounds' median baseline / variant (one round: the median)
    speedup_low: float | None = None  # its 95% interval (harness.measure.rounds; one round: bootstrap over pairs)
    speedup_high: float | None = None
    rounds: int | None = None  # rounds the pairs were timed in
    speedup_round_sd: float | None = None  # s.d. of log(round speed-up) between rounds (None: one round)
    processes: int | None = None  # 1 when paired: this process (the run's later ones: harness.runner.processes)
    # the baseline's own cells: reference kernel / cell seconds, paired in rounds like speedup, and its interval
    reference_speedup: float | None = None
    reference_speedup_low: float | None = None
    reference_speedup_high: float | None = None
    baseline_latency_s: float | None = None
    noise_reason: str | None = None  # why no paired speed-up, or that the blocks were re-timed
    cpu_latency_s: float | None = None  # the second clock (CPU time of the timing thread), on CPU
    cpu_speedup: float | None = None
    cpu_speedup_low: float | None = None
    cpu_speedup_high: float | None = None
    cpu_share: float | None = None
    contended: bool | None = None


def baseline_for(
    cell: Cell,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    context: MeasureContext,
    device: torch.device,
    make_step: Callable[..., Step],
    kv_mask: torch.Tensor | None = None,
) -> Baseline:
    """The cell's paired baseline: for the baseline's own cells the reference kernel, a note when it cannot run here.

    `make_step(module, q, k, v, causal, training, kv_mask)` builds the timed call, the same one the variant
    gets (the same inputs and padding mask).
    """
    training = cell.mode == "train"
    try:
        base = context.baseline(device, cell.dtype)
    except Exception as exc:  # noqa: BLE001 - a baseline that cannot be built leaves the speed-up None, not the row failed
        return Baseline(None, note=f"no paired speed-up: baseline {BASELINE} not built: {type(exc).__name__}: {exc}")
    key = cell.cache_key("baseline", device=str(device))  # where its warm per-call seconds are kept
    if (
        cell.variant == BASELINE and cell.config == dataclasses.asdict(base.config) and not series_suffix(cell.fields())
    ):  # paired with the reference kernel (dense with an int8 cache is another series); its time warms the cache
        return Baseline(None, cache_key=key, known_call_s=context.baseline_call_s, reference=reference_step(device))
    try:  # make_step checks the baseline's call once (a refusal raises NotSupportedError), as it does the variant's
        step = make_step(base, q, k, v, cell.causal, training, kv_mask)
    except NotSupportedError as exc:
        return Baseline(None, note=f"no paired speed-up: baseline {BASELINE} unsupported: " + "; ".join(exc.reasons))
    return Baseline(step, cache_key=key, known_call_s=context.baseline_call_s)


def guarded(step: Step) -> Step:
    """The baseline's step, its failures raised as BaselineFailed (a timeout or Ctrl-C pass through)."""

    def call() -> Any:
        try:
            return step()
        except (KeyboardInterrupt, SystemExit, CellTimeout):
            raise
        except BaseException as exc:  # noqa: BLE001 - the baseline's failure must not become the variant's
            raise BaselineFailed(exc) from exc

    return call


def timed_fields(
    step: Step,
    baseline: Baseline,
    settings: MeasureSettings,
    device: torch.device,
    *,
    first_call_s: float,
    timer: BlockTimer | None = None,
    setup: Callable[[], Any] | None = None,
    per: int = 1,
) -> Timing:
    """latency_s/p20/p80, repeats and (paired) speedup, speedup_low/high, baseline_latency_s, noise_reason of one cell;
    on CPU also the second clock's cpu_latency_s, cpu_speedup (low, high), cpu_share and contended
    (harness.measure.contention).

    Timed alone (no baseline step nor reference): each call `step(setup())` when `setup` is given
    (harness.measure.timer), the latencies per `per` units (a decode generation's tokens). Paired: `step()`, per call;
    the baseline's own cells are paired with the reference kernel (reference_speedup, low, high: against_reference).

    `timer` times the paired blocks (default: harness.measure.timer.StepTimer.block on this device; tests pass a fake
    clock, whose blocks carry no CPU time, which leaves the CPU-time fields out).
    """
    note = baseline.note
    clock = StepTimer(device)
    own = baseline.step is None and baseline.reference is not None  # the baseline's own cell: paired with the reference
    partner = Baseline(baseline.reference) if own else baseline
    fields = None
    if partner.step is not None:
        try:
            fields = _paired(step, partner, settings, timer or clock.block, first_call_s=first_call_s)
        except BaselineFailed as exc:
            status, reason = classify_exception(exc.__cause__ or exc, settings.cell_timeout_s)
            what = "reference kernel" if own else f"baseline {BASELINE}"
            note = f"no paired speed-up: {what} {status}: {reason}"
            if status == "oom":
                release_memory(settings.device)
    if fields is None:
        timed = clock.measure(
            step, budget_s=settings.time_budget_s, repeats=settings.repeats, first_call_s=first_call_s, setup=setup
        )
        fields = {**timed.latency_fields(per), "noise_reason": note, **contention_fields(timed.blocks, per=per)}
    elif own:
        fields = against_reference(fields)
    if baseline.step is None and baseline.note is None and baseline.cache_key:  # the baseline's own cell: its warm time
        baseline.known_call_s[baseline.cache_key] = fields["latency_s"]
    return Timing(**fields)


def against_reference(fields: dict[str, Any]) -> dict[str, Any]:
    """A baseline's own cell paired with the reference kernel: the speed-up and its interval are over the reference
    (reference_speedup...); the reference's latency and CPU-time speed-up are not the row's."""
    drop = ("baseline_latency_s", "cpu_speedup", "cpu_speedup_low", "cpu_speedup_high")
    out = {name: value for name, value in fields.items() if name not in drop}
    for name in ("speedup", "speedup_low", "speedup_high"):
        out["reference_" + name] = out.pop(name)
    return out


def _paired(
    step: Step, baseline: Baseline, settings: MeasureSettings, timer: BlockTimer, *, first_call_s: float
) -> dict[str, Any]:
    base_step = guarded(baseline.step)  # type: ignore[arg-type]
    base_call_s = baseline.known_call_s.get(baseline.cache_key) if baseline.cache_key else None
    if base_call_s is None:  # first pairing on these inputs: warm the baseline up and estimate its call
        base_step()
        base_call_s = timer(base_step, 1).per_call_s
        if baseline.cache_key:
            baseline.known_call_s[baseline.cache_key] = base_call_s
    budget = settings.time_budget_s
    if first_call_s < 4 * budget:  # the accuracy check's call was the first: re-estimate the now warm variant
        first_call_s = timer(step, 1).per_call_s
    slow = max(first_call_s, base_call_s) >= budget
    if not slow:  # a stable rate for each, from blocks of the size the pairs will use
        na, nb, _, _ = pair_plan(first_call_s, base_call_s, budget, settings.repeats, slow)
        first_call_s, base_call_s = warm_up(step, timer, na), warm_up(base_step, timer, nb)
    na, nb, pairs, rounds = pair_plan(first_call_s, base_call_s, budget, settings.repeats, slow)
    plan = {"pairs": pairs, "number_variant": na, "number_baseline": nb, "rounds": rounds}
    times = time_pairs(step, base_step, timer, **plan)
    retimed = False
    if (
        not slow and max(spread(times.variant_s), spread(times.ratios)) > RETIME_SPREAD
    ):  # the blocks disagree badly: once more
        times, retimed = time_pairs(step, base_step, timer, **plan), True
    return {
        **Measurement(tuple(times.variant)).latency_fields(),
        **paired_speedup(times),
        **cpu_fields(times),
        "noise_reason": "re-timed once: the first blocks disagreed" if retimed else None,
    }


def cpu_fields(times: PairedTimes) -> dict[str, Any]:
    """The second clock's fields of a paired cell: contention over both steps' kept blocks, and the paired speed-up
    on CPU time (cpu_speedup, its interval); {} when the blocks carry no CPU time (CUDA, a fake clock)."""
    fields = contention_fields(times.variant, times.baseline)
    if not fields:
        return fields
    nan = float("nan")  # a pair without CPU time: left out of its round, the rounds kept aligned
    ratios = [
        b.cpu_per_call_s / a.cpu_per_call_s if a.cpu_per_call_s > 0 else nan
        for a, b in zip(times.variant, times.baseline)
    ]
    if any(r > 0 for r in ratios):
        speedup, low, high, _ = speedup_interval(times, ratios)
        fields.update(cpu_speedup=speedup, cpu_speedup_low=low, cpu_speedup_high=high)
    return fields


def speedup_interval(times: PairedTimes, ratios: list[float]) -> tuple[float, float, float, float | None]:
    """(speed-up, low, high, between-round s.d. of its log) of per-pair ratios: over rounds where the pairs were timed
    in several (harness.measure.rounds), else the median and its bootstrap interval over pairs (s.d. None)."""
    if times.rounds > 1 and all(any(r > 0 for r in part) for part in times.by_round(ratios)):
        got = round_interval(times.by_round(ratios))
        return got.speedup, got.low, got.high, got.between_sd
    return (*bootstrap_interval([r for r in ratios if r > 0]), None)


def paired_speedup(times: PairedTimes) -> dict[str, Any]:
    """speedup, its interval (speedup_interval), rounds, speedup_round_sd and the baseline's median per-call seconds."""
    speedup, low, high, between_sd = speedup_interval(times, times.ratios)
    return {
        "speedup": speedup,
        "speedup_low": low,
        "speedup_high": high,
        "rounds": times.rounds,
        "speedup_round_sd": between_sd,
        "processes": 1,
        "baseline_latency_s": statistics.median(times.baseline_s),
    }
