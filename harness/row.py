"""A Row: one line of rows.jsonl, the Cell it measured and what was measured. Rows travel between processes and live
on disk as plain JSON objects (``Row.to_dict()``, ``Row.from_dict()``); ROW_FIELDS and NUMERIC_FIELDS are derived
from the dataclass, never typed again."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from difflib import get_close_matches
from typing import Any, Mapping

from harness.schema import CELL_FIELDS, SCHEMA_VERSION, Cell, json_safe


def _measured(default: Any = None) -> Any:
    """A measurement column: missing values are NaN in DataFrames (readers coerce it to float)."""
    return field(default=default, metadata={"numeric": True})


@dataclass
class Row:
    """One row of rows.jsonl: the cell it measured, the outcome and every measurement (None when not measured).

    Composes its Cell (as torch.utils.benchmark's Measurement composes its TaskSpec): the cell's fields are read
    through the row (``row.seq_len``) and are columns after run_id and cell_id; the row's own fields follow, in
    column order (docs/DESIGN.md "Row schema").
    """

    cell: Cell  # what was measured (a tuned cell's config holds the value found)
    run_id: str | None = None
    cell_id: str | None = None  # the planned cell's id (Cell.cell_id), kept as planned
    backend: str | None = None  # the backend that ran, resolved from "auto"
    sdpa_kernel: str | None = None  # the SDPA kernel torch ran (flash, efficient, cudnn, math); None: no SDPA op ran
    # the operator xformers ran (fa3F, fa2F, fa2F-pt, cutlassF-pt; -pt: torch's own kernel); None: xformers ran none
    xformers_op: str | None = None
    device_name: str | None = None
    host: str | None = None
    threads: int | None = None
    accuracy_reference: str | None = (
        None  # what the errors are against: "full" (exact attention) | "pattern" (its own mask)
    )
    status: str | None = None  # one of STATUSES
    reason: str | None = None
    latency_s: float | None = _measured()  # median seconds per call
    latency_p20_s: float | None = _measured()
    latency_p80_s: float | None = _measured()
    repeats: int | None = _measured()  # timed calls
    # -- paired timing and noise (docs/timing.md); absent from older schema-1 rows, which load as None --
    # baseline/variant per-call time over ABBA pairs; None when not paired
    # (timed in rounds: the geometric mean of the rounds' medians; harness.measure.rounds)
    speedup: float | None = _measured()
    # its 95% interval: where the next run's speed-up should fall (rounds), else a bootstrap over pairs (fixed seed)
    speedup_low: float | None = _measured()
    speedup_high: float | None = _measured()
    rounds: int | None = _measured()  # rounds the pairs were timed in (1: one; None: not paired, or older rows)
    speedup_round_sd: float | None = _measured()  # s.d. of log(round speed-up) between rounds; None: one round
    # the processes the pairs were timed in (--processes; harness.runner.processes): from 2, speedup (or
    # reference_speedup) and its interval are over them (harness.measure.rounds.process_interval), rounds counts them
    # all, and speedup_round_sd, the latencies and the CPU-time fields stay the first process's; None: not paired
    processes: int | None = _measured()
    speedup_process_sd: float | None = _measured()  # s.d. of log(speed-up) between the processes; None: one process
    # the baseline's own cells: reference kernel / cell seconds, paired in rounds as speedup is, with its 95% interval
    # (harness.measure.yardstick; rounds and speedup_round_sd are then this pairing's); None for every other cell
    reference_speedup: float | None = _measured()
    reference_speedup_low: float | None = _measured()
    reference_speedup_high: float | None = _measured()
    # median seconds per call of the baseline (dense, backend auto) in the pairs
    baseline_latency_s: float | None = _measured()
    # 1-minute load average / usable CPUs, the larger of the cell's start and end
    load_per_cpu: float | None = _measured()
    noisy: bool | None = None  # the timing is not to be trusted (noise_reason says why); None when not timed
    noise_reason: str | None = None  # why noisy, or why no paired speed-up (baseline failed, unsupported)
    # -- the second clock on CPU: the timing thread's CPU time (harness.measure.contention; None on CUDA) --
    cpu_latency_s: float | None = _measured()  # median CPU seconds per call
    cpu_speedup: float | None = _measured()  # the paired speed-up on CPU time, with its 95% interval
    cpu_speedup_low: float | None = _measured()
    cpu_speedup_high: float | None = _measured()
    cpu_share: float | None = _measured()  # CPU seconds / wall seconds over the timed blocks (about 1 when quiet)
    contended: bool | None = None  # cpu_share < CONTENDED_SHARE: the machine took the cores away; None when not timed
    peak_memory_bytes: int | None = _measured()  # beyond the inputs
    memory_method: str | None = None
    state_bytes: int | None = _measured()  # decode: bytes of the state after the N-token context (capacity held)
    state_live_bytes: int | None = _measured()  # decode: of which live, what a step reads (a KV cache's K/V so far)
    # decode: what the steps of a variant with a decode_backend ran: "native" (its hand-written kernel), "compiled" (one
    # AOTInductor kernel) or "eager", with why not the kernel or the compile; None: one way to step (variants._decode_step)
    decode_step: str | None = None
    # K and V as held (Cell.kv_dtype, harness.measure.kv_quant): prefill attention cells' stored K and V (values and
    # scales); a decode cell's cache is its state_bytes
    kv_bytes: int | None = _measured()
    # quantization's own error: rel L2 of dequantize(quantize(K)) against K (a decode cell's context), and of V; None
    # for kv_dtype none
    k_quant_rel_l2: float | None = _measured()
    v_quant_rel_l2: float | None = _measured()
    # int8 scores (Cell.scores_dtype, harness.measure.scores_quant): the integer matmul that summed them
    # (torch._int_mm), and their own error, rel L2 against the float64 scores of the first 64 queries of each head
    # over all M keys (masked ones too) of the K as given (before a kv_dtype store); None for scores_dtype none
    scores_kernel: str | None = None
    scores_quant_rel_l2: float | None = _measured()
    # a layer cell's blocks' own weights as held (norms and projections; int8-dynamic: packed int8 values, scales, biases;
    # harness.measure.layer_quant); None at the attention scope
    weight_bytes: int | None = _measured()
    flops: int | None = _measured()  # analytic, what the backend executes, forward or forward+backward per mode
    useful_flops: int | None = _measured()  # the same for the algorithm's useful work (a band's pairs, not its blocks)
    tflops: float | None = _measured()
    # -- held against the machine's measured limits (harness.measure.roofline; env.json "limits") --
    bytes_moved: int | None = _measured()  # the least bytes a call moves: inputs, output, decode state (per token)
    bytes_per_s: float | None = _measured()  # bytes_moved / latency_s
    pct_of_compute_peak: float | None = _measured()  # executed FLOP/s over the measured matmul peak, in %
    pct_of_bandwidth: float | None = _measured()  # bytes_per_s over the measured copy bandwidth, in %
    impossible: str | None = None  # why a number is above a measured limit (never a winner); None: within them
    rel_l2_error: float | None = _measured()
    max_abs_error: float | None = _measured()
    cosine: float | None = _measured()  # mean over sampled rows
    error_rows: int | None = _measured()
    # share of the exact top-8 keys the variant's attention_weights also ranks top-8 (harness.measure.weights); None
    # where the variant gives no weights
    topk_recall: float | None = _measured()
    # baselines on the same inputs and sampled rows (prefill attention cells): harness.measure.reference.baseline_errors
    uniform_rel_l2_error: float | None = _measured()  # uniform attention: the mean of v over the visible keys
    uniform_cosine: float | None = _measured()
    zero_rel_l2_error: float | None = _measured()  # a zero output (1 unless the exact output is zero)
    grad_rel_l2_q: float | None = _measured()
    grad_rel_l2_k: float | None = _measured()
    grad_rel_l2_v: float | None = _measured()
    # -- a layer cell's gradients (train; harness.measure.layer_accuracy): of x, and the worst of the blocks' weights --
    grad_rel_l2_x: float | None = _measured()
    grad_rel_l2_params: float | None = _measured()
    grad_check_seq_len: int | None = None  # N of the gradient check (a layer's: <= 1024 first tokens, <= 4 rows)
    setup_s: float | None = _measured()  # compilation, block masks: outside the timed region
    calibration_s: float | None = _measured()
    calibration: dict[str, Any] | None = None  # the calibration report
    # relative L2 error of the fitted variant's outputs on its calibration batches, and on held-out calibration seeds
    calibration_train_error: float | None = _measured()
    calibration_heldout_error: float | None = _measured()
    tuning_s: float | None = _measured()  # seconds of the error-budget search (calibrations and scoring included)
    tuning: dict[str, Any] | None = None  # the search: knob, range, seeds, {value: error} tried
    started_at: str | None = None  # ISO time
    wall_s: float | None = _measured()  # the whole cell
    schema_version: int = SCHEMA_VERSION

    def __getattr__(self, name: str) -> Any:  # only for names that are not the row's own: the cell's fields
        if name in CELL_FIELDS and "cell" in self.__dict__:
            return getattr(self.cell, name)
        close = [] if name.startswith("_") else get_close_matches(name, ROW_FIELDS, n=1)  # copy, pickle probe dunders
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise AttributeError(f"{type(self).__name__} has no field {name!r}{hint}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Row":
        """A row from a complete JSON object (its cell's fields present); keys outside the schema are refused."""
        record = row_record(data)
        own = {name: record[name] for name in _OWN_FIELDS if name in data}
        return cls(cell=Cell.from_dict(record), **own)

    def to_dict(self) -> dict[str, Any]:
        """Every column, in order, JSON-safe (non-finite floats become None)."""
        values = {**self.cell.fields(), **{name: getattr(self, name) for name in _OWN_FIELDS}}
        return {name: json_safe(values[name]) for name in ROW_FIELDS}

    def update(self, **fields: Any) -> "Row":
        """Set fields by name (a cell field replaces the cell's value; unknown names are refused) and return the row."""
        _refuse_unknown(fields)
        cell_fields = {k: v for k, v in fields.items() if k in CELL_FIELDS}
        if cell_fields:
            self.cell = dataclasses.replace(self.cell, **cell_fields)
        for name, value in fields.items():
            if name not in CELL_FIELDS:
                setattr(self, name, value)
        return self


_OWN_FIELDS = tuple(f.name for f in dataclasses.fields(Row) if f.name != "cell")
ROW_FIELDS = ("run_id", "cell_id") + CELL_FIELDS + tuple(f for f in _OWN_FIELDS if f not in ("run_id", "cell_id"))
NUMERIC_FIELDS = tuple(f.name for f in dataclasses.fields(Row) if f.metadata.get("numeric"))


def row_record(data: Mapping[str, Any]) -> dict[str, Any]:
    """A row given as a mapping (complete or not), in column order with every column present (None where absent),
    JSON-safe; keys outside the schema are refused (ValueError names them)."""
    _refuse_unknown(data)
    record = {name: json_safe(data.get(name)) for name in ROW_FIELDS}
    record["schema_version"] = data.get("schema_version", SCHEMA_VERSION)
    return record


def _refuse_unknown(data: Mapping[str, Any]) -> None:
    unknown = set(data) - set(ROW_FIELDS)
    if unknown:
        raise ValueError(f"row has fields outside schema {SCHEMA_VERSION}: {sorted(unknown)}")
