"""One cell -> one row: latency, peak memory, FLOPs, accuracy against float64. The only stage that touches the device.

The order inside a cell: inputs -> build -> refuse (unsupported, with reasons) -> calibrate
(learnable variants, on other seeds) -> prepare (set-up hook) -> one checked call (accuracy
against the float64 reference on sampled rows, gradients in train mode; this is also the
warm-up) -> peak memory of one call -> timing. Nothing but the call itself is timed.

A failure never escapes: out of memory -> "oom", NotSupportedError -> "unsupported", NaN/inf ->
"nonfinite", the per-cell limit -> "timeout", anything else -> "error" with the stage and message.
"""
from __future__ import annotations

import contextlib
import copy
import gc
import json
import signal
import statistics
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

import torch
from torch import Tensor

from harness.inputs import QKV, get_inputs, make_inputs, parse_inputs
from harness.memory import measure_peak_memory
from harness.plan import Cell
from harness.store import empty_row

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
CALIBRATION_SEED_OFFSET = 1_000_003  # calibration batch i uses seed + this + i: never an evaluation seed
# float64 scores per reference chunk (query rows are processed in chunks): bounds the accuracy
# check's own memory so the process's peak stays that of the cell measured, not of the gold.
REFERENCE_CHUNK_BYTES = {"cpu": 1 << 24, "cuda": 1 << 28}
L2_FLUSH_BYTES = 256 << 20  # zeroed between timed CUDA calls so none starts with a warm L2


@dataclass(frozen=True)
class MeasureSettings:
    """How cells are measured (from the spec); the same for every cell of a run."""

    device: str = "cpu"  # full device string ("cuda:1"); the row records its type
    time_budget_s: float = 0.25  # seconds of timing per cell
    repeats: int = 2  # at least this many timed calls
    cell_timeout_s: float | None = None  # whole-cell limit
    error_rows: int = 256  # sampled query rows for the accuracy check
    calibration_steps: int = 150  # optimizer steps for learnable variants
    calibration_batches: int = 4  # calibration batches (seeds other than the evaluation's)
    calibration_max_seq_len: int = 256  # calibration length is min(N, this)
    accuracy_reference: str = "full"  # "full": exact softmax | "pattern": the variant's own sparsity pattern

    @classmethod
    def from_spec(cls, spec: Any) -> "MeasureSettings":
        return cls(
            device=spec.device, time_budget_s=spec.time_budget_s, repeats=spec.repeats, cell_timeout_s=spec.cell_timeout_s,
            error_rows=spec.error_rows, calibration_steps=spec.calibration_steps, calibration_batches=spec.calibration_batches,
            calibration_max_seq_len=spec.calibration_max_seq_len, accuracy_reference=spec.accuracy_reference,
        )

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class RunInfo:
    """The run-level identity fields every row carries."""

    run_id: str
    device_name: str
    host: str
    threads: int


class CellTimeout(Exception):
    """The cell ran past its limit."""


@dataclass
class MeasureContext:
    """State kept between cells of one process: the last inputs (shared by consecutive cells) and calibrations."""

    inputs_key: tuple | None = None
    inputs: QKV | None = None
    calibrated: dict[str, tuple[torch.nn.Module, float, dict]] = field(default_factory=dict)

    def get_inputs(self, cell: Cell, device: torch.device) -> QKV:
        key = (cell.inputs, cell.batch, cell.heads, cell.seq_len, cell.kv_len, cell.head_dim, cell.dtype, str(device), cell.seed)
        if key != self.inputs_key:
            self.inputs = self.inputs_key = None  # free the old ones before making the new ones
            name, knobs = parse_inputs(cell.inputs)
            self.inputs = make_inputs(
                name, knobs, B=cell.batch, H=cell.heads, N=cell.seq_len, M=cell.kv_len, D=cell.head_dim,
                dtype=DTYPES[cell.dtype], device=device, seed=cell.seed,
            )
            self.inputs_key = key
        return self.inputs  # type: ignore[return-value]

    def clear(self) -> None:
        self.inputs = self.inputs_key = None


def base_row(cell: Cell, run: RunInfo) -> dict[str, Any]:
    """A row with the cell's identity filled in and every measurement None."""
    row = empty_row()
    row.update(cell.fields())
    row.update(run_id=run.run_id, cell_id=cell.cell_id, device_name=run.device_name, host=run.host, threads=run.threads)
    return row


def outcome_row(cell: Cell, run: RunInfo, status: str, reason: str | None) -> dict[str, Any]:
    """A row for a cell that was not measured (e.g. OOM at a shorter N): status and reason only."""
    row = base_row(cell, run)
    row.update(status=status, reason=reason, started_at=_now(), wall_s=0.0)
    return row


