"""The schema the whole harness shares: a Cell (what is measured; a Row, in harness.row, is what was measured).

Every field list is derived from these dataclasses, never typed again: CELL_FIELDS, ROW_FIELDS
(rows.jsonl and rows.csv columns, in this order) and NUMERIC_FIELDS (held as floats by readers).
Rows travel between processes and live on disk as plain JSON objects (``Row.to_dict()``,
``Row.from_dict()``); schema_version 1 rows written by earlier versions read back unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
from dataclasses import MISSING, dataclass
from typing import Any, Mapping, Sequence

from harness.error_metrics import budget_label
from harness.cell_fields import ROLES, CellField, eq_text, cell_field as _field  # noqa: F401 - ROLES, CellField re-exported
from harness.entries import added_fields, config_label, length_fields, searched_fields

SCHEMA_VERSION = 1
# unreachable: no knob value meets the budget; fit_timeout: the search or calibration ran past fit_timeout_s (no verdict)
STATUSES = (
    "ok",
    "oom",
    "unsupported",
    "error",
    "nonfinite",
    "timeout",
    "unreachable",
    "fit_timeout",
)
# the variant every other one is compared with (paired timing, ratios, the answer), at its default config
BASELINE = "dense"
NOT_RUN_PREFIX = "not run"  # reason of a cell skipped after an oom/timeout at a shorter N of its series


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One measurement: a variant with its config on one shape, dtype, device, causal setting, mode, phase, scope and inputs.

    Field order is the planning order (outermost first) and the column order of rows; each field's CellField
    (its metadata) says what it is. Decode cells are always causal.
    """

    variant: str = _field(role="variant", caches=("fit",))  # registry name
    # asdict of the validated config (overrides applied)
    config: dict[str, Any] = _field(role="variant", compare=False, legacy={}, caches=("fit",))
    seq_len: int = _field(role="length", text=eq_text("N"), cast=int, caches=("inputs", "fit", "baseline"))  # N
    kv_len: int = _field(
        role="length", text=eq_text("M"), follows="seq_len", cast=int, caches=("inputs", "baseline")
    )  # M (= N: self-attention)
    # "cpu" | "cuda" (the type; the index is a run setting)
    device: str = _field(
        role="setting", text=lambda v, _: f"on {v}", legacy="cpu", matched=False, caches=("inputs", "fit", "baseline")
    )
    batch: int = _field(role="setting", text=eq_text("B"), caches=("inputs", "fit", "baseline"))  # B
    heads: int = _field(role="setting", text=eq_text("H"), caches=("inputs", "fit", "baseline"))  # H (query heads)
    # "name" or "name:param=value"
    inputs: str = _field(
        role="inputs",
        axis="inputs",
        text=lambda v, _: f"inputs {v}",
        legacy="gaussian",
        caches=("inputs", "fit", "baseline"),
    )
    # "float32" | "bfloat16" | "float16"
    dtype: str = _field(  # a fit is made in float32 and cast: not in its key
        role="setting", axis="dtypes", text=lambda v, _: str(v), legacy="float32", caches=("inputs", "baseline")
    )
    head_dim: int = _field(
        role="setting", axis="head_dims", text=eq_text("D"), caches=("inputs", "fit", "baseline")
    )  # D
    causal: bool = _field(
        role="setting",
        axis="causals",
        text=lambda v, _: "causal" if v else "non-causal",
        legacy=False,
        cast=bool,
        caches=("fit", "baseline"),
    )
    mode: str = _field(
        role="setting", axis="modes", text=lambda v, _: str(v), legacy="forward", caches=("baseline",)
    )  # "forward" | "train"
    # "prefill": one call on N tokens | "decode": tokens generated one at a time after N
    phase: str = _field("prefill", role="setting", axis="phases", text=lambda v, _: str(v), added=True)
    # "attention": the variant alone | "layer": a pre-norm transformer block around it
    scope: str = _field("attention", role="setting", axis="scopes", text=lambda v, _: str(v), added=True)
    # H_kv (key/value heads, H % H_kv == 0); None: = heads
    kv_heads: int | None = _field(
        None,
        role="setting",
        axis="kv_heads",
        text=eq_text("H_kv"),
        follows="heads",
        added=True,
        cast=int,
        caches=("inputs", "fit", "baseline"),
    )
    # mean fraction of key positions that are padding (ragged over the batch)
    padding: float = _field(  # the mask is made beside the inputs; a fit is made unpadded
        0.0, role="setting", axis="paddings", text=eq_text("pad"), added=True, cast=float, caches=("baseline",)
    )
    # activations recomputed in the backward pass (torch.utils.checkpoint): "none" | "attention" | "layer" (the block)
    recompute: str = _field(
        "none", role="setting", axis="recomputes", text=eq_text("recompute"), added=True, caches=("baseline",)
    )
    # "fp32" | "autocast-bf16" | "autocast-fp16": torch.autocast around a train cell's forward, float32 inputs and
    # parameters | "int8-dynamic": a forward layer cell's projections dynamically quantized (harness.measure.layer_quant)
    precision: str = _field(
        "fp32", role="setting", axis="precisions", text=lambda v, _: str(v), added=True, caches=("baseline",)
    )
    # K/V stored quantized (harness.measure.kv_quant; forward attention cells): "none" | "int8" | "fp8_e4m3"; a series
    # field: dense with an int8 cache is the series "dense[kv=int8]", beside plain dense (the baseline) in every table
    kv_dtype: str = _field("none", role="variant", axis="kv_dtypes", text=eq_text("kv"), added=True)
    # how the variant computes its scores (forward prefill attention cells, harness.cell_rules): "none" (as it does) |
    # "int8" (from Q and K quantized to int8, a variant declaring Capabilities.int8_scores); a series field too:
    # "dense[scores=int8]"
    scores_dtype: str = _field("none", role="variant", axis="scores_dtypes", text=eq_text("scores"), added=True)
    # blocks in a layer cell's stack (SweepSpec.layer_depth; 1 at the attention scope): "recompute layer" keeps the
    # activations of one block at a time, so its saving grows with the depth
    layer_depth: int = _field(1, role="setting", text=eq_text("L"), added=True, cast=int)
    seed: int = _field(
        role="seed", text=eq_text("seed"), matched=False, caches=("inputs", "fit", "baseline")
    )  # evaluation seed
    # An error-budget cell: the variant's quality knob is searched (on calibration seeds) for the cheapest
    # value whose error_metric meets this budget, and that config is measured. None: config as given.
    matched_budget: float | None = _field(
        None, role="budget", added=True, text=lambda v, values: budget_label(v, values.get("error_metric") or "rel_l2")
    )
    # the metric matched_budget bounds (ERROR_METRICS); ignored without a budget (its text is the budget's)
    error_metric: str = _field("rel_l2", role="budget", added=True)

    def __post_init__(self) -> None:
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)

    @property
    def cell_id(self) -> str:
        """A stable hash of every field: the same cell in any run, any order, gets the same id.

        Fields added later (CellField.added) at their default are left out, so a cell that older versions could
        describe keeps the id they gave it. A cell matched to an error budget leaves its quality knob out of its
        config: its row (with the config found) has its id.
        """
        return hashlib.sha256(canonical(identity(self.fields())).encode()).hexdigest()[:16]

    def fields(self) -> dict[str, Any]:
        """The cell's fields as they go into its row."""
        return {name: getattr(self, name) for name in CELL_FIELDS}

    def cache_key(self, cache: str, **values: Any) -> tuple[tuple[str, Any], ...]:
        """The cell's key in a per-process cache ("inputs", "fit", "baseline"): the fields that declare it (CellField.caches),
        `values` in place of some (a decode cell's longer inputs, a fit's own length, the device with its index)."""
        return tuple((name, values.get(name, getattr(self, name))) for name in caches_of(cache))

    @property
    def series_key(self) -> str:
        """Everything but the lengths: cells of one series differ only in N (and M, and the config's length fields)."""
        data = {k: v for k, v in identity(self.fields()).items() if k not in fields_of("length")}
        data["config"] = {k: v for k, v in data["config"].items() if k not in length_fields(self.variant)}
        return canonical(data)

    @property
    def label(self) -> str:
        """A short human label: 'dense N=4096 forward float32 D=64 causal decode H_kv=2 rel_l2<=0.05 gaussian' (causal
        and every other field named only where it differs from its default)."""
        values = self.fields()
        named = ("variant", "config", "seq_len", "mode", "dtype", "head_dim", "causal", "device", "batch", "heads")
        named += ("inputs", "seed")
        return " ".join(
            [
                config_label(self.variant, self.config),
                *describe(values, ("seq_len", "mode", "dtype", "head_dim")),
                *(["causal"] if self.causal else []),
                *describe(values, [k for k in CELL_FIELDS if k not in named]),
                self.inputs,
            ]
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Cell":
        """A cell from its fields (a row, or the JSON a worker process receives); fields an older row lacks take their defaults."""
        return cls(**{name: data[name] for name in CELL_FIELDS if data.get(name) is not None or not _has_default(name)})


CELL_FIELDS = tuple(f.name for f in dataclasses.fields(Cell))
DECLARED: dict[str, CellField] = {f.name: f.metadata["cell_field"] for f in dataclasses.fields(Cell)}


def fields_of(*roles: str) -> tuple[str, ...]:
    """Cell fields of the given roles, in field order: fields_of("setting") are the report's setting keys."""
    return tuple(name for name, s in DECLARED.items() if s.role in roles)


def series_suffix(values: Mapping[str, Any]) -> str:
    """'[kv=int8]': a cell's series fields (role "variant") beyond its variant and config, away from their defaults;
    '' for a plain series (the baseline's among them)."""
    parts = describe(values, [name for name in fields_of("variant") if name not in ("variant", "config")])
    return f"[{','.join(parts)}]" if parts else ""


def caches_of(cache: str) -> tuple[str, ...]:
    """Cell fields whose values key the per-process cache `cache` (CellField.caches), in field order."""
    return tuple(name for name, s in DECLARED.items() if cache in s.caches)


def default_of(name: str, values: Mapping[str, Any]) -> Any:
    """A field's value when unset: the field it follows (kv_heads: heads), else its dataclass default (MISSING if none)."""
    follows = DECLARED[name].follows
    return values.get(follows) if follows else DEFAULTS[name]


def legacy_value(name: str, values: Mapping[str, Any]) -> Any:
    """What a row that did not record `name` means (the reader's fill-in), None when nothing can be assumed."""
    legacy = DECLARED[name].legacy
    if legacy is not None:
        return copy.copy(legacy)
    default = default_of(name, values)
    return None if default is MISSING else default


def identity(values: Mapping[str, Any], *, matching: bool = False) -> dict[str, Any]:
    """The fields that identify a cell (a Cell's fields, or a row's), as they go into its id.

    Fields added later (CellField.added, and a variant's config fields declared added) at their default are left out,
    so older ids hold; a matched cell's config
    leaves its quality knob out (the search chooses it: an outcome, not the cell). `matching`: compare's key, which
    also leaves out what two runs may differ in on purpose (CellField.matched False: the seed, the device).
    """
    out = {name: json_safe(values.get(name)) for name in CELL_FIELDS}
    if isinstance(out["config"], dict):  # config fields added later (entries.added_fields) at their default: left out
        added = added_fields(str(values["variant"]))
        out["config"] = {k: v for k, v in out["config"].items() if k not in added or v != added[k]}
    if out["matched_budget"] is not None and isinstance(out["config"], dict):  # json_safe: a frame's NaN is no budget
        searched = searched_fields(str(values["variant"]))  # the knob, and what is searched with it (sinks)
        out["config"] = {k: v for k, v in out["config"].items() if k not in searched}
    for name in CELL_FIELDS:
        declared = DECLARED[name]
        if (declared.added and out[name] == json_safe(default_of(name, values))) or (matching and not declared.matched):
            del out[name]
    return out


def match_key(values: Mapping[str, Any]) -> str:
    """What compare matches two runs' cells on: the id's fields but the seed, the device and a searched knob."""
    return canonical(identity(values, matching=True))


def describe(values: Mapping[str, Any], names: Sequence[str], *, skip_defaults: bool = True) -> list[str]:
    """The short text of each named field ('float32', 'causal', 'H=8', 'pad=0.25', 'inputs local', 'rel_l2<=0.05'), in
    the order given; skip_defaults leaves out a field at its default (prefill, attention, H_kv = H, M = N, no padding,
    no budget). The one renderer of a cell's settings: labels, titles, captions and the terminal summary use it."""
    parts = []
    for name in names:
        declared, value = DECLARED[name], values.get(name)
        if declared.text is None or (skip_defaults and _at_default(name, value, values)):
            continue
        parts.append(declared.text(value, values))
    return parts


def _at_default(name: str, value: Any, values: Mapping[str, Any]) -> bool:
    if value is None:
        return True
    default = default_of(name, values)
    return default is not MISSING and value == default


def _has_default(name: str) -> bool:
    f = _FIELDS[name]
    return f.default is not MISSING or f.default_factory is not MISSING


def canonical(data: Any) -> str:
    """A canonical JSON string (sorted keys), so equal dicts compare equal: ids, series keys, match keys, configs."""
    return json.dumps(data, sort_keys=True, default=str)


_FIELDS = {f.name: f for f in dataclasses.fields(Cell)}
# each field's dataclass default (MISSING if none): what a field that follows none is when unset (default_of)
DEFAULTS: dict[str, Any] = {name: f.default for name, f in _FIELDS.items()}


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
