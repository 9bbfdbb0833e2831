"""One cell -> one row (harness.row.Row): stages that return what they measured; the only stage on the device.

measure_cell (cell.py) runs a cell's stages (phase.py: inputs, build, error-budget search, calibration, accuracy,
memory, timing paired with the baseline, FLOPs), each returning a typed result kept in its slot of the cell's Record
as it finishes, so a failed cell keeps what the earlier ones measured. The variant's checks run before timing, a fixed number of times
per cell (AttentionVariant.prepare_call for the timed step); the timed calls run its forward alone.
"""

from harness.measure.reference import sample_rows
from harness.measure.calibration import calibration_key, calibration_length
from harness.measure.cell import measure_cell, outcome_row
from harness.measure.context import MeasureContext
from harness.measure.outcome import CellTimeout, classify_exception, is_oom
from harness.measure.settings import CALIBRATION_SEED_OFFSET, DTYPES, MeasureSettings, RunInfo

__all__ = [
    "CALIBRATION_SEED_OFFSET",
    "CellTimeout",
    "DTYPES",
    "MeasureContext",
    "MeasureSettings",
    "RunInfo",
    "calibration_key",
    "calibration_length",
    "classify_exception",
    "is_oom",
    "measure_cell",
    "outcome_row",
    "sample_rows",
]
