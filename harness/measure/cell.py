"""One cell -> one row: its stages run under the cell's deadline, a failure classified, the row judged. The measure
package is the only code that touches the device.

The stages and their order are harness.measure.phase's; their results fill the row as each finishes, so a cell that
fails still reports what its earlier stages measured (backend, errors, memory). After every cell the shared inputs'
checksum is compared with the one taken when they were made (harness.measure.context): a variant that wrote into q, k
or v gets an error row naming them, and the next cell gets fresh inputs. Then the row is judged
(harness.measure.roofline: the machine's limits, the timing's noise).

A failure never escapes (only the user's Ctrl-C does; a SystemExit or KeyboardInterrupt a variant raises is an error
row): out of memory -> "oom", NotSupportedError -> "unsupported", NaN/inf -> "nonfinite", the per-cell limit ->
"timeout", a search or calibration past its own limit (fit_timeout_s, not counted in the cell's) -> "fit_timeout",
anything else -> "error" with the stage and message (harness.measure.outcome).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from harness.measure.context import MeasureContext, changed_reason
from harness.measure.noise import larger, load_per_cpu
from harness.measure.outcome import classify_exception, deadline, release_memory
from harness.measure.phase import Record, StageFailed, by_user, measure_stages, user_interrupts
from harness.measure.roofline import judged
from harness.measure.settings import MeasureSettings, RunInfo
from harness.measure.timer import Stopwatch
from harness.row import Row
from harness.schema import Cell


def measure_cell(cell: Cell, settings: MeasureSettings, run: RunInfo, context: MeasureContext | None = None) -> Row:
    """Measure one cell and return its row; never raises for a failure of the variant (see module doc)."""
    context = context or MeasureContext()
    started, watch, load_at_start = now(), Stopwatch.started(), load_per_cpu()
    record = Record()
    try:
        with user_interrupts(), deadline(settings.cell_timeout_s, settings.fit_timeout_s) as clock:
            status, reason = measure_stages(cell, settings, context, record, clock)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a row (a timeout may land between stages)
        if by_user(exc):  # the user's Ctrl-C stops the sweep; a KeyboardInterrupt a variant raises is a row
            raise
        failed_in, error = (exc.stage, exc.error) if isinstance(exc, StageFailed) else ("start", exc)
        status, reason = classify_exception(error, settings.cell_timeout_s)
        if status not in ("oom", "timeout", "unsupported"):
            reason = f"during {failed_in}: {reason}"
        if status == "oom":
            context.clear()
        del exc, error
    written = context.check_inputs()  # one read of q, k, v: harness.measure.context
    if written:
        context.forget_measurements()  # another budget's row must not take this cell's numbers as measured
        ended = f" (the cell had ended {status}: {reason})" if status != "ok" else ""
        status, reason = "error", changed_reason(written) + ended
    wall_s, load = watch.seconds, context.timed_load(cell, record.search, larger(load_at_start, load_per_cpu()))
    # what the stages that finished measured stays in the row (backend, errors, memory), also when a later one failed
    fields = {**record.row_fields(), "status": status, "reason": reason, "wall_s": wall_s, "load_per_cpu": load}
    row = base_row(cell, run).update(started_at=started, **fields)
    row.update(**judged(row, run.limits, load))  # the machine's limits, the timing's noise
    if status != "ok":
        release_memory(settings.device)
    return row


def now() -> str:
    """The current time as ISO text (UTC, seconds): a row's started_at."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def base_row(cell: Cell, run: RunInfo) -> Row:
    """A row with the cell's and the run's identity filled in and every measurement None."""
    return Row(
        cell=cell,
        cell_id=cell.cell_id,
        run_id=run.run_id,
        device_name=run.device_name,
        host=run.host,
        threads=run.threads,
        accuracy_reference=run.accuracy_reference,
    )


def outcome_row(cell: Cell, run: RunInfo, status: str, reason: str | None) -> dict[str, Any]:
    """The row (as a dict) of a cell that was not measured, e.g. OOM at a shorter N: status and reason only."""
    return base_row(cell, run).update(status=status, reason=reason, started_at=now(), wall_s=0.0).to_dict()
