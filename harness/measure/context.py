"""State kept between cells of one process: the last inputs (consecutive cells share them), the fits and the paired baseline.

What a variant cannot change for anyone else: its inputs. They are made once and shared by consecutive cells, so a
variant that writes into q, k or v in place would falsify every later row and its own reference. Copying them for every
call would put a copy inside the timed loop; instead each tensor's checksum is taken when the inputs are made and
compared after every cell: one read of q, k and v per cell (the cell's own calls read them dozens of times). A change
makes the cell an `error` row naming the tensor, and the inputs are made again for the next cell.

The checksum is two integer sums over the tensor's bits (plain, and weighted by the position within a chunk of 2**22
elements, wrapping in the element's size, times the chunk's number), exact and the same in any reduction order: any
change of values is seen, and so is a permutation unless it swaps elements of equal weight, which no in-place
arithmetic does.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import torch
from torch import Tensor

from harness.inputs import QKV, get_inputs, make_inputs, parse_inputs
from harness.inputs.padding import padding_mask
from harness.measure.settings import DTYPES, MeasureSettings
from harness.schema import BASELINE, Cell
from variants import NotSupportedError, build_variant

_CHUNK = 1 << 22  # elements summed at a time: bounds the int64 temporaries (32 MiB) on any device
_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


class InputsChanged(Exception):
    """The variant wrote into the inputs it was given."""


def checksum(t: Tensor) -> tuple[int, int]:
    """(sum, position-weighted sum) of the tensor's bits, read as integers of its element size: products wrap in that
    size, sums accumulate in int64 (torch promotes), so no widened copy is made. Equal exactly when the bits are equal
    (but for swaps of equally weighted positions)."""
    flat = t.detach().reshape(-1).view(_BITS[t.element_size()])
    weights = _weights(t.device, flat.dtype)
    plain = weighted = 0
    for index, start in enumerate(range(0, flat.numel(), _CHUNK)):
        part = flat[start : start + _CHUNK]
        plain += int(part.sum())
        weighted += int((part * weights[: part.numel()]).sum()) * (index + 1)
    return plain, weighted


_WEIGHTS: dict[tuple[str, torch.dtype], Tensor] = {}


def _weights(device: torch.device, dtype: torch.dtype) -> Tensor:
    """1, 2, ..., _CHUNK in `dtype` (wrapping) on `device`, made once: a position's weight within its chunk."""
    key = (str(device), dtype)
    if key not in _WEIGHTS:
        _WEIGHTS[key] = torch.arange(1, _CHUNK + 1, dtype=torch.int64, device=device).to(dtype)
    return _WEIGHTS[key]


def _keep_last(kept: dict[str, Any], key: str, value: Any) -> None:
    """Set kept[key] = value, dropping the oldest entries beyond MEASUREMENTS_KEPT."""
    kept[key] = value
    while len(kept) > MEASUREMENTS_KEPT:
        kept.pop(next(iter(kept)))


def checksums(tensors: dict[str, Tensor]) -> dict[str, tuple[int, int]]:
    """The checksum of each named tensor."""
    return {name: checksum(t) for name, t in tensors.items()}


def changed(tensors: dict[str, Tensor], before: dict[str, tuple[int, int]]) -> list[str]:
    """The names of the tensors whose checksum is no longer the one taken `before`."""
    return [name for name, t in tensors.items() if checksum(t) != before[name]]


def changed_reason(names: list[str]) -> str:
    """The error row's reason for inputs a variant wrote into."""
    listed = ", ".join(names)
    return (
        f"the variant changed its input{'s' if len(names) > 1 else ''} {listed} in place (checksum before and after the "
        "cell differ); a variant must not write into q, k or v: other cells and the reference read them"
    )


class CellInputs(NamedTuple):
    """A cell's evaluation inputs, made once (MeasureContext.cell_inputs) and read by every later stage."""

    parsed: tuple[
        str, dict[str, Any]
    ]  # the input distribution (name, params): calibration inputs are drawn from it too
    q: Tensor  # (B, H, N + extra, D); extra: a decode cell's generated tokens
    k: Tensor  # (B, H_kv, M + extra, D)
    v: Tensor
    kv_mask: Tensor | None  # (B, M), None without padding


def decode_inputs_extra(cell: Cell, settings: MeasureSettings) -> int:
    """Positions a cell's inputs need beyond N: the generated tokens of a decode cell, else none."""
    return settings.decode_steps if cell.phase == "decode" else 0


# A budget cell's measurement of the config its search found: the slots after the search. Another budget of the same
# setting whose search finds the same config takes them (and the outcome) instead of measuring it again.
MEASURED = ("backend", "calibration", "prepared", "errors", "memory", "timing", "flops")


@dataclass(frozen=True)
class Measured:
    """A found config's measurement: the budget cell that made it, its slots (MEASURED) and how it ended."""

    cell_id: str
    slots: dict[str, Any]
    outcome: Any  # harness.measure.phase.Outcome: how the measured cell ended


def measured_key(cell: Cell) -> str:
    """What a found config's measurement depends on: the cell, its config as found, without its budget."""
    return replace(cell, matched_budget=None, error_metric="rel_l2").cell_id


def measured_with(tuning: dict[str, Any] | None) -> str | None:
    """The cell id whose measurement a budget cell took (its search's `measured_with`: shared), else None."""
    return (tuning or {}).get("measured_with")


