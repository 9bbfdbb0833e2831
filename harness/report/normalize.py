"""What compare judges a cell's time by across two runs: a ratio B/A from which the machine's own drift cancels.

Two quiet runs of one commit moved every absolute latency by 20-26% (issue 44), so a cell is judged by a ratio taken
inside each run first:
- "speedup": both rows have a paired speed-up over their run's baseline (timed in alternation inside the cell):
  A.speedup / B.speedup (above 1: B's variant got slower against the same baseline); the rows' speed-up intervals
  are what it must clear.
- "reference": no speed-up (the baseline's own cells, cells timed alone), and both runs timed the reference kernel
  (env.json `reference`, harness.measure.yardstick): (B.latency / B.reference) / (A.latency / A.reference); B's
  p20-p80 range is scaled alike (`scale_b`).
- "latency": neither (older runs): B.latency / A.latency; the run-wide drift is taken out as before
  (harness.report.verdicts.noise_floor).
The absolute latencies stay in the tables and in compare.csv's latency_ratio.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.report.analysed import AnalysedRun
from harness.report.render import finite
from harness.schema import BASELINE
from harness.store import COL

SUFFIX_A, SUFFIX_B = "_a", "_b"  # the two runs' columns in a merged frame of matched cells
A, B = COL.suffixed(SUFFIX_A), COL.suffixed(SUFFIX_B)
BASES = {  # basis -> what the ratio is against, as a verdict says it
    "speedup": f"against {BASELINE} in the cell",
    "reference": "against the run's reference kernel",
    "latency": "",
}

References = tuple  # (A's reference kernel seconds, B's), None where a run has none


@dataclass(frozen=True)
class TimeRatio:
    """A matched cell's time B/A on its basis (see the module doc)."""

    ratio: float
    basis: str  # one of BASES
    scale_b: float = 1.0  # what B's latencies are multiplied by to stand on A's machine ("reference": refA / refB)


def reference_s(run: AnalysedRun) -> float | None:
    """The run's reference kernel seconds per call (env.json `reference`), None for a run without (older runs)."""
    entry = run.run.env.get("reference")
    seconds = finite(entry.get("seconds")) if isinstance(entry, dict) else None
    return seconds if seconds is not None and seconds > 0 else None


def time_ratio(row: pd.Series, references: References = (None, None)) -> TimeRatio | None:
    """The cell's time B/A on the first basis both rows and runs allow; None when a latency is missing."""
    sa, sb = _positive(row.get(A.speedup)), _positive(row.get(B.speedup))
    if sa is not None and sb is not None:
        return TimeRatio(sa / sb, "speedup")
    ta, tb = _positive(row.get(A.latency_s)), _positive(row.get(B.latency_s))
    if ta is None or tb is None:
        return None
    ref_a, ref_b = references
    if ref_a and ref_b:
        return TimeRatio(tb / ta * ref_a / ref_b, "reference", ref_a / ref_b)
    return TimeRatio(tb / ta, "latency")


def basis_note(cells: pd.DataFrame, references: References) -> str | None:
    """How many cells each basis judged, when any was judged on a ratio inside each run (None otherwise)."""
    ok = cells[(cells[A.status] == "ok") & (cells[B.status] == "ok")] if len(cells) else cells
    counts = pd.Series([r.basis for r in (time_ratio(row, references) for _, row in ok.iterrows()) if r]).value_counts()
    if not counts.get("speedup", 0) and not counts.get("reference", 0):
        return None
    parts = [f"{counts.get('speedup', 0)} by their paired speed-up over {BASELINE}"]
    parts.append(f"{counts.get('reference', 0)} by latency over each run's reference kernel")
    if counts.get("latency", 0):
        parts.append(f"{counts['latency']} by raw latency (a run without a reference kernel)")
    return "time judged inside each run, so a machine-wide drift cancels: " + ", ".join(parts)


def _positive(value) -> float | None:
    number = finite(value)
    return number if number is not None and number > 0 else None
