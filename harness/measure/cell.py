"""One cell -> one row: the order of the stages. The measure package is the only code that touches the device.

The order inside a cell: inputs -> build -> refuse (unsupported, with reasons) -> for a cell matched to an
error budget, the search for its config (harness.measure.tuning; none found: "unreachable") and a rebuild -> calibrate
(learnable variants, on other seeds) -> prepare (set-up hook) -> one checked call (accuracy
against the float64 reference on sampled rows, gradients in train mode; this is also the
warm-up) -> peak memory of one call (and the SDPA kernel it ran) -> timing (paired with the dense baseline in
alternating blocks, harness.measure.speedup). Nothing but the calls themselves is timed. A decode cell
(harness.measure.decode) and a layer cell (harness.measure.layer) leave after calibration for their own
stages; a padded cell passes its kv_mask to every call.

A failure never escapes (only Ctrl-C does; a SystemExit from a variant is an error row): out of memory -> "oom", NotSupportedError -> "unsupported", NaN/inf ->
"nonfinite", the per-cell limit -> "timeout", anything else -> "error" with the stage and message.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import torch
from torch import Tensor

from harness.inputs import get_inputs, parse_inputs
from harness.inputs.padding import padding_mask
from harness.measure.accuracy import check_accuracy
from harness.measure.calibration import calibrated
from harness.measure.context import MeasureContext
from harness.measure.decode import decode_inputs_extra, measure_decode
from harness.measure.flops import flops_fields
from harness.measure.kernel import memory_and_kernel
from harness.measure.layer import measure_layer
from harness.measure.noise import larger, load_per_cpu, noise_fields
from harness.measure.outcome import base_row, classify_exception, deadline, now, release_memory
from harness.measure.settings import DTYPES, MeasureSettings, RunInfo
from harness.measure.speedup import baseline_for, timed_fields
from harness.measure.stages import StageFailed as _StageFailed, stage as _stage
from harness.measure.tuning import tune
from harness.schema import Cell, Row


def measure_cell(cell: Cell, settings: MeasureSettings, run: RunInfo, context: MeasureContext | None = None) -> Row:
    """Measure one cell and return its row; never raises for a failure of the variant (see module doc)."""
    context = context or MeasureContext()
    row = base_row(cell, run).update(started_at=now())
    start, load_at_start = time.perf_counter(), load_per_cpu()
    try:
        with deadline(settings.cell_timeout_s):
            row.update(**_measure(cell, settings, context))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a row (a timeout may land between stages)
        stage, error = (exc.stage, exc.error) if isinstance(exc, _StageFailed) else ("start", exc)
        if isinstance(exc, _StageFailed):
            row.update(**exc.measured)  # what the earlier stages measured stays in the row (backend, errors, memory)
        status, reason = classify_exception(error, settings.cell_timeout_s)
        row.update(status=status, reason=reason if status in ("oom", "timeout", "unsupported") else f"during {stage}: {reason}")
        if status == "oom":
            context.clear()
        del exc, error
    row.wall_s = time.perf_counter() - start
    row.load_per_cpu = larger(load_at_start, load_per_cpu())
    row.update(**noise_fields(row.to_dict(), row.load_per_cpu))
    if row.status != "ok":
        release_memory(settings.device)
    return row


def _measure(cell: Cell, settings: MeasureSettings, context: MeasureContext) -> dict[str, Any]:
    """The measured fields of a cell, stage by stage (see module doc); a stage's failure names it and keeps the rest."""
    fields: dict[str, Any] = {}
    try:
        return _stages(cell, settings, context, fields)
    except _StageFailed as exc:
        exc.measured = dict(fields)
        raise


