"""State kept between cells of one process: the last inputs (consecutive cells share them), the fits and the paired baseline."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from harness.inputs import QKV, make_inputs, parse_inputs
from harness.measure.guard import changed, checksums
from harness.measure.settings import DTYPES
from harness.schema import BASELINE, Cell


@dataclass
class MeasureContext:
    """Inputs of the last cell (made once, reused by the next cell with the same shape), calibrated variants by key and
    the errors of error-budget searches (harness.measure.tuning)."""

    inputs_key: tuple | None = None
    inputs: QKV | None = None
    # q, k, v's checksums when made (harness.measure.guard): what check_inputs compares after each cell
    inputs_checksums: dict[str, tuple[int, int]] = field(default_factory=dict)
    calibrated: dict[str, tuple[torch.nn.Module, float, dict]] = field(default_factory=dict)
    baselines: dict[tuple, torch.nn.Module] = field(default_factory=dict)  # the built baseline per (device, dtype)
    # its per-call seconds per (inputs key, mode): warm, no re-estimate
    baseline_call_s: dict[tuple, float] = field(default_factory=dict)
    # error-budget searches: knob value -> error, per search key
    tuned: dict[str, dict[int, float]] = field(default_factory=dict)

    def baseline(self, device: torch.device, dtype: str) -> torch.nn.Module:
        """The paired timing's baseline (harness.schema.BASELINE, default config: backend auto), built once per device and dtype."""
        from variants import build_variant

        key = (str(device), dtype)
        if key not in self.baselines:
            self.baselines[key] = build_variant(BASELINE).to(device=device, dtype=DTYPES[dtype]).eval()
        return self.baselines[key]

    def get_inputs(
        self, cell: Cell, device: torch.device, parsed: tuple[str, dict[str, Any]] | None = None, *, extra: int = 0
    ) -> QKV:
        """The cell's evaluation q, k, v (k, v with cell.kv_heads heads); `parsed` is cell.inputs as (name, knobs)
        when the caller has parsed it already; `extra` positions beyond N and M (a decode cell's generated tokens)."""
        name, knobs = parsed if parsed is not None else parse_inputs(cell.inputs)
        key = (
            cell.inputs,
            cell.batch,
            cell.heads,
            cell.kv_heads,
            cell.seq_len + extra,
            cell.kv_len + extra,
            cell.head_dim,
            cell.dtype,
            str(device),
            cell.seed,
        )
        if key != self.inputs_key:
            self.inputs = self.inputs_key = None  # free the old ones before making the new ones
            self.inputs = make_inputs(
                name,
                knobs,
                B=cell.batch,
                H=cell.heads,
                N=cell.seq_len + extra,
                M=cell.kv_len + extra,
                D=cell.head_dim,
                dtype=DTYPES[cell.dtype],
                device=device,
                seed=cell.seed,
                H_kv=cell.kv_heads,
            )
            self.inputs_key = key
            self.inputs_checksums = checksums(self._named_inputs())
        return self.inputs  # type: ignore[return-value]

    def check_inputs(self) -> list[str]:
        """The names of the cached inputs (q, k, v) that differ from when they were made (a variant wrote into them);
        when any does, the cache is dropped so the next cell gets fresh ones. One read of each per call."""
        if self.inputs is None:
            return []
        names = changed(self._named_inputs(), self.inputs_checksums)
        if names:
            self.clear()
        return names

    def _named_inputs(self) -> dict[str, torch.Tensor]:
        return dict(zip(("q", "k", "v"), self.inputs))  # type: ignore[arg-type]

    def clear(self) -> None:
        """Drop the cached inputs (after an OOM, so the next cell starts with free memory)."""
        self.inputs = self.inputs_key = None
        self.inputs_checksums = {}
        self.baseline_call_s.clear()
