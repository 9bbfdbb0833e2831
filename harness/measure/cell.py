"""One cell -> one row: the order of the stages. The measure package is the only code that touches the device.

The order inside a cell: inputs -> for a cell matched to an error budget, build and refuse (unsupported, with
reasons), then the search for its config (harness.measure.tuning; none found: "unreachable") -> build the config
measured -> refuse -> calibrate (learnable variants, on other seeds) -> prepare (set-up hook) -> one checked call
(accuracy against the float64 reference on sampled rows, gradients in train mode; this is also the warm-up) ->
peak memory of one call (and the SDPA kernel it ran) -> timing (paired with the baseline in alternating blocks,
harness.measure.speedup) -> the last timed call's output scored against the checked call's reference (a variant right
only once is an error row) -> FLOPs and TFLOP/s (harness.measure.flops). After every cell the shared inputs' checksum
is compared with the one taken when they were made (harness.measure.guard): a variant that wrote into q, k or v gets an
error row naming them, and the next cell gets fresh inputs. Nothing but the calls themselves is timed:
the timed step is built on AttentionVariant.prepare_call, so the variant's checks and its backend resolution run
before timing (at the build, the checked call and that preparation), never inside a timed call. A decode cell (harness.measure.decode) and a layer cell (harness.measure.layer) leave after calibration for their
own stages; a padded cell passes its kv_mask to every call.

Each stage returns its row fields and a StageRecorder (harness.measure.stages) keeps them as it finishes, so a
cell that fails still reports what its earlier stages measured (backend, errors, memory). An error-budget cell's
search returns the cell it found, and that cell's stages run as any other's.

A failure never escapes (only the user's Ctrl-C does; a SystemExit or KeyboardInterrupt a variant raises is an error
row): out of memory -> "oom", NotSupportedError -> "unsupported", NaN/inf -> "nonfinite", the per-cell limit ->
"timeout", a search or calibration past its own limit (fit_timeout_s, not counted in the cell's) -> "fit_timeout",
anything else ->
"error" with the stage and message.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, NamedTuple

import torch
from torch import Tensor

from harness.inputs import get_inputs, parse_inputs
from harness.inputs.padding import padding_mask
from harness.measure.accuracy import BadOutput, baseline_errors, check_accuracy, check_output, nonfinite, score_output
from harness.measure.calibration import calibrated
from harness.measure.context import MeasureContext
from harness.measure.decode import decode_inputs_extra, measure_decode
from harness.measure.flops import attention_flops, flops_fields
from harness.measure.guard import LastOutput, changed_reason, timed_mismatch
from harness.measure.kernel import memory_and_kernel
from harness.measure.layer import measure_layer
from harness.measure.noise import larger, load_per_cpu, noise_fields
from harness.measure.outcome import (
    Deadline,
    base_row,
    by_user,
    classify_exception,
    deadline,
    now,
    release_memory,
    user_interrupts,
)
from harness.measure.roofline import compute_dtype, roofline_fields
from harness.measure.settings import DTYPES, MeasureSettings, RunInfo
from harness.measure.speedup import baseline_for, timed_fields
from harness.measure.stages import StageFailed, StageRecorder, stage
from harness.measure.timer import Stopwatch
from harness.measure.tricks import tricked
from harness.measure.tuning import tune
from harness.plan import tricks_reason
from harness.row import Row
from harness.schema import Cell


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
    written = context.check_inputs()  # one read of q, k, v: harness.measure.guard
    if written:
        ended = f" (the cell had ended {row.status}: {row.reason})" if row.status != "ok" else ""
        row.update(status="error", reason=changed_reason(written) + ended)
    if row.status == "ok":  # held against the machine's measured limits
        row.update(**roofline_fields(cell, row.to_dict(), run.limits, precision_dtype=compute_dtype(cell)))
    row.wall_s = watch.seconds
    row.load_per_cpu = larger(load_at_start, load_per_cpu())
    row.update(**noise_fields(row.to_dict(), row.load_per_cpu))
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
    then a decode cell's, a layer cell's or a prefill cell's own stages."""
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
    q, k, v, kv_mask = inputs.q, inputs.k, inputs.v, inputs.kv_mask
    if cell.phase == "decode":
        return measure_decode(attn, q, k, v, kv_mask, cell, settings, device, recorder)
    if cell.scope == "layer":
        return measure_layer(attn, q, kv_mask, cell, settings, device, recorder)
    return _measure_prefill(attn, cell, inputs, settings, context, device, recorder)