def shared(measured: Measured, record: Any) -> Any:
    """Fill `record` (the cell's harness.measure.phase.Record) with another budget cell's measurement of the same
    config; its search says whose it is. Returns that measurement's outcome."""
    for slot, value in measured.slots.items():
        setattr(record, slot, value)
    record.search = {**record.search, "tuning": {**record.search["tuning"], "measured_with": measured.cell_id}}
    return measured.outcome


MEASUREMENTS_KEPT = 16  # budget cells' measurements a context keeps (Measured)


@dataclass
class MeasureContext:
    """Inputs of the last cell (made once, reused by the next cell with the same shape), calibrated variants by key and
    the errors of error-budget searches (harness.measure.tuning)."""

    inputs_key: tuple | None = None
    inputs: QKV | None = None
    # q, k, v's checksums when made (checksum above): what check_inputs compares after each cell
    inputs_checksums: dict[str, tuple[int, int]] = field(default_factory=dict)
    calibrated: dict[str, tuple[torch.nn.Module, float, dict]] = field(default_factory=dict)
    baselines: dict[tuple, torch.nn.Module] = field(default_factory=dict)  # the built baseline per (device, dtype)
    # its per-call seconds per (inputs key, mode): warm, no re-estimate
    baseline_call_s: dict[tuple, float] = field(default_factory=dict)
    # error-budget searches: knob value -> error, per search key
    tuned: dict[str, dict[int, float]] = field(default_factory=dict)
    # the last configs budget cells measured (Measured, by measured_key): another budget whose
    # search finds one of them takes its measurement (the budgets of a setting and N are planned one after another)
    measured: dict[str, Any] = field(default_factory=dict)

    # the load while each of those budget cells ran, by its cell id: a row that takes its measurement takes its load
    measured_loads: dict[str, float | None] = field(default_factory=dict)

    def remember(self, key: str, measurement: Any) -> None:
        """Keep a budget cell's measurement under `key`, and only the last MEASUREMENTS_KEPT."""
        _keep_last(self.measured, key, measurement)

    def timed_load(self, cell: Cell, search: dict[str, Any] | None, load: float | None) -> float | None:
        """The load a row reports: for a budget cell that took another's measurement (its search's measured_with)
        the load while that one was timed, so both rows are judged alike; else `load`, kept for such a later row."""
        shared_from = measured_with((search or {}).get("tuning"))
        if shared_from is not None:
            return self.measured_loads.get(shared_from, load)
        if cell.matched_budget is not None:
            _keep_last(self.measured_loads, cell.cell_id, load)
        return load

    def baseline(self, device: torch.device, dtype: str) -> torch.nn.Module:
        """The paired timing's baseline (harness.schema.BASELINE, default config: backend auto), built once per device and dtype."""
        key = (str(device), dtype)
        if key not in self.baselines:
            self.baselines[key] = build_variant(BASELINE).to(device=device, dtype=DTYPES[dtype]).eval()
        return self.baselines[key]

    def cell_inputs(self, cell: Cell, settings: MeasureSettings, device: torch.device) -> CellInputs:
        """The inputs stage: the cell's inputs (get_inputs, a decode cell's generated tokens included) and its padding
        mask; NotSupportedError where its input distribution cannot make them at the cell's shape."""
        parsed = parse_inputs(cell.inputs)  # once per cell: evaluation and calibration inputs share it
        extra = decode_inputs_extra(cell, settings)
        N, M = cell.seq_len + extra, cell.kv_len + extra
        reason = get_inputs(parsed[0]).unsupported_reason(
            N, M, B=cell.batch, H=cell.heads, D=cell.head_dim, H_kv=cell.kv_heads, params=parsed[1]
        )
        if reason:
            raise NotSupportedError(reason)
        q, k, v = self.get_inputs(cell, device, parsed, extra=extra)
        mask = padding_mask(cell.batch, cell.kv_len, cell.padding, seed=cell.seed, device=device)
        return CellInputs(parsed, q, k, v, mask)

    def get_inputs(
        self, cell: Cell, device: torch.device, parsed: tuple[str, dict[str, Any]] | None = None, *, extra: int = 0
    ) -> QKV:
        """The cell's evaluation q, k, v (k, v with cell.kv_heads heads); `parsed` is cell.inputs as (name, params)
        when the caller has parsed it already; `extra` positions beyond N and M (a decode cell's generated tokens)."""
        name, params = parsed if parsed is not None else parse_inputs(cell.inputs)
        key = cell.cache_key("inputs", seq_len=cell.seq_len + extra, kv_len=cell.kv_len + extra, device=str(device))
        if key != self.inputs_key:
            self.inputs = self.inputs_key = None  # free the old ones before making the new ones
            self.inputs = make_inputs(
                name,
                params,
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

    def forget_measurements(self) -> None:
        """Drop the budget cells' measurements: one made while a variant wrote into its inputs serves no later row."""
        self.measured.clear()
        self.measured_loads.clear()

    def _named_inputs(self) -> dict[str, torch.Tensor]:
        return dict(zip(("q", "k", "v"), self.inputs))  # type: ignore[arg-type]

    def clear(self) -> None:
        """Drop the cached inputs (after an OOM, so the next cell starts with free memory)."""
        self.inputs = self.inputs_key = None
        self.inputs_checksums = {}
        self.baseline_call_s.clear()
