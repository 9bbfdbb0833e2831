"""What compare judges a cell's time by across two runs: a ratio B/A from which the machine's own drift cancels.

Two quiet runs of one commit moved every absolute latency by 20-26% (issue 44), so a cell is judged by a ratio taken
inside each cell first, both timed in alternation there (harness.measure.speedup):
- "speedup": both rows have a paired speed-up over their run's baseline: A.speedup / B.speedup (above 1: B's
  variant got slower against the same baseline); the rows' speed-up intervals are what it must clear.
- "reference": the baseline's own cells, paired with the fixed reference kernel (harness.measure.yardstick):
  A.reference_speedup / B.reference_speedup, against their intervals.
- "latency": neither (cells timed alone, older runs): B.latency / A.latency, against the p20-p80 ranges; the run-wide
  drift is taken out as before (harness.report.verdicts.noise_floor).
The absolute latencies stay in the tables and in compare.csv's latency_ratio.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from harness.report.render import finite
from harness.schema import BASELINE
from harness.store import COL

SUFFIX_A, SUFFIX_B = "_a", "_b"  # the two runs' columns in a merged frame of matched cells
A, B = COL.suffixed(SUFFIX_A), COL.suffixed(SUFFIX_B)
BASES = {  # basis -> what the ratio is against, as a verdict says it
    "speedup": f"against {BASELINE} in the cell",
    "reference": "against the reference kernel in the cell",
    "latency": "",
}

# basis -> the row fields of its in-cell ratio (value, low, high), higher = faster; "latency" has none
PAIRED = {
    "speedup": (COL.speedup, COL.speedup_low, COL.speedup_high),
    "reference": (COL.reference_speedup, COL.reference_speedup_low, COL.reference_speedup_high),
}


@dataclass(frozen=True)
class TimeRatio:
    """A matched cell's time B/A on its basis (see the module doc)."""

    ratio: float
    basis: str  # one of BASES


def time_ratio(row: pd.Series) -> TimeRatio | None:
    """The cell's time B/A on the first basis both rows allow; None when a latency is missing."""
    for basis, (value, _, _) in PAIRED.items():
        fa, fb = _positive(row.get(value + SUFFIX_A)), _positive(row.get(value + SUFFIX_B))
        if fa is not None and fb is not None:
            return TimeRatio(fa / fb, basis)
    ta, tb = _positive(row.get(A.latency_s)), _positive(row.get(B.latency_s))
    return None if ta is None or tb is None else TimeRatio(tb / ta, "latency")


def intervals(row: pd.Series, basis: str) -> tuple[tuple, tuple]:
    """A's and B's interval of the basis's quantity: the paired ratio's (low, high), or the p20-p80 latency range."""
    if basis in PAIRED:
        _, low, high = PAIRED[basis]
        return (row.get(low + SUFFIX_A), row.get(high + SUFFIX_A)), (row.get(low + SUFFIX_B), row.get(high + SUFFIX_B))
    return (row.get(A.latency_p20_s), row.get(A.latency_p80_s)), (row.get(B.latency_p20_s), row.get(B.latency_p80_s))


def basis_note(cells: pd.DataFrame) -> str | None:
    """How many ok cells each basis judged, when any was judged on a ratio inside its cell (None otherwise)."""
    ok = cells[(cells[A.status] == "ok") & (cells[B.status] == "ok")] if len(cells) else cells
    counts = pd.Series([r.basis for r in (time_ratio(row) for _, row in ok.iterrows()) if r]).value_counts()
    if not counts.get("speedup", 0) and not counts.get("reference", 0):
        return None
    parts = [
        f"{counts.get('speedup', 0)} by their paired speed-up over {BASELINE}",
        f"{counts.get('reference', 0)} by their paired speed-up over the reference kernel",
    ]
    if counts.get("latency", 0):
        parts.append(f"{counts['latency']} by raw latency (timed alone, or older rows)")
    return "time judged inside each cell, so a machine-wide drift cancels: " + ", ".join(parts)


def _positive(value) -> float | None:
    number = finite(value)
    return number if number is not None and number > 0 else None
