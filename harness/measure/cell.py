"""One cell -> one row: the order of the stages. The measure package is the only code that touches the device.

The order inside a cell: inputs -> for a cell matched to an error budget, build and refuse (unsupported, with
reasons), then the search for its config (harness.measure.tuning; none found: "unreachable") -> build the config
measured -> refuse -> calibrate (learnable variants, on other seeds) -> the one measurement path (harness.measure.phase:
prepare, the checked call, memory, timing, the timed call scored, FLOPs), whose cell-kind parts are a prefill's
(harness.measure.prefill), a decode's (harness.measure.decode) or a layer's (harness.measure.layer). After every cell
the shared inputs' checksum is compared with the one taken when they were made (harness.measure.context): a variant that
wrote into q, k or v gets an error row naming them, and the next cell gets fresh inputs. A padded cell passes its
kv_mask to every call.

Each stage returns its row fields and a StageRecorder (harness.measure.outcome) keeps them as it finishes, so a
cell that fails still reports what its earlier stages measured (backend, errors, memory). An error-budget cell's
search returns the cell it found, and that cell's stages run as any other's.

A failure never escapes (only the user's Ctrl-C does; a SystemExit or KeyboardInterrupt a variant raises is an error
row): out of memory -> "oom", NotSupportedError -> "unsupported", NaN/inf -> "nonfinite", the per-cell limit ->
"timeout", a search or calibration past its own limit (fit_timeout_s, not counted in the cell's) -> "fit_timeout",
anything else -> "error" with the stage and message.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from harness.inputs import get_inputs, parse_inputs
from harness.inputs.padding import padding_mask
from harness.measure.calibration import calibrated
from harness.measure.context import MeasureContext, changed_reason
from harness.measure.decode import DecodePhase, decode_inputs_extra
from harness.measure.layer import LayerPhase
from harness.measure.noise import larger, load_per_cpu
from harness.measure.outcome import (
    Deadline,
    StageFailed,
    StageRecorder,
    base_row,
    by_user,
    classify_exception,
    deadline,
    now,
    release_memory,
    stage,
    user_interrupts,
)
from harness.measure.phase import Phase, run_phase
from harness.measure.prefill import PrefillPhase
from harness.measure.reference import baseline_errors
from harness.measure.roofline import judged
from harness.measure.settings import DTYPES, MeasureSettings, RunInfo
from harness.measure.timer import Stopwatch
from harness.measure.tuning import tune
from harness.row import Row
from harness.schema import Cell, tricks_reason
from variants import build_variant


def measure_cell(cell: Cell, settings: MeasureSettings, run: RunInfo, context: MeasureContext | None = None) -> Row:
    """Measure one cell and return its row; never raises for a failure of the variant (see module doc)."""
    context = context or MeasureContext()
    row = base_row(cell, run).update(started_at=now())
    watch, load_at_start = Stopwatch.started(), load_per_cpu()
    recorder = StageRecorder()
    try:
        with user_interrupts(), deadline(settings.cell_timeout_s, settings.fit_timeout_s) as clock:
            row.update(**_stages(cell, settings, context, recorder, clock))
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a row (a timeout may land between stages)
        if by_user(exc):  # the user's Ctrl-C stops the sweep; a KeyboardInterrupt a variant raises is a row
            raise
        failed_in, error = (exc.stage, exc.error) if isinstance(exc, StageFailed) else ("start", exc)
        # what the stages that finished measured stays in the row (backend, errors, memory)
        row.update(**recorder.fields)
        status, reason = classify_exception(error, settings.cell_timeout_s)
        row.update(
            status=status,
            reason=reason if status in ("oom", "timeout", "unsupported") else f"during {failed_in}: {reason}",
        )
        if status == "oom":
            context.clear()
        del exc, error
    written = context.check_inputs()  # one read of q, k, v: harness.measure.context
    if written:
        ended = f" (the cell had ended {row.status}: {row.reason})" if row.status != "ok" else ""
        row.update(status="error", reason=changed_reason(written) + ended)
    load = larger(load_at_start, load_per_cpu())
    row.update(wall_s=watch.seconds, load_per_cpu=load)
    row.update(**judged(cell, row.to_dict(), run.limits, load))  # the machine's limits, the timing's noise
    if row.status != "ok":
        release_memory(settings.device)
    return row


class _Inputs(NamedTuple):
    """A cell's evaluation inputs, made once and read by every later stage."""

    parsed: tuple[str, dict[str, Any]]  # the input distribution (name, knobs): calibration inputs are drawn from it too
    q: Tensor  # (B, H, N + extra, D); extra: a decode cell's generated tokens
    k: Tensor  # (B, H_kv, M + extra, D)
    v: Tensor
    kv_mask: Tensor | None  # (B, M), None without padding


class _Built(NamedTuple):
    """The build stage's result: the variant, why it cannot run the cell, and its row fields (the backend it resolves)."""

    attn: Any
    reasons: list[str]
    fields: dict[str, Any]


