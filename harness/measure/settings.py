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
    """How cells are measured; the same for every cell of a run. Each field is the SweepSpec field of that name."""

    device: str = "cpu"  # full device string ("cuda:1"); the row records its type
    time_budget_s: float = 0.25  # seconds of timing per cell
    repeats: int = 2  # at least this many timed calls
    cell_timeout_s: float | None = None  # whole-cell limit
    error_rows: int = 256  # sampled query rows for the accuracy check
    calibration_steps: int = 150  # optimizer steps for learnable variants
    calibration_batches: int = 4  # calibration batches (seeds other than the evaluation's)
    calibration_max_seq_len: int = 256  # calibration length is min(N, this)
    accuracy_reference: str = "full"  # "full": exact softmax | "pattern": the variant's own sparsity pattern
    decode_steps: int = 32  # tokens generated per timed call of a decode cell

    @classmethod
    def from_spec(cls, spec: Any) -> "MeasureSettings":
        """The spec's values of these fields (same names, so a new setting is one field here and one in SweepSpec)."""
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
