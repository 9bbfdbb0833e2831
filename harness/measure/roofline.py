"""A finished row judged (`judged`): held against the machine's measured limits (harness.measure.limits), and its timing
against its noise.

The limits (an ok row): % of compute peak, % of bandwidth, and the `impossible` flag of a number above either.
pct_of_compute_peak: the FLOPs the backend executes (AttentionVariant.executed_flops, train and layer factors as for
`flops`) per second over the measured matmul peak. pct_of_bandwidth: the bytes the call must move at least (inputs,
output and, for decode, the state read once per token; train also reads the output gradient and writes the input
gradients) per second over the measured copy bandwidth. A lower bound on the work is what makes `impossible` sound:
above IMPOSSIBLE_ABOVE_PCT of either limit no correct kernel runs. Bandwidth is only held to the limit when the
bytes do not fit in the last-level cache (a cached working set legitimately moves faster than DRAM copies).

The noise (a timed row): `noisy` with its reason when the machine was loaded around the cell (harness.measure.noise),
the paired speed-up's interval is wide or the repeated blocks disagree.

Before a cell runs (host_memory_reason): the bytes its inputs and their float64 reference need, a lower bound built on
bytes_moved (the forward q, k, v and output in the cell's dtype) plus q, k, v again in float64; a CPU cell needing
more than the host's free memory is an `oom` row with both numbers, its inputs never made (a 13 GB q, k, v on a 2 GB
host would otherwise be allocated, swapped or killed before anything says why).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from harness.cell_rules import INT8_DYNAMIC
from harness.devices import free_host_memory_bytes
from harness.measure.noise import HIGH_LOAD_PER_CPU
from harness.measure.prefill import AUTOCAST_DTYPES
from harness.row import Row
from harness.schema import Cell

# Tolerance above 100%: the limits are the best of a short measurement on a machine that may be shared.
IMPOSSIBLE_ABOVE_PCT = 110.0

WIDE_INTERVAL = 1.3  # speedup_high / speedup_low (or reference_speedup_...) beyond this: the rounds disagree
WIDE_SPREAD = 1.3  # p80 / p20 of the variant's timed blocks beyond this: the repeated blocks disagree

BYTES_PER_ELEMENT = {"float32": 4, "bfloat16": 2, "float16": 2}
FLOAT64_BYTES = 8


def judged(row: Row, limits: dict[str, Any] | None, load: float | None) -> dict[str, Any]:
    """The fields a finished row gets from being judged: an ok row's against the machine's `limits`
    (roofline_fields), every row's noisy and noise_reason for its `load` (noise_fields)."""
    ok = row.status == "ok"
    roofline = roofline_fields(row, limits, precision_dtype=compute_dtype(row.cell)) if ok else {}
    return {**roofline, **noise_fields(row, load)}


def compute_dtype(cell: Cell) -> str:
    """The dtype a cell's matmuls run in: its dtype, or its autocast precision's ("autocast-bf16": bfloat16); int8 for
    int8-dynamic's projections and for int8 scores (torch._int_mm's integer products: no int8 peak is measured, so
    such a row gets no percentages and is never flagged against a float peak)."""
    if cell.precision == INT8_DYNAMIC or cell.scores_dtype == "int8":
        return "int8"
    dtype = AUTOCAST_DTYPES.get(cell.precision)
    return str(dtype).removeprefix("torch.") if dtype is not None else cell.dtype


def bytes_moved(cell: Cell, state_bytes: int | None = None) -> int:
    """The bytes one timed call must move at least (per generated token for decode), in the cell's dtype.

    prefill: q, k, v read and the output written; train: also the output gradient read and dq, dk, dv written.
    decode: the live state read (`state_bytes`: the row's state_live_bytes, after the context) and the token's q, k, v read and output written.
    layer: the block's input read and output written (its weights and intermediates not counted: a lower bound).
    """
    e = BYTES_PER_ELEMENT.get(cell.dtype, 4)
    B, H, Hkv, N, M, D = cell.batch, cell.heads, cell.kv_heads or cell.heads, cell.seq_len, cell.kv_len, cell.head_dim
    if cell.phase == "decode":
        return int(state_bytes or 0) + 2 * (B * H * D + B * Hkv * D) * e
    if cell.scope == "layer":
        return 2 * B * N * H * D * e
    forward = (2 * B * H * N * D + 2 * B * Hkv * M * D) * e  # q, out; k, v
    return 2 * forward if cell.mode == "train" else forward