def measure_cell(cell: Cell, settings: MeasureSettings, run: RunInfo, context: MeasureContext | None = None) -> dict[str, Any]:
    """Measure one cell and return its row; never raises for a failure of the variant (see module doc)."""
    context = context or MeasureContext()
    row = base_row(cell, run)
    row["started_at"] = _now()
    stage = ["start"]
    start = time.perf_counter()
    try:
        with _deadline(settings.cell_timeout_s):
            _measure(row, cell, settings, context, stage)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a row
        status, reason = classify_exception(exc, settings.cell_timeout_s)
        row.update(status=status, reason=reason if status in ("oom", "timeout", "unsupported") else f"during {stage[0]}: {reason}")
        del exc
    row["wall_s"] = time.perf_counter() - start
    if row["status"] != "ok":
        release_memory(settings.device, context if row["status"] == "oom" else None)
    return row


def classify_exception(exc: BaseException, timeout_s: float | None = None) -> tuple[str, str]:
    """(status, reason) for an exception raised inside a cell."""
    from variants import NotSupportedError

    message = f"{type(exc).__name__}: {exc}".strip()
    if len(message) > 2000:
        message = message[:2000] + " ..."
    if isinstance(exc, CellTimeout):
        return "timeout", f"cell ran past its limit of {timeout_s:g} s" if timeout_s else "cell ran past its limit"
    if isinstance(exc, NotSupportedError):
        return "unsupported", "; ".join(exc.reasons)
    if is_oom(exc):
        return "oom", message
    return "error", message


def is_oom(exc: BaseException) -> bool:
    """CUDA OutOfMemoryError, MemoryError, or a RuntimeError from an allocator that ran out."""
    cuda_oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if cuda_oom is not None and isinstance(exc, cuda_oom):
        return True
    if isinstance(exc, MemoryError):
        return True
    if isinstance(exc, RuntimeError):
        text = str(exc).lower()
        return "out of memory" in text or ("alloc" in text and ("memory" in text or "bytes" in text))
    return False


def release_memory(device: str, context: MeasureContext | None = None) -> None:
    """Collect garbage (and the CUDA cache) after a failure; drop cached inputs after an OOM."""
    if context is not None:
        context.clear()
    gc.collect()
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()


# ---- the stages of a cell ---------------------------------------------------------------------------
def _measure(row: dict, cell: Cell, settings: MeasureSettings, context: MeasureContext, stage: list[str]) -> None:
    from variants import build_variant, train_flops

    device = torch.device(settings.device)
    training = cell.mode == "train"
    N, M = cell.seq_len, cell.kv_len
    stage[0] = "inputs"
    name, _ = parse_inputs(cell.inputs)
    reason = get_inputs(name).unsupported_reason(N, M, B=cell.batch, H=cell.heads, D=cell.head_dim)
    if reason:
        row.update(status="unsupported", reason=reason)
        return
    q, k, v = context.get_inputs(cell, device)
    stage[0] = "build"
    torch.manual_seed(cell.seed)  # parameter initialisation is part of the cell
    attn = build_variant(cell.variant, **cell.config).to(device)
    row["backend"] = attn.resolve_backend(q, training=training)
    reasons = attn.not_supported_reasons(q, k, v, causal=cell.causal, kv_mask=None, training=training)
    if reasons:
        row.update(status="unsupported", reason="; ".join(reasons))
        return
    if attn.capabilities.learnable:
        stage[0] = "calibration"
        attn = _calibrated(attn, cell, settings, context, device, row)
    attn = attn.to(dtype=DTYPES[cell.dtype])
    attn.train(training)
    stage[0] = "prepare"
    row["setup_s"] = _prepare(attn, q, k, v, cell, training)
    stage[0] = "accuracy"
    nonfinite, first_call_s = _accuracy(row, attn, q, k, v, cell, settings, training)
    if nonfinite:
        row.update(status="nonfinite", reason=nonfinite)
        return
    step = _step(attn, q, k, v, cell.causal, training)
    stage[0] = "memory"
    peak = measure_peak_memory(step, device)
    row.update(peak_memory_bytes=peak.bytes, memory_method=peak.method)
    del peak
    stage[0] = "timing"
    if device.type == "cuda":
        times, repeats = _time_cuda(step, settings, device)
    else:
        times, repeats = _time_cpu(step, settings, slow=first_call_s >= settings.time_budget_s)
    latency = statistics.median(times)
    flops = attn.flops(cell.batch, cell.heads, N, M, cell.head_dim, cell.causal)
    flops = train_flops(flops) if training else int(flops)
    row.update(
        status="ok", latency_s=latency, latency_p20_s=_quantile(times, 0.2), latency_p80_s=_quantile(times, 0.8),
        repeats=repeats, flops=flops, tflops=flops / latency / 1e12 if latency > 0 else None,
    )


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


