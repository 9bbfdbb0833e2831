"""One cell -> one row (harness.schema.Row): orchestration, timing, accuracy, memory, calibration; the only stage on the device."""
from harness.measure.accuracy import sample_rows
from harness.measure.calibration import calibration_key, calibration_length
from harness.measure.cell import measure_cell
from harness.measure.context import MeasureContext
from harness.measure.outcome import CellTimeout, classify_exception, is_oom, outcome_row
from harness.measure.settings import CALIBRATION_SEED_OFFSET, DTYPES, MeasureSettings, RunInfo

__all__ = ["CALIBRATION_SEED_OFFSET", "CellTimeout", "DTYPES", "MeasureContext", "MeasureSettings", "RunInfo", "calibration_key",
           "calibration_length", "classify_exception", "is_oom", "measure_cell", "outcome_row", "sample_rows"]
