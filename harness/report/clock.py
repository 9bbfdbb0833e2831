"""The clock the report answers from (wall, or with --clock cpu the timing thread's CPU time) and contended cells.

Conventions (documented here once):
- A run's clock is `report --clock` where given, else its spec.toml's `clock` (`sweep --clock`), else "wall".
- Under "cpu" each row that has CPU-time numbers (CPU cells of this schema) answers from them: latency_s is its
  cpu_latency_s and speedup/speedup_low/speedup_high its paired CPU-time speed-up; its wall p20-p80 range is dropped
  (it is another clock's). Rows without (CUDA, older rows) keep their wall numbers.
- A setting is measured under load when most of its timed cells (more than MOSTLY_CONTENDED of those whose
  contention is known) are contended (harness.measure.contention): under the wall clock its answer is refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from harness.spec.sweep_spec import CLOCKS
from harness.store import COL

MOSTLY_CONTENDED = 0.5  # more than this share of a setting's timed cells contended: no verdict on wall time
CPU_COLUMNS = {
    "latency_s": "cpu_latency_s",
    "speedup": "cpu_speedup",
    "speedup_low": "cpu_speedup_low",
    "speedup_high": "cpu_speedup_high",
}


def run_clock(spec: dict[str, Any], given: str | None = None) -> str:
    """The clock a run is answered on: `given` (report --clock), else the spec's `clock`, else "wall"."""
    for value in (given, spec.get("clock")):
        if value in CLOCKS:
            return str(value)
    return "wall"


def on_clock(frame: pd.DataFrame, clock: str) -> pd.DataFrame:
    """The rows as the clock reads them (see the module doc): unchanged for "wall", a copy for "cpu"."""
    if clock != "cpu" or COL.cpu_latency_s not in frame or not len(frame):
        return frame
    out = frame.copy()
    has = pd.to_numeric(out[COL.cpu_latency_s], errors="coerce").notna()
    for wall, cpu in CPU_COLUMNS.items():
        values = pd.to_numeric(out[cpu], errors="coerce") if cpu in out else float("nan")
        out[wall] = pd.to_numeric(out[wall], errors="coerce").where(~has, values)
    for spread in ("latency_p20_s", "latency_p80_s"):
        if spread in out:
            out[spread] = pd.to_numeric(out[spread], errors="coerce").where(~has)
    return out


def contended_count(rows: pd.DataFrame) -> tuple[int, int]:
    """(contended cells, timed cells whose contention is known) among rows."""
    if COL.contended not in rows or not len(rows):
        return 0, 0
    known = rows[COL.contended].map(lambda v: isinstance(v, (bool, np.bool_)))  # None / NaN: not timed, or older rows
    return int(rows.loc[known, COL.contended].astype(bool).sum()), int(known.sum())


def mostly_contended(rows: pd.DataFrame) -> bool:
    """Whether most of the rows' timed cells were contended (MOSTLY_CONTENDED)."""
    contended, timed = contended_count(rows)
    return timed > 0 and contended > MOSTLY_CONTENDED * timed


def median_load(rows: pd.DataFrame) -> float | None:
    """The median load per CPU the rows were measured under (None when none recorded one)."""
    if COL.load_per_cpu not in rows:
        return None
    load = pd.to_numeric(rows[COL.load_per_cpu], errors="coerce").dropna()
    return float(load.median()) if len(load) else None


def refusal(rows: pd.DataFrame, clock: str) -> str | None:
    """Why a setting's answer is no verdict: most of its timed cells contended and answered on wall time; else None."""
    if clock != "wall" or not mostly_contended(rows):
        return None
    contended, timed = contended_count(rows)
    load = median_load(rows)
    where = f"load {load:.2g} per CPU" if load is not None else "contention"
    every = "every timed cell" if contended == timed else f"{contended} of {timed} timed cells"
    return (
        f"measured under {where} ({every} contended): no verdict; rerun on a quiet machine, "
        "or pass --clock cpu to compare CPU time"
    )


def clock_note(clock: str) -> str | None:
    """What a report on the CPU clock says about its numbers (None on the wall clock)."""
    if clock != "cpu":
        return None
    return (
        "speed-ups and latencies are CPU time of the timing thread (--clock cpu), not wall time: what the calls "
        "cost while they ran, without the time the machine gave to other jobs (CUDA rows stay on wall time)"
    )