def calibration_length(attn: Any, cell: Cell, settings: MeasureSettings) -> int:
    """N of the calibration batches: the evaluation length for variants with per-position parameters
    (calibrate_at_eval_length, e.g. Linformer's E and F), else min(N, calibration_max_seq_len)."""
    if getattr(attn, "calibrate_at_eval_length", False):
        return cell.seq_len
    return min(cell.seq_len, settings.calibration_max_seq_len)


def calibration_key(cell: Cell, settings: MeasureSettings) -> str:
    """The key a fit is cached under (in MeasureContext.calibrated and RUN_DIR/fitted/): cells that
    share it share one calibration, across modes and, where the length is capped, across N."""
    from variants import get_variant

    length = calibration_length(get_variant(cell.variant).cls, cell, settings)
    return json.dumps([cell.variant, cell.config, length, cell.batch, cell.heads, cell.head_dim, cell.causal, cell.inputs,
                       cell.seed, str(torch.device(settings.device))], sort_keys=True, default=str)


def _calibrated(attn, cell: Cell, settings: MeasureSettings, context: MeasureContext, device: torch.device, row: dict):
    """The variant fitted with the fixed budget on calibration inputs (cached across modes and longer N)."""
    from variants.calibrate import calibrate  # imported per call (the module's attribute, so a test can wrap it)

    length = calibration_length(attn, cell, settings)
    key = calibration_key(cell, settings)
    if key not in context.calibrated:
        name, knobs = parse_inputs(cell.inputs)
        batches = [
            make_inputs(name, knobs, B=cell.batch, H=cell.heads, N=length, D=cell.head_dim, device=device, seed=cell.seed + CALIBRATION_SEED_OFFSET + i)
            for i in range(settings.calibration_batches)
        ]
        start = time.perf_counter()
        report = calibrate(attn, batches, steps=settings.calibration_steps, causal=cell.causal)
        seconds = time.perf_counter() - start
        del batches
        report_dict = report.to_dict()
        report_dict["seeds"] = [cell.seed + CALIBRATION_SEED_OFFSET + i for i in range(settings.calibration_batches)]
        context.calibrated[key] = (copy.deepcopy(attn), seconds, report_dict)
    fitted, seconds, report_dict = context.calibrated[key]
    row.update(calibration_s=seconds, calibration=dict(report_dict))
    return copy.deepcopy(fitted)


# ---- accuracy -----------------------------------------------------------------------------------------
def sample_rows(N: int, R: int, seed: int) -> Tensor:
    """R query rows of N, sorted: the first, the last and R - 2 drawn by `seed` (all N when R >= N)."""
    if R >= N:
        return torch.arange(N)
    g = torch.Generator().manual_seed(seed + N)
    middle = torch.randperm(N - 2, generator=g)[: R - 2] + 1
    return torch.cat([torch.tensor([0]), middle.sort().values, torch.tensor([N - 1])])


