"""A measured cell timed again in another process: the timing stage alone, for the run's later timing processes.

Four quiet processes spread a cell's paired speed-up by 11% where four repeats inside one spread 1.6% (docs/timing.md,
"Sources of the spread"), so a sweep times each paired cell in `processes` processes (harness.runner.processes) and its
interval is over them (harness.measure.rounds.process_interval). This is what each later process runs for one cell:
the cell's inputs, its variant built at the config its row measured (a tuned cell's value found), a learnable variant's
fit as the run stored it (harness.executors.worker shares fits through RUN_DIR/fitted/; never fitted here), then the
same prepare, checked call and paired timing as the cell's first measurement (harness.measure.phase.run_phase: the
timed step keeps its last output, as there), under the cell's deadline. The memory stage, the scoring of a timed output
and the FLOPs are the first process's alone. No row comes of it: the paired fields are merged into the cell's row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.measure.calibration import calibrated, calibration_key
from harness.measure.context import MeasureContext
from harness.measure.outcome import classify_exception, deadline
from harness.measure.phase import LastOutput, built, kind_of
from harness.measure.settings import DTYPES, MeasureSettings
from harness.measure.speedup import Timing, timed_fields
from harness.schema import Cell


@dataclass(frozen=True)
class Retimed:
    """One more process's timing of a cell (None when it could not be timed here, `failed` says why)."""

    timing: Timing | None = None
    failed: str | None = None


def retime_cell(cell: Cell, settings: MeasureSettings, context: MeasureContext) -> Retimed:
    """Time `cell` (its config as measured) again in this process, paired as its first measurement was."""
    try:
        with deadline(settings.cell_timeout_s):
            return _retimed(cell, settings, context)
    except Exception as exc:  # noqa: BLE001 - a failed re-timing leaves the row as its first process measured it
        status, reason = classify_exception(exc, settings.cell_timeout_s)
        return Retimed(failed=f"{status}: {reason}")


def _retimed(cell: Cell, settings: MeasureSettings, context: MeasureContext) -> Retimed:
    device = torch.device(settings.device)
    inputs = context.cell_inputs(cell, settings, device)
    attn, _, reasons = built(cell, inputs, device)
    if reasons:
        return Retimed(failed="refused here: " + "; ".join(reasons))
    if attn.capabilities.learnable:
        if calibration_key(cell, settings) not in context.calibrated:  # never fitted again for a timing
            return Retimed(failed="no stored fit in the run folder")
        attn, _ = calibrated(attn, cell, inputs.parsed, settings, context, device)  # the stored fit, as measured
    attn = attn.to(dtype=DTYPES[cell.dtype]).train(cell.mode == "train")
    phase = kind_of(attn, cell, inputs, settings, context, device)
    phase.prepare()
    checked = phase.check()
    if checked.nonfinite:
        return Retimed(failed=f"nonfinite: {checked.nonfinite}")
    timed = phase.timed_step()
    timing = timed_fields(
        LastOutput(timed.step),
        timed.baseline,
        settings,
        device,
        first_call_s=checked.call_s,
        setup=timed.setup,
        per=timed.per,
    )
    return Retimed(timing=timing)