def roofline_fields(row: Row, limits: dict[str, Any] | None, *, precision_dtype: str | None = None) -> dict[str, Any]:
    """bytes_moved, bytes_per_s, pct_of_compute_peak, pct_of_bandwidth and impossible of an ok row.

    `row` holds latency_s, flops (executed) and (decode) state_live_bytes (else state_bytes); `limits` is the run's (run_limits' output);
    `precision_dtype` the dtype the call computes in when autocast changes it. Without limits for the dtype the
    percentages are None.
    """
    cell, latency, live = row.cell, row.latency_s, row.state_live_bytes
    moved = bytes_moved(cell, live if live is not None else row.state_bytes)
    fields: dict[str, Any] = {"bytes_moved": moved, "bytes_per_s": moved / latency if latency else None}
    entry = ((limits or {}).get("dtypes") or {}).get(precision_dtype or cell.dtype)
    if not entry or not latency:
        return fields
    executed = row.flops  # what the backend executes (harness.measure.flops)
    peak, bandwidth = entry.get("ceiling_flops") or entry.get("peak_flops"), entry.get("bandwidth_bytes_per_s")
    compute_pct = 100.0 * executed / latency / peak if executed and peak else None
    bandwidth_pct = 100.0 * fields["bytes_per_s"] / bandwidth if bandwidth else None
    fields.update(pct_of_compute_peak=compute_pct, pct_of_bandwidth=bandwidth_pct)
    load = entry.get("load_per_cpu")
    if isinstance(load, (int, float)) and load >= HIGH_LOAD_PER_CPU:  # limits measured under load understate the
        return fields  # machine: a row above them proves nothing, so nothing is flagged
    reasons = []
    if compute_pct is not None and compute_pct > IMPOSSIBLE_ABOVE_PCT:
        reasons.append(f"{compute_pct:.0f}% of the measured compute peak ({peak / 1e12:.3g} TFLOP/s)")
    cache = entry.get("cache_bytes") or 0
    if bandwidth_pct is not None and bandwidth_pct > IMPOSSIBLE_ABOVE_PCT and moved > cache:
        reasons.append(
            f"{bandwidth_pct:.0f}% of the measured bandwidth ({bandwidth / 1e9:.3g} GB/s) "
            f"with {moved / 2**20:.3g} MiB moved, more than the {cache / 2**20:.3g} MiB cache"
        )
    if reasons:
        fields["impossible"] = (
            " and ".join(reasons) + f" (above {IMPOSSIBLE_ABOVE_PCT:g}%): a wrong FLOP count, a cached result or a "
            "timer error; if the machine was busy when its limits were measured, rerun with --remeasure-limits"
        )
    return fields


INTERVAL_WIDE = "speed-up interval wide"  # noise_fields' reason for a speed-up interval above WIDE_INTERVAL
LOADED, SPREAD = "load", "timed blocks spread"  # ... for a load at or above HIGH_LOAD_PER_CPU, for blocks that disagree
PROCESSES_WIDE = f"{INTERVAL_WIDE} over"  # ... for an interval over processes (interval_rejudged) above WIDE_INTERVAL
JUDGED = (LOADED + " ", SPREAD)  # the starts of the reasons besides the interval's that make a row noisy


def interval_rejudged(
    noise_reason: str | None, low: float, high: float, processes: int, name: str = ""
) -> dict[str, Any]:
    """noisy and noise_reason of a row whose speed-up interval was replaced by one over `processes` processes
    (harness.runner.processes): noise_fields' reasons about the old interval are dropped, the new interval judged as
    they were (above WIDE_INTERVAL; `name` "reference " for the baseline's own cells), the other reasons (load, spread,
    a note) kept; noisy when any reason of noise_fields' own remains."""
    parts = [p for p in (noise_reason or "").split("; ") if p and INTERVAL_WIDE not in p]
    if high / low > WIDE_INTERVAL:
        parts.insert(0, f"{name}{PROCESSES_WIDE} {processes} processes ({low:.3g}-{high:.3g})")
    noisy = any(p.startswith(JUDGED) or INTERVAL_WIDE in p for p in parts)
    return {"noisy": noisy, "noise_reason": "; ".join(parts) or None}


def noise_fields(row: Row, load: float | None) -> dict[str, Any]:
    """noisy and noise_reason for a timed row (its latency_p20_s/p80_s, speedup_low/high or
    reference_speedup_low/high) and its load.

    A row that was not timed (no latency_s) gets noisy None; a note already in noise_reason (e.g. why
    there is no paired speed-up) is kept after the reasons.
    """
    if row.latency_s is None:
        return {"noisy": None}
    reasons = []
    if load is not None and load >= HIGH_LOAD_PER_CPU:
        reasons.append(f"{LOADED} {load:.2f} per CPU >= {HIGH_LOAD_PER_CPU}")
    intervals = {"": (row.speedup_low, row.speedup_high), "reference ": (row.reference_speedup_low, row.reference_speedup_high)}  # fmt: skip
    for name, (
        low,
        high,
    ) in intervals.items():  # a variant's speed-up over the baseline; the baseline's over the reference
        if low and high and high / low > WIDE_INTERVAL:
            reasons.append(f"{name}{INTERVAL_WIDE} ({low:.3g}-{high:.3g})")
    p20, p80 = row.latency_p20_s, row.latency_p80_s
    if p20 and p80 and p80 / p20 > WIDE_SPREAD:
        reasons.append(f"{SPREAD} p80/p20 {p80 / p20:.2f}")
    note = row.noise_reason
    text = "; ".join(reasons + ([note] if note else []))
    return {"noisy": bool(reasons), "noise_reason": text or None}


def inputs_and_reference_bytes(cell: Cell) -> int:
    """The least bytes a cell holds before its variant runs: q, k, v and an output in the cell's dtype, and q, k, v in
    float64 for the exact reference (decode and layer cells make the same inputs of their N tokens)."""
    forward = bytes_moved(dataclasses.replace(cell, phase="prefill", scope="attention", mode="forward"))
    element = BYTES_PER_ELEMENT.get(cell.dtype, 4)
    output = cell.batch * cell.heads * cell.seq_len * cell.head_dim * element
    return forward + (forward - output) // element * FLOAT64_BYTES


def host_memory_reason(cell: Cell) -> str | None:
    """Why a CPU cell is refused before its inputs are made (they and their reference exceed the host's free memory),
    or None (a CUDA cell's inputs live on the device, whose allocator reports its own out-of-memory)."""
    if not cell.device.startswith("cpu"):
        return None
    free = free_host_memory_bytes()
    need = inputs_and_reference_bytes(cell)
    if free is None or need <= free:
        return None
    return (
        f"the inputs and their float64 reference need at least {need} bytes ({need / 2**30:.2f} GiB), more than the "
        f"{free} bytes ({free / 2**30:.2f} GiB) free on this host: refused before allocating them"
    )