def _accuracy(row: dict, attn, q: Tensor, k: Tensor, v: Tensor, cell: Cell, settings: MeasureSettings, training: bool) -> tuple[str | None, float]:
    """Fill the error fields from one call against float64 on sampled rows.

    Returns (why the output is non-finite or None, seconds of the variant's call: a first estimate of its latency).
    """
    from variants import reference_attention

    rows = sample_rows(cell.seq_len, settings.error_rows, cell.seed).to(q.device)
    pattern = attn.pattern if settings.accuracy_reference == "pattern" else None
    B, H, R, D, M = q.shape[0], q.shape[1], len(rows), q.shape[3], k.shape[2]
    chunk = max(1, REFERENCE_CHUNK_BYTES[q.device.type] // (B * H * M * 8))
    if training:
        qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
        g = torch.randn(B, H, R, D, generator=torch.Generator(device=q.device).manual_seed(cell.seed + 7), device=q.device)
        start = time.perf_counter()
        out = attn(qg, kg, vg, causal=cell.causal)
        g = g.to(out.dtype)  # the reference below gets these same (rounded) values, so bf16 rounding of g is no error
        grad_out = torch.zeros_like(out)
        grad_out[:, :, rows] = g
        grads = torch.autograd.grad(out, (qg, kg, vg), grad_outputs=grad_out, allow_unused=True)
        seconds = time.perf_counter() - start
        grads = tuple(torch.zeros_like(t) if g is None else g for g, t in zip(grads, (qg, kg, vg)))  # unused input: zero gradient
        out = out.detach()
        bad = _nonfinite(out, *grads)
        if bad:
            return bad, seconds
        q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
        ref_grads = [torch.zeros_like(t) for t in (q64, k64, v64)]
        refs = []
        for i in range(0, R, chunk):
            ref = reference_attention(q64, k64, v64, causal=cell.causal, pattern=pattern, rows=rows[i : i + chunk])
            for total, part in zip(ref_grads, torch.autograd.grad(ref, (q64, k64, v64), grad_outputs=g[:, :, i : i + chunk].double())):
                total += part
            refs.append(ref.detach())
        ref = torch.cat(refs, dim=2)
        row.update(
            grad_rel_l2_q=_rel_l2(grads[0], ref_grads[0]), grad_rel_l2_k=_rel_l2(grads[1], ref_grads[1]),
            grad_rel_l2_v=_rel_l2(grads[2], ref_grads[2]), grad_check_seq_len=cell.seq_len,
        )
    else:
        start = time.perf_counter()
        with torch.no_grad():
            out = attn(q, k, v, causal=cell.causal)
        seconds = time.perf_counter() - start
        bad = _nonfinite(out)
        if bad:
            return bad, seconds
        q64, k64, v64 = (t.double() for t in (q, k, v))
        with torch.no_grad():
            ref = torch.cat([
                reference_attention(q64, k64, v64, causal=cell.causal, pattern=pattern, rows=rows[i : i + chunk])
                for i in range(0, R, chunk)
            ], dim=2)  # (B, H, R, D)
    mine = out[:, :, rows].double()  # (B, H, R, D)
    row.update(
        rel_l2_error=_rel_l2(mine, ref), max_abs_error=float((mine - ref).abs().max()),
        cosine=float(torch.nn.functional.cosine_similarity(mine, ref, dim=-1).mean()), error_rows=R,
    )
    return None, seconds


def _nonfinite(*tensors: Tensor) -> str | None:
    names = ("output", "dq", "dk", "dv")
    for name, t in zip(names, tensors):
        nan, inf = int(torch.isnan(t).sum()), int(torch.isinf(t).sum())
        if nan or inf:
            return f"{name} has {nan} NaN and {inf} inf values of {t.numel()}"
    return None


def _rel_l2(a: Tensor, b: Tensor) -> float:
    b = b.double()
    return float((a.double() - b).norm() / b.norm().clamp_min(1e-300))


# ---- timing -------------------------------------------------------------------------------------------
def _time_cpu(step: Callable[[], Any], settings: MeasureSettings, *, slow: bool) -> tuple[list[float], int]:
    """Per-call seconds of each timed block (torch.utils.benchmark, at this process's thread count) and the call count.

    `slow`: one call already took the whole budget, so skip blocked_autorange's block-size
    estimate (one more untimed call) and time `repeats` single calls.
    """
    from torch.utils.benchmark import Timer

    timer = Timer(stmt="step()", globals={"step": step}, num_threads=torch.get_num_threads())
    if slow:
        times, number = [], 1
    else:
        measurement = timer.blocked_autorange(min_run_time=settings.time_budget_s)
        times, number = list(measurement.times), measurement.number_per_run
    while len(times) * number < settings.repeats:
        times.extend(timer.timeit(number).times)
    return times, len(times) * number


def _time_cuda(step: Callable[[], Any], settings: MeasureSettings, device: torch.device) -> tuple[list[float], int]:
    """Per-call seconds on CUDA, L2 flushed between calls: triton.testing.do_bench when importable, else CUDA events."""
    try:
        from triton.testing import do_bench
    except Exception:  # triton missing or broken: CUDA events below
        do_bench = None
    budget_ms = settings.time_budget_s * 1000
    if do_bench is not None:
        try:
            ms = do_bench(step, warmup=max(1, int(budget_ms / 4)), rep=max(1, int(budget_ms)), return_mode="all")
        except TypeError:  # an older triton without return_mode="all"
            ms = None
        if isinstance(ms, (list, tuple)) and len(ms) >= settings.repeats:
            return [t / 1e3 for t in ms], len(ms)
    return _time_cuda_events(step, settings, device)


def _time_cuda_events(step: Callable[[], Any], settings: MeasureSettings, device: torch.device) -> tuple[list[float], int]:
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=device)
    step()
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        step()
    end.record()
    torch.cuda.synchronize(device)
    estimate_ms = max(start.elapsed_time(end) / 3, 1e-3)
    n = max(settings.repeats, min(10_000, int(settings.time_budget_s * 1000 / estimate_ms)))
    for _ in range(max(1, n // 4)):
        step()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        flush.zero_()
        starts[i].record()
        step()
        ends[i].record()
    torch.cuda.synchronize(device)
    return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)], n


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    lo = int(position)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (position - lo)


@contextlib.contextmanager
def _deadline(seconds: float | None) -> Iterator[None]:
    """Raise CellTimeout in this (main) thread after `seconds`; a running native call finishes first."""
    if not seconds or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise CellTimeout()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