def _measure_prefill(
    attn: Any,
    cell: Cell,
    inputs: _Inputs,
    settings: MeasureSettings,
    context: MeasureContext,
    device: torch.device,
    recorder: StageRecorder,
) -> dict[str, Any]:
    """A prefill cell's stages after the build: prepare, the checked call (accuracy), memory, timing, then the FLOPs."""
    training, wrap = cell.mode == "train", tricked(cell, device)  # wrap: the call under the cell's memory tricks
    q, k, v, kv_mask = inputs.q, inputs.k, inputs.v, inputs.kv_mask
    with stage("prepare"):
        recorder.record({"setup_s": _prepare(attn, q, k, v, cell, training, kv_mask)})
    with stage("accuracy"):
        accuracy = check_accuracy(
            attn,
            q,
            k,
            v,
            causal=cell.causal,
            training=training,
            error_rows=settings.error_rows,
            seed=cell.seed,
            reference=settings.accuracy_reference,
            kv_mask=kv_mask,
            wrap=wrap,
        )
        recorder.record(accuracy.fields)
    if accuracy.nonfinite:
        return recorder.outcome("nonfinite", accuracy.nonfinite)
    with stage("memory"):
        step = _step(attn, q, k, v, cell.causal, training, kv_mask, wrap=wrap)
        recorder.record(memory_and_kernel(lambda: step, device))
    # paired with the baseline (schema.BASELINE, backend auto) unless this is it: harness.measure.speedup
    with stage("timing"):
        baseline = baseline_for(cell, q, k, v, context, device, partial(_step, wrap=wrap), kv_mask)  # same tricks
        last = LastOutput(step)  # the last timed call's output is scored too (harness.measure.guard)
        timed = timed_fields(last, baseline, settings, device, first_call_s=accuracy.call_s)
        recorder.record(timed)
        executed, useful = attention_flops(attn, cell, backend=attn.resolve_backend(q, training=training))
    with stage("accuracy of a timed call"):
        output = last.value[0] if training else last.value
        del last
        check_output(output, q, inputs.v)
        bad = nonfinite(output)
        if bad:
            return recorder.outcome("nonfinite", f"a timed call's {bad}")
        errors = score_output(accuracy, output)
        mismatch = timed_mismatch(accuracy.fields.get("rel_l2_error"), errors["rel_l2_error"])
        if mismatch:
            recorder.record(errors)  # the row shows the timed call's errors, the reason both
            raise BadOutput(mismatch)
    fields = flops_fields(executed, timed["latency_s"], training=training, useful_attention_flops=useful)
    return recorder.outcome("ok", **fields)


def _build(cell: Cell, inputs: _Inputs, device: torch.device) -> _Built:
    """The variant built from the cell's config, why it cannot run the cell, and the backend it resolves (its field)."""
    from variants import build_variant

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


def _step(
    attn: Any,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool,
    training: bool,
    kv_mask: Tensor | None = None,
    *,
    wrap: Callable[[Callable], Callable] | None = None,
) -> Callable[[], Any]:
    """The timed call: forward under no_grad (returns the output), or forward + backward w.r.t. q, k, v and parameters
    (returns the output and the gradients); `wrap` puts the
    call under the cell's memory tricks (harness.measure.tricks.tricked).

    The variant's checks and its backend resolution run here, once (AttentionVariant.prepare_call; a refusal raises
    NotSupportedError), never inside the timed call.
    """
    call = attn.prepare_call(q, k, v, causal=causal, kv_mask=kv_mask, training=training)
    call = wrap(call) if wrap is not None else call
    if not training:

        def forward() -> Tensor:
            with torch.no_grad():
                return call(q, k, v)

        return forward
    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
    targets = [qg, kg, vg] + [p for p in attn.parameters() if p.requires_grad]
    grad_out = torch.randn(q.shape, generator=torch.Generator(device=q.device).manual_seed(1), device=q.device).to(
        q.dtype
    )

    def train() -> tuple:
        out = call(qg, kg, vg)
        return out, torch.autograd.grad(out, targets, grad_outputs=grad_out, allow_unused=True)

    return train


def _prepare(
    attn: torch.nn.Module, q: Tensor, k: Tensor, v: Tensor, cell: Cell, training: bool, kv_mask: Tensor | None = None
) -> float | None:
    """Call the variant's set-up hook, if any; its seconds (returned, else measured) become setup_s."""
    prepare = getattr(attn, "prepare", None)
    if not callable(prepare):
        return None
    with Stopwatch(q.device) as watch:
        spent = prepare(q, k, v, causal=cell.causal, kv_mask=kv_mask, training=training)
    return float(spent) if spent is not None else watch.seconds
