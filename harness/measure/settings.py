"""How cells are measured (one MeasureSettings per run, derived from the spec) and the run fields every row carries."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
CALIBRATION_SEED_OFFSET = 1_000_003  # calibration batch i uses seed + this + i: never an evaluation seed


@dataclass(frozen=True)
class MeasureSettings:
    """How cells are measured; the same for every cell of a run.

    Each field is the SweepSpec knob of that name (from_spec copies them by name), and its default is the value of the
    CPU default spec (harness/spec/cpu.toml, else the knob's own default), so MeasureSettings() measures as a CPU sweep
    does; tests/harness/measure/test_settings.py holds the two equal. A new setting is therefore a field here, a knob
    of the same name in SweepSpec, and its value in cpu.toml and gpu.toml where the knob has no default.
    """

    device: str = "cpu"  # full device string ("cuda:1"); the row records its type
    time_budget_s: float = 0.25  # seconds of timing per cell
    repeats: int = 3  # at least this many timed calls
    cell_timeout_s: float | None = 120.0  # whole-cell limit, the search and calibration not counted (None: none)
    fit_timeout_s: float | None = 600.0  # a cell's search and calibration together (None: none)
    error_rows: int = 256  # sampled query rows for the accuracy check
    calibration_steps: int = 50  # optimizer steps for learnable variants
    calibration_batches: int = 16  # calibration batches (seeds other than the evaluation's)
    calibration_max_seq_len: int = 256  # calibration length is min(N, this)
    error_budgets: tuple[float, ...] = (
        0.05,
        0.1,
    )  # the run's budgets: a search's fit stops once it cannot reach the largest
    accuracy_reference: str = "full"  # "full": exact softmax | "pattern": the variant's own sparsity pattern
    decode_steps: int = 32  # tokens generated per timed call of a decode cell

    @classmethod
    def from_spec(cls, spec: Any) -> "MeasureSettings":
        """The spec's values of these fields (the same names)."""
        return cls(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(cls)})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class RunInfo:
    """The run-level identity fields every row carries."""

    run_id: str
    device_name: str
    host: str
    threads: int
    accuracy_reference: str = "full"  # what the run's errors are measured against (MeasureSettings.accuracy_reference)
    limits: dict[str, Any] | None = (
        None  # the machine's measured limits (harness.measure.limits.run_limits); None: none
    )
