"""spec -> cells: the list of measurements a sweep makes, in order. Pure: no device, no registry.

Order: for each input distribution, dtype, head dim, causal setting and mode, lengths ascending,
and at each length every variant. So consecutive cells share their q, k, v (generated once),
and a variant meets its lengths in ascending order (an OOM at N marks longer N as OOM untried).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from harness.spec import SweepSpec

# Fields of a cell, in row order (docs/DESIGN.md "Row schema", identity part).
CELL_FIELDS = ("variant", "config", "seq_len", "kv_len", "batch", "heads", "head_dim", "dtype", "device", "causal", "mode", "inputs", "seed")


@dataclass(frozen=True)
class Cell:
    """One measurement: a variant with its config on one shape, dtype, device, causal setting, mode and inputs."""

    variant: str  # registry name
    config: dict[str, Any] = field(compare=False)  # asdict of the validated config (overrides applied)
    seq_len: int  # N
    kv_len: int  # M (= N: self-attention)
    batch: int  # B
    heads: int  # H
    head_dim: int  # D
    dtype: str  # "float32" | "bfloat16" | "float16"
    device: str  # "cpu" | "cuda" (the device type; the index is a run setting)
    causal: bool
    mode: str  # "forward" | "train"
    inputs: str  # input distribution, "name" or "name:knob=value"
    seed: int  # evaluation seed

    @property
    def cell_id(self) -> str:
        """A stable hash of the cell's fields: the same cell in any run, any order, gets the same id."""
        payload = json.dumps(self.fields(), sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def fields(self) -> dict[str, Any]:
        """The cell's identity fields as they go into its row."""
        return {name: getattr(self, name) for name in CELL_FIELDS}

    @property
    def series_key(self) -> str:
        """Everything but the lengths: cells of one series differ only in N (and M)."""
        data = {k: v for k, v in self.fields().items() if k not in ("seq_len", "kv_len")}
        return json.dumps(data, sort_keys=True, default=str)

    @property
    def label(self) -> str:
        """A short human label: 'dense N=4096 forward float32 D=64 causal gaussian'."""
        defaults = _default_config(self.variant)
        overrides = ",".join(f"{k}={v}" for k, v in sorted(self.config.items()) if defaults.get(k, object()) != v)
        name = f"{self.variant}({overrides})" if overrides else self.variant
        causal = " causal" if self.causal else ""
        return f"{name} N={self.seq_len} {self.mode} {self.dtype} D={self.head_dim}{causal} {self.inputs}"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Cell":
        """A cell from its fields (e.g. a row, or the JSON an isolated subprocess receives)."""
        return cls(**{name: data[name] for name in CELL_FIELDS})


def plan(spec: SweepSpec) -> list[Cell]:
    """Every cell of the spec, in measuring order, without duplicates."""
    cells: dict[str, Cell] = {}
    device = spec.device_type
    for inputs in spec.inputs:
        for dtype in spec.dtypes:
            for head_dim in spec.head_dims:
                for causal in spec.causal:
                    for mode in spec.modes:
                        for seq_len in sorted(spec.seq_lens):
                            for entry in spec.variants:
                                cell = Cell(
                                    variant=entry.name, config=dict(entry.config), seq_len=seq_len, kv_len=seq_len,
                                    batch=spec.batch, heads=spec.heads, head_dim=head_dim, dtype=dtype, device=device,
                                    causal=causal, mode=mode, inputs=inputs, seed=spec.seed,
                                )
                                cells.setdefault(cell.cell_id, cell)
    return list(cells.values())


def _default_config(variant: str) -> dict[str, Any]:
    """The variant's default config (for labels: only the fields a cell changes are shown); {} if unknown."""
    try:
        from variants import get_variant

        return get_variant(variant).config().to_dict()
    except (ValueError, TypeError):
        return {}


def cell_to_json(cell: Cell) -> str:
    """The cell as JSON (for an isolated subprocess)."""
    return json.dumps(asdict(cell), default=str)