def _stages(
    cell: Cell, settings: MeasureSettings, context: MeasureContext, recorder: StageRecorder, clock: Deadline
) -> dict[str, Any]:
    """The cell's measured fields: inputs, then for an error-budget cell the search for its config, then that config's stages.

    Each stage returns its fields and `recorder` keeps them as it finishes (what a later failure leaves in the row).
    """
    device = torch.device(settings.device)
    with stage("inputs"):
        parsed = parse_inputs(cell.inputs)  # once per cell: evaluation and calibration inputs share it
        extra = decode_inputs_extra(cell, settings)  # a decode cell's inputs hold its generated tokens too
        reason = get_inputs(parsed[0]).unsupported_reason(
            cell.seq_len + extra, cell.kv_len + extra, B=cell.batch, H=cell.heads, D=cell.head_dim
        )
        if reason:
            return recorder.outcome("unsupported", reason)
        q, k, v = context.get_inputs(cell, device, parsed, extra=extra)
        inputs = _Inputs(
            parsed, q, k, v, padding_mask(cell.batch, cell.kv_len, cell.padding, seed=cell.seed, device=device)
        )
    if cell.phase == "prefill" and cell.scope == "attention":
        with stage("accuracy"):  # the trivial answers' errors, also for a cell whose budget turns out unreachable
            recorder.record(
                baseline_errors(
                    q, k, v, causal=cell.causal, error_rows=settings.error_rows, seed=cell.seed, kv_mask=inputs.kv_mask
                )
            )
    if cell.matched_budget is None:
        return _measure_config(cell, inputs, settings, context, device, recorder, clock)
    with stage("build"):  # refusals come before the search: a setting the variant cannot run is not searched
        built = _build(cell, inputs, device)
        recorder.record(built.fields)
    if built.reasons:
        return recorder.outcome("unsupported", "; ".join(built.reasons))
    del built  # the search builds its own candidates
    # the cheapest config meeting the budget on held-out seeds (harness.measure.tuning), on the fit's clock
    with stage("tuning"), clock.fitting("the error-budget search"):
        tuned = tune(cell, settings, context, device, inputs.parsed)
        recorder.record(tuned.fields)  # what the search tried, also when it failed
        if tuned.failure is not None:
            raise tuned.failure
    if tuned.cell is None:
        return recorder.outcome("unreachable", tuned.reason)
    return _measure_config(tuned.cell, inputs, settings, context, device, recorder, clock)


def _measure_config(
    cell: Cell,
    inputs: _Inputs,
    settings: MeasureSettings,
    context: MeasureContext,
    device: torch.device,
    recorder: StageRecorder,
    clock: Deadline,
) -> dict[str, Any]:
    """The stages of the config measured (an error-budget cell's: the one its search found): build, refuse, calibrate,
    then the measurement path with the cell kind's part of it (harness.measure.phase)."""
    training = cell.mode == "train"
    with stage("build"):
        built = _build(cell, inputs, device)
        recorder.record(built.fields)
    if built.reasons:
        return recorder.outcome("unsupported", "; ".join(built.reasons))
    attn = built.attn
    if attn.capabilities.learnable:
        with stage("calibration"), clock.fitting("the calibration"):
            attn, calibration = calibrated(attn, cell, inputs.parsed, settings, context, device)
            recorder.record(calibration)
    with stage("build"):
        attn = attn.to(dtype=DTYPES[cell.dtype])
        attn.train(training)
    return run_phase(_phase(attn, cell, inputs, settings, context, device), settings, device, recorder)


def _phase(
    attn: Any, cell: Cell, inputs: _Inputs, settings: MeasureSettings, context: MeasureContext, device: torch.device
) -> Phase:
    """What the cell's kind supplies to the one measurement path (harness.measure.phase)."""
    qkv, kv_mask = (inputs.q, inputs.k, inputs.v), inputs.kv_mask
    if cell.phase == "decode":
        return DecodePhase(attn, cell, qkv, kv_mask, settings, device)
    if cell.scope == "layer":
        return LayerPhase(attn, cell, inputs.q, kv_mask, settings, device)
    return PrefillPhase(attn, cell, qkv, kv_mask, settings, context, device)


def _build(cell: Cell, inputs: _Inputs, device: torch.device) -> _Built:
    """The variant built from the cell's config, why it cannot run the cell, and the backend it resolves (its field)."""
    training = cell.mode == "train"
    torch.manual_seed(cell.seed)  # parameter initialisation is part of the cell
    attn = build_variant(cell.variant, **cell.config).to(device)
    backend = attn.resolve_backend(inputs.q, training=training)
    return _Built(
        attn, _reasons(attn, inputs.q, inputs.k, inputs.v, inputs.kv_mask, cell, training), {"backend": backend}
    )


def _reasons(
    attn: Any, q: Tensor, k: Tensor, v: Tensor, kv_mask: Tensor | None, cell: Cell, training: bool
) -> list[str]:
    """Why the variant cannot run this cell: a combination of memory tricks not measured, its prefill refusals, or for a
    decode cell its decode refusals."""
    tricks = tricks_reason(cell.fields())
    if tricks is not None:  # planning skips these; a cell made by hand is refused with the same words
        return [tricks]
    if cell.phase != "decode":
        return attn.not_supported_reasons(q, k, v, causal=cell.causal, kv_mask=kv_mask, training=training)
    if cell.scope == "layer":
        return ["decode is measured for the attention scope only (a layer cell times a prefill block)"]
    N = cell.seq_len
    return attn.decode_reasons(q[:, :, N : N + 1], k[:, :, :N], v[:, :, :N], kv_mask=kv_mask)
