"""The schema the whole harness shares: a Cell (what is measured) and a Row (what was measured).

Every field list is derived from these dataclasses, never typed again: CELL_FIELDS, ROW_FIELDS
(rows.jsonl and rows.csv columns, in this order) and NUMERIC_FIELDS (held as floats by readers).
Rows travel between processes and live on disk as plain JSON objects (``Row.to_dict()``,
``Row.from_dict()``); schema_version 1 rows written by earlier versions read back unchanged.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1
STATUSES = ("ok", "oom", "unsupported", "error", "nonfinite", "timeout", "unreachable")  # unreachable: no knob value meets the budget
BASELINE = "dense"  # the variant every other one is compared with (paired timing, ratios, the answer), at its default config
NOT_RUN_PREFIX = "not run"  # reason of a cell skipped after an oom/timeout at a shorter N of its series


# Cell fields added after schema_version 1's first rows, with the value every older row means. A cell
# leaves such a field out of its id payload while it holds that value, so older cell ids (and resumes) stay valid.
CELL_FIELD_DEFAULTS = {"kv_heads": None, "phase": "prefill", "scope": "attention", "padding": 0.0, "matched_budget": None,
                       "error_metric": "rel_l2"}
ERROR_METRICS = ("rel_l2", "cosine")  # what an error budget bounds: relative L2 error, or 1 - cosine similarity
METRIC_NAMES = {"rel_l2": "relative L2 error", "cosine": "1 - cosine similarity"}
PHASES = ("prefill", "decode")
SCOPES = ("attention", "layer")


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One measurement: a variant with its config on one shape, dtype, device, causal setting, mode, phase, scope and inputs."""

    variant: str  # registry name
    config: dict[str, Any] = field(compare=False)  # asdict of the validated config (overrides applied)
    seq_len: int  # N
    kv_len: int  # M (= N: self-attention)
    batch: int  # B
    heads: int  # H (query heads)
    kv_heads: int | None = None  # H_kv (key/value heads, H % H_kv == 0); None: = heads
    head_dim: int  # D
    dtype: str  # "float32" | "bfloat16" | "float16"
    device: str  # "cpu" | "cuda" (the device type; the index is a run setting)
    causal: bool  # decode cells are always causal
    mode: str  # "forward" | "train"
    phase: str = "prefill"  # "prefill": one call on N tokens | "decode": tokens generated one at a time after N
    scope: str = "attention"  # "attention": the variant alone | "layer": a pre-norm transformer block around it
    padding: float = 0.0  # mean fraction of key positions that are padding (ragged over the batch)
    inputs: str  # input distribution, "name" or "name:knob=value"
    seed: int  # evaluation seed
    # An error-budget cell: the variant's quality knob is searched (on calibration seeds) for the cheapest
    # value whose error_metric meets this budget, and that config is measured. None: config as given.
    matched_budget: float | None = None
    error_metric: str = "rel_l2"  # the metric matched_budget bounds (ERROR_METRICS); ignored without a budget

    def __post_init__(self) -> None:
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)

    @property
    def cell_id(self) -> str:
        """A stable hash of every field: the same cell in any run, any order, gets the same id.

        Fields of CELL_FIELD_DEFAULTS at their default (kv_heads equal to heads) are left out, so a
        cell that older versions could describe keeps the id they gave it. A cell matched to an error
        budget leaves its quality knob out of its config: its row (with the config found) has its id.
        """
        payload = json.dumps(self._id_fields(), sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def _id_fields(self) -> dict[str, Any]:
        fields = self.fields()
        if self.matched_budget is not None:  # the search chooses the knob: its value is an outcome, not the cell's identity
            from harness.entries import knob_field

            knob = knob_field(self.variant)
            fields["config"] = {k: v for k, v in self.config.items() if k != knob}
        if fields["kv_heads"] == self.heads:
            del fields["kv_heads"]
        for name in ("phase", "scope", "padding", "matched_budget", "error_metric"):
            if fields[name] == CELL_FIELD_DEFAULTS[name]:
                del fields[name]
        return fields

    def fields(self) -> dict[str, Any]:
        """The cell's identity fields as they go into its row."""
        return {name: getattr(self, name) for name in CELL_FIELDS}

    @property
    def series_key(self) -> str:
        """Everything but the lengths: cells of one series differ only in N (and M, and the config's length fields)."""
        from harness.entries import length_fields

        data = {k: v for k, v in self._id_fields().items() if k not in ("seq_len", "kv_len")}
        data["config"] = {k: v for k, v in data["config"].items() if k not in length_fields(self.variant)}
        return json.dumps(data, sort_keys=True, default=str)

    @property
    def label(self) -> str:
        """A short human label: 'dense N=4096 forward float32 D=64 causal gaussian'."""
        from harness.entries import config_label

        causal = " causal" if self.causal else ""
        extra = "".join([
            f" H_kv={self.kv_heads}" if self.kv_heads != self.heads else "",
            f" {self.phase}" if self.phase != "prefill" else "",
            f" {self.scope}" if self.scope != "attention" else "",
            f" pad={self.padding:g}" if self.padding else "",
            f" {budget_label(self.matched_budget, self.error_metric)}" if self.matched_budget is not None else "",
        ])
        return (f"{config_label(self.variant, self.config)} N={self.seq_len} {self.mode} {self.dtype} D={self.head_dim}"
                f"{causal}{extra} {self.inputs}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Cell":
        """A cell from its fields (a row, or the JSON a worker process receives); newer fields an older row lacks take their defaults."""
        values = {name: data[name] for name in CELL_FIELDS if name not in CELL_FIELD_DEFAULTS}
        values.update({name: data[name] for name in CELL_FIELD_DEFAULTS if data.get(name) is not None})
        return cls(**values)


def budget_label(budget: float, metric: str = "rel_l2", *, ascii: bool = True) -> str:
    """How a budget reads: 'rel_l2<=0.05', '1-cos<=0.01' (1 - cosine similarity); 'rel_l2 ≤ 0.05' for people (ascii False)."""
    name = "1-cos" if metric == "cosine" else "rel_l2"
    return f"{name}<={budget:g}" if ascii else f"{name} ≤ {budget:g}"


def _measured(default: Any = None) -> Any:
    """A measurement column: missing values are NaN in DataFrames (readers coerce it to float)."""
    return field(default=default, metadata={"numeric": True})


@dataclass
class Row:
    """One row of rows.jsonl: the cell, the outcome and every measurement (None when not measured).

    Field order is the column order on disk (docs/DESIGN.md "Row schema").
    """

    run_id: str | None = None
    cell_id: str | None = None
    variant: str | None = None
    config: dict[str, Any] | None = None
    backend: str | None = None  # the backend that ran, resolved from "auto"
    sdpa_kernel: str | None = None  # the SDPA kernel torch ran (flash, efficient, cudnn, math); None: no SDPA op ran
    seq_len: int | None = None
    kv_len: int | None = None
    batch: int | None = None
    heads: int | None = None
    kv_heads: int | None = None  # H_kv
    head_dim: int | None = None
    dtype: str | None = None
    device: str | None = None
    device_name: str | None = None
    host: str | None = None
    causal: bool | None = None
    mode: str | None = None
    phase: str | None = None  # "prefill" | "decode"
    scope: str | None = None  # "attention" | "layer"
    padding: float | None = None  # mean padded fraction of key positions
    inputs: str | None = None
    seed: int | None = None
    matched_budget: float | None = None  # the error budget the config was searched for (None: the config as given)
    error_metric: str | None = None  # what matched_budget bounds: "rel_l2" or "cosine" (1 - cosine similarity)
    threads: int | None = None
    status: str | None = None  # one of STATUSES
    reason: str | None = None
    latency_s: float | None = _measured()  # median seconds per call
    latency_p20_s: float | None = _measured()
    latency_p80_s: float | None = _measured()
    repeats: int | None = _measured()  # timed calls
    # -- paired timing and noise (docs/timing.md); absent from older schema-1 rows, which load as None --
    speedup: float | None = _measured()  # median over ABAB pairs of baseline/variant per-call time; None when not paired
    speedup_low: float | None = _measured()  # 95% bootstrap interval of that median (fixed seed)
    speedup_high: float | None = _measured()
    baseline_latency_s: float | None = _measured()  # median seconds per call of the baseline (dense, backend auto) in the pairs
    load_per_cpu: float | None = _measured()  # 1-minute load average / usable CPUs, the larger of the cell's start and end
    noisy: bool | None = None  # the timing is not to be trusted (noise_reason says why); None when not timed
    noise_reason: str | None = None  # why noisy, or why no paired speed-up (baseline failed, unsupported)
    peak_memory_bytes: int | None = _measured()  # beyond the inputs
    memory_method: str | None = None
    state_bytes: int | None = _measured()  # decode: bytes of the state after the N-token context
    flops: int | None = _measured()  # analytic, forward or forward+backward per mode
    tflops: float | None = _measured()
    rel_l2_error: float | None = _measured()
    max_abs_error: float | None = _measured()
    cosine: float | None = _measured()  # mean over sampled rows
    error_rows: int | None = _measured()
    grad_rel_l2_q: float | None = _measured()
    grad_rel_l2_k: float | None = _measured()
    grad_rel_l2_v: float | None = _measured()
    grad_check_seq_len: int | None = None
    setup_s: float | None = _measured()  # compilation, block masks: outside the timed region
    calibration_s: float | None = _measured()
    calibration: dict[str, Any] | None = None  # the calibration report
    tuning_s: float | None = _measured()  # seconds of the error-budget search (calibrations and scoring included)
    tuning: dict[str, Any] | None = None  # the search: knob, range, seeds, {value: error} tried
    started_at: str | None = None  # ISO time
    wall_s: float | None = _measured()  # the whole cell
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def for_cell(cls, cell: Cell, **fields: Any) -> "Row":
        """A row with the cell's identity (and cell_id) filled in."""
        return cls(**cell.fields(), cell_id=cell.cell_id, **fields)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Row":
        """A row from a JSON object; keys outside the schema are refused (ValueError names them)."""
        unknown = set(data) - set(ROW_FIELDS)
        if unknown:
            raise ValueError(f"row has fields outside schema {SCHEMA_VERSION}: {sorted(unknown)}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """Every field, in column order, JSON-safe (non-finite floats become None)."""
        return {name: json_safe(getattr(self, name)) for name in ROW_FIELDS}

    def update(self, **fields: Any) -> "Row":
        """Set fields by name (refusing unknown ones) and return the row."""
        unknown = set(fields) - set(ROW_FIELDS)
        if unknown:
            raise ValueError(f"row has fields outside schema {SCHEMA_VERSION}: {sorted(unknown)}")
        for name, value in fields.items():
            setattr(self, name, value)
        return self


CELL_FIELDS = tuple(f.name for f in dataclasses.fields(Cell))
ROW_FIELDS = tuple(f.name for f in dataclasses.fields(Row))
NUMERIC_FIELDS = tuple(f.name for f in dataclasses.fields(Row) if f.metadata.get("numeric"))


def empty_row() -> dict[str, Any]:
    """A row dict with every schema field None (schema_version set)."""
    return Row().to_dict()


def json_safe(value: Any) -> Any:
    """JSON-safe raw values: non-finite floats become None (the row's status says why)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return json_safe(value.item())
    return value
