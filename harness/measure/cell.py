"""One cell -> one row: the order of the stages. The measure package is the only code that touches the device.

The order inside a cell: inputs -> build -> refuse (unsupported, with reasons) -> calibrate
(learnable variants, on other seeds) -> prepare (set-up hook) -> one checked call (accuracy
against the float64 reference on sampled rows, gradients in train mode; this is also the
warm-up) -> peak memory of one call -> timing (paired with the dense baseline in alternating blocks,
harness.measure.speedup). Nothing but the calls themselves is timed.

A failure never escapes: out of memory -> "oom", NotSupportedError -> "unsupported", NaN/inf ->
"nonfinite", the per-cell limit -> "timeout", anything else -> "error" with the stage and message.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Iterator

import torch
from torch import Tensor

from harness.inputs import get_inputs, parse_inputs
from harness.measure.accuracy import check_accuracy
from harness.measure.calibration import calibrated
from harness.measure.context import MeasureContext
from harness.measure.memory import measure_peak_memory
from harness.measure.noise import larger, load_per_cpu, noise_fields
from harness.measure.outcome import base_row, classify_exception, deadline, now, release_memory
from harness.measure.settings import DTYPES, MeasureSettings, RunInfo
from harness.measure.speedup import baseline_for, timed_fields
from harness.schema import Cell, Row


class _StageFailed(Exception):
    """An exception raised inside a named stage of a cell (the stage goes into the reason)."""

    def __init__(self, stage: str, error: BaseException):
        super().__init__(stage)
        self.stage, self.error = stage, error


@contextlib.contextmanager
def _stage(name: str) -> Iterator[None]:
    try:
        yield
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a row
        raise _StageFailed(name, exc) from exc


def measure_cell(cell: Cell, settings: MeasureSettings, run: RunInfo, context: MeasureContext | None = None) -> Row:
    """Measure one cell and return its row; never raises for a failure of the variant (see module doc)."""
    context = context or MeasureContext()
    row = base_row(cell, run).update(started_at=now())
    start, load_at_start = time.perf_counter(), load_per_cpu()
    try:
        with deadline(settings.cell_timeout_s):
            row.update(**_measure(cell, settings, context))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a row (a timeout may land between stages)
        stage, error = (exc.stage, exc.error) if isinstance(exc, _StageFailed) else ("start", exc)
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
    """The measured fields of a cell, stage by stage (see module doc); each stage's failure names it."""
    from variants import build_variant, train_flops

    device = torch.device(settings.device)
    training = cell.mode == "train"
    N, M = cell.seq_len, cell.kv_len
    fields: dict[str, Any] = {}
    with _stage("inputs"):
        name, knobs = parse_inputs(cell.inputs)  # once per cell: evaluation and calibration inputs share it
        reason = get_inputs(name).unsupported_reason(N, M, B=cell.batch, H=cell.heads, D=cell.head_dim)
        if reason:
            return {"status": "unsupported", "reason": reason}
        q, k, v = context.get_inputs(cell, device, (name, knobs))
    with _stage("build"):
        torch.manual_seed(cell.seed)  # parameter initialisation is part of the cell
        attn = build_variant(cell.variant, **cell.config).to(device)
        fields["backend"] = attn.resolve_backend(q, training=training)
        reasons = attn.not_supported_reasons(q, k, v, causal=cell.causal, kv_mask=None, training=training)
        if reasons:
            return {**fields, "status": "unsupported", "reason": "; ".join(reasons)}
    if attn.capabilities.learnable:
        with _stage("calibration"):
            attn, calibration = calibrated(attn, cell, (name, knobs), settings, context, device)
            fields.update(calibration)
    attn = attn.to(dtype=DTYPES[cell.dtype])
    attn.train(training)
    with _stage("prepare"):
        fields["setup_s"] = _prepare(attn, q, k, v, cell, training)
    with _stage("accuracy"):
        accuracy = check_accuracy(attn, q, k, v, causal=cell.causal, training=training, error_rows=settings.error_rows,
                                  seed=cell.seed, reference=settings.accuracy_reference)
        fields.update(accuracy.fields)
        if accuracy.nonfinite:
            return {**fields, "status": "nonfinite", "reason": accuracy.nonfinite}
    step = _step(attn, q, k, v, cell.causal, training)
    with _stage("memory"):
        peak = measure_peak_memory(step, device)
        fields.update(peak_memory_bytes=peak.bytes, memory_method=peak.method)
        del peak
    with _stage("timing"):  # paired with the baseline (dense, backend auto) unless this is it: harness.measure.speedup
        baseline = baseline_for(cell, q, k, v, context, device, _step)
        fields.update(timed_fields(step, baseline, settings, device, first_call_s=accuracy.call_s))
    latency = fields["latency_s"]
    flops = attn.flops(cell.batch, cell.heads, N, M, cell.head_dim, cell.causal)
    flops = train_flops(flops) if training else int(flops)
    return {
        **fields, "status": "ok", "flops": flops,
        "tflops": flops / latency / 1e12 if latency > 0 else None,
    }


def _step(attn: torch.nn.Module, q: Tensor, k: Tensor, v: Tensor, causal: bool, training: bool) -> Callable[[], Any]:
    """The timed call: forward under no_grad, or forward + backward w.r.t. q, k, v and parameters."""
    if not training:
        def forward() -> Tensor:
            with torch.no_grad():
                return attn(q, k, v, causal=causal)

        return forward
    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
    targets = [qg, kg, vg] + [p for p in attn.parameters() if p.requires_grad]
    grad_out = torch.randn(q.shape, generator=torch.Generator(device=q.device).manual_seed(1), device=q.device).to(q.dtype)

    def train() -> tuple:
        out = attn(qg, kg, vg, causal=causal)
        return torch.autograd.grad(out, targets, grad_outputs=grad_out, allow_unused=True)

    return train


def _prepare(attn: torch.nn.Module, q: Tensor, k: Tensor, v: Tensor, cell: Cell, training: bool) -> float | None:
    """Call the variant's set-up hook, if any; its seconds (returned, else measured) become setup_s."""
    prepare = getattr(attn, "prepare", None)
    if not callable(prepare):
        return None
    start = time.perf_counter()
    spent = prepare(q, k, v, causal=cell.causal, kv_mask=None, training=training)
    return float(spent) if spent is not None else time.perf_counter() - start