def _stages(cell: Cell, settings: MeasureSettings, context: MeasureContext, fields: dict[str, Any]) -> dict[str, Any]:
    """The stages in order; each adds its fields to `fields` as it finishes (what a later failure keeps)."""
    device = torch.device(settings.device)
    training = cell.mode == "train"
    N, M = cell.seq_len, cell.kv_len
    with _stage("inputs"):
        name, knobs = parse_inputs(cell.inputs)  # once per cell: evaluation and calibration inputs share it
        extra = decode_inputs_extra(cell, settings)  # a decode cell's inputs hold its generated tokens too
        reason = get_inputs(name).unsupported_reason(N + extra, M + extra, B=cell.batch, H=cell.heads, D=cell.head_dim)
        if reason:
            return {"status": "unsupported", "reason": reason}
        q, k, v = context.get_inputs(cell, device, (name, knobs), extra=extra)
        kv_mask = padding_mask(cell.batch, M, cell.padding, seed=cell.seed, device=device)  # None without padding
    with _stage("build"):
        attn, reasons = _build(cell, q, k, v, kv_mask, training, device, fields)
        if reasons:
            return {**fields, "status": "unsupported", "reason": "; ".join(reasons)}
    if cell.matched_budget is not None:
        with _stage("tuning"):  # the cheapest config meeting the budget on held-out seeds: harness.measure.tuning
            tuned = tune(cell, settings, context, device, (name, knobs), fields)
            if tuned.cell is None:
                return {**fields, "status": "unreachable", "reason": tuned.reason}
            cell = tuned.cell
        with _stage("build"):
            attn, reasons = _build(cell, q, k, v, kv_mask, training, device, fields)
            if reasons:
                return {**fields, "status": "unsupported", "reason": "; ".join(reasons)}
    if attn.capabilities.learnable:
        with _stage("calibration"):
            attn, calibration = calibrated(attn, cell, (name, knobs), settings, context, device)
            fields.update(calibration)
    with _stage("build"):
        attn = attn.to(dtype=DTYPES[cell.dtype])
        attn.train(training)
    if cell.phase == "decode":
        return {**fields, **measure_decode(attn, q, k, v, kv_mask, cell, settings, device)}
    if cell.scope == "layer":
        return {**fields, **measure_layer(attn, q, kv_mask, cell, settings, device)}
    with _stage("prepare"):
        fields["setup_s"] = _prepare(attn, q, k, v, cell, training, kv_mask)
    with _stage("accuracy"):
        accuracy = check_accuracy(attn, q, k, v, causal=cell.causal, training=training, error_rows=settings.error_rows,
                                  seed=cell.seed, reference=settings.accuracy_reference, kv_mask=kv_mask)
        fields.update(accuracy.fields)
        if accuracy.nonfinite:
            return {**fields, "status": "nonfinite", "reason": accuracy.nonfinite}
    with _stage("memory"):
        step = _step(attn, q, k, v, cell.causal, training, kv_mask)
        fields.update(memory_and_kernel(lambda: step, device))
    with _stage("timing"):  # paired with the baseline (dense, backend auto) unless this is it: harness.measure.speedup
        baseline = baseline_for(cell, q, k, v, context, device, _step, kv_mask)
        fields.update(timed_fields(step, baseline, settings, device, first_call_s=accuracy.call_s))
    attention_flops = attn.flops(cell.batch, cell.heads, N, M, cell.head_dim, cell.causal)
    return {**fields, "status": "ok", **flops_fields(attention_flops, fields["latency_s"], training=training)}


def _build(cell: Cell, q: Tensor, k: Tensor, v: Tensor, kv_mask: Tensor | None, training: bool, device: torch.device,
           fields: dict[str, Any]) -> tuple[Any, list[str]]:
    """(the variant built from the cell's config, why it cannot run the cell); the backend it resolves goes into `fields`."""
    from variants import build_variant

    torch.manual_seed(cell.seed)  # parameter initialisation is part of the cell
    attn = build_variant(cell.variant, **cell.config).to(device)
    fields["backend"] = attn.resolve_backend(q, training=training)
    return attn, _reasons(attn, q, k, v, kv_mask, cell, training)


def _reasons(attn: Any, q: Tensor, k: Tensor, v: Tensor, kv_mask: Tensor | None, cell: Cell, training: bool) -> list[str]:
    """Why the variant cannot run this cell: its prefill refusals, or for a decode cell its decode refusals."""
    if cell.phase != "decode":
        return attn.not_supported_reasons(q, k, v, causal=cell.causal, kv_mask=kv_mask, training=training)
    if cell.scope == "layer":
        return ["decode is measured for the attention scope only (a layer cell times a prefill block)"]
    N = cell.seq_len
    return attn.decode_reasons(q[:, :, N : N + 1], k[:, :, :N], v[:, :, :N], kv_mask=kv_mask)


def _step(attn: torch.nn.Module, q: Tensor, k: Tensor, v: Tensor, causal: bool, training: bool,
          kv_mask: Tensor | None = None) -> Callable[[], Any]:
    """The timed call: forward under no_grad, or forward + backward w.r.t. q, k, v and parameters."""
    if not training:
        def forward() -> Tensor:
            with torch.no_grad():
                return attn(q, k, v, causal=causal, kv_mask=kv_mask)

        return forward
    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
    targets = [qg, kg, vg] + [p for p in attn.parameters() if p.requires_grad]
    grad_out = torch.randn(q.shape, generator=torch.Generator(device=q.device).manual_seed(1), device=q.device).to(q.dtype)

    def train() -> tuple:
        out = attn(qg, kg, vg, causal=causal, kv_mask=kv_mask)
        return torch.autograd.grad(out, targets, grad_outputs=grad_out, allow_unused=True)

    return train


def _prepare(attn: torch.nn.Module, q: Tensor, k: Tensor, v: Tensor, cell: Cell, training: bool,
             kv_mask: Tensor | None = None) -> float | None:
    """Call the variant's set-up hook, if any; its seconds (returned, else measured) become setup_s."""
    prepare = getattr(attn, "prepare", None)
    if not callable(prepare):
        return None
    start = time.perf_counter()
    spent = prepare(q, k, v, causal=cell.causal, kv_mask=kv_mask, training=training)
    return float(spent) if spent is not None else time.perf_counter() - start
