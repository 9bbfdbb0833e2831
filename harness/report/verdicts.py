"""How compare judges one matched cell of two runs (harness.report.compare matches them), and what it says about the
runs as a whole: the noise floor and the load.

A cell is flagged:
- latency: its time B/A on a basis that cancels the machine (harness.report.normalize: a variant's speed-up paired
  with the baseline inside the cell, the baseline's paired with the reference kernel, else raw latency with the
  run-wide drift, the median over such cells, taken out), beyond the noise floor (1 +/- threshold, or NOISE_SIGMAS
  times the robust spread of the cells' ratios, whichever is wider) AND outside both rows' intervals of that quantity
  (speed-up intervals; p20-p80 ranges for raw latency); a row measured under load or contended, or on raw latency
  flagged noisy, gets the verdict "noisy" instead, never counted;
- memory: B/A beyond 1 +/- threshold and the change larger than MIN_MEMORY_CHANGE bytes;
- error: changed by more than max(ERROR_ABS, ERROR_REL x the smaller one);
- status: ok in one run only (e.g. ok -> oom is a regression), except a change to timeout or fit_timeout in a
  run measured under load (under_load): "inconclusive", never counted (the machine ran out of time, maybe not the code).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.measure.noise import HIGH_LOAD_PER_CPU, NOISY_SHARE
from harness.measure.rounds import MAD_TO_SD
from harness.report.analysed import AnalysedRun
from harness.report.clock import contended_count, median_load, mostly_contended
from harness.report.normalize import BASES, PAIRED, A, B, TimeRatio, intervals, time_ratio
from harness.report.render import finite
from harness.store import COL

DEFAULT_THRESHOLD = 0.05  # minimum relative change of latency or memory that can be flagged
MIN_MEMORY_CHANGE = 64 * 1024  # bytes: smaller memory changes are never flagged (allocator granularity)
ERROR_ABS = 1e-4  # relative-L2 error changes below this are rounding, never flagged
ERROR_REL = 0.25  # ... nor changes below 25% of the smaller error
NOISE_SIGMAS = 3.0  # a latency change must exceed this many robust standard deviations of the cells' ratios
MIN_CELLS_FOR_FLOOR = 8  # fewer matched cells give no usable spread: then the threshold alone is the floor
MIN_CELLS_FOR_DRIFT = 3  # fewer cells on raw latency: no run-wide drift is taken out of them


@dataclass(frozen=True)
class NoiseFloor:
    """How much two runs' times move for no reason of the code: the run-wide drift of raw latencies and the cells'
    scatter around it."""

    drift: float = 1.0  # median B/A over the ok cells judged on raw latency (a machine that got slower as a whole)
    spread: float = 0.0  # robust standard deviation (1.4826 x MAD) of the cells' log time ratios, drift taken out
    cells: int = 0  # cells it was estimated from

    def limit(self, threshold: float) -> float:
        """The smallest |log(B/A / drift)| that counts as a change."""
        return max(math.log1p(threshold), NOISE_SIGMAS * self.spread)

    def shift(self, ratio: TimeRatio) -> float:
        """log of the cell's time ratio, the drift taken out of a raw latency ratio (the other bases cancel it)."""
        return math.log(ratio.ratio / (self.drift if ratio.basis == "latency" else 1.0))


def noise_floor(cells: pd.DataFrame) -> NoiseFloor:
    """The drift and scatter of the time ratios (harness.report.normalize) over matched cells ok in both runs
    (identity with too few cells)."""
    if not len(cells):
        return NoiseFloor()
    ok = cells[(cells[A.status] == "ok") & (cells[B.status] == "ok")]
    ratios = [r for r in (time_ratio(row) for _, row in ok.iterrows()) if r and r.ratio > 0]
    if len(ratios) < MIN_CELLS_FOR_FLOOR:
        return NoiseFloor(cells=len(ratios))
    raw = [math.log(r.ratio) for r in ratios if r.basis == "latency"]
    drift = math.exp(float(np.median(raw))) if len(raw) >= MIN_CELLS_FOR_DRIFT else 1.0
    logs = np.array([NoiseFloor(drift=drift).shift(r) for r in ratios])
    center = float(np.median(logs))
    return NoiseFloor(drift=drift, spread=MAD_TO_SD * float(np.median(np.abs(logs - center))), cells=len(logs))


def judge(
    row: pd.Series,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    floor: NoiseFloor = NoiseFloor(),
    errors: bool = True,
    loaded: dict[str, str | None] | None = None,
) -> tuple[str, str]:
    """The verdict for one matched cell (columns suffixed _a and _b) and the reasons, joined by '; '.

    `errors` False: the two runs measured errors against different references, so errors are not judged.
    `loaded`: side ("a", "b") -> why that run was measured under load (under_load), None when quiet; a cell ok in
    one run that timed out in a loaded other is "inconclusive".

    "regression" | "improvement" | "same", or "noisy": latency moved beyond the threshold and the
    intervals while either row was measured under load or flagged noisy (not counted as either).
    """
    sa, sb = row[A.status], row[B.status]
    if sa != "ok" or sb != "ok":
        if sa == "ok":
            load = (loaded or {}).get("b")
            if load and sb in LOAD_STATUSES:  # the machine ran out of time, maybe not the code
                return "inconclusive", f"status ok -> {sb}; inconclusive: B was measured under load ({load})"
            return "regression", f"status ok -> {sb}"
        if sb == "ok":
            return "improvement", f"status {sa} -> ok"
        return "same", "" if sa == sb else f"status {sa} -> {sb}"
    worse, better = [], []
    latency = _latency_change(row, threshold, floor)
    noisy = _noisy(row, paired=bool(latency and latency[2])) if latency else ""
    if noisy:  # the machine, not the code: said, never counted
        return "noisy", f"{latency[1]}, but measured under load or noisy ({noisy})"
    if latency:
        (worse if latency[0] == "worse" else better).append(latency[1])
    ma, mb = row[A.peak_memory_bytes], row[B.peak_memory_bytes]
    if _finite(ma, mb) and ma > 0 and abs(mb - ma) > MIN_MEMORY_CHANGE:
        ratio = mb / ma
        if ratio > 1 + threshold:
            worse.append(f"memory {ratio:.2f}x")
        elif ratio < 1 / (1 + threshold):
            better.append(f"memory {ratio:.2f}x")
    ea, eb = row[A.rel_l2_error], row[B.rel_l2_error]
    if errors and _finite(ea, eb) and abs(eb - ea) > max(ERROR_ABS, ERROR_REL * min(ea, eb)):
        (worse if eb > ea else better).append(f"error {ea:.2g} -> {eb:.2g}")
    if worse:
        return "regression", "; ".join(worse + better)
    if better:
        return "improvement", "; ".join(better)
    return "same", ""


def _latency_change(row: pd.Series, threshold: float, floor: NoiseFloor = NoiseFloor()) -> tuple[str, str, bool] | None:
    """("worse" | "better", "latency 1.40x ...", whether on a paired basis) when the cell's time ratio
    (harness.report.normalize) moved beyond the noise floor and both runs' intervals, else None.

    Beyond the floor: floor.shift(ratio) exceeds floor.limit(threshold). Beyond the intervals: the two rows'
    intervals of the basis's quantity do not overlap (normalize.intervals; unknown intervals do not hold it back).
    """
    ratio = time_ratio(row)
    if ratio is None:
        return None
    shift = floor.shift(ratio)
    if abs(shift) <= floor.limit(threshold):
        return None
    (lo_a, hi_a), (lo_b, hi_b) = intervals(row, ratio.basis)
    known = _finite(lo_a, hi_a, lo_b, hi_b)
    if ratio.basis in PAIRED:  # a speed-up: B's interval below A's is B slower
        lo_a, hi_a, lo_b, hi_b = (1 / x if known else x for x in (hi_a, lo_a, hi_b, lo_b))
    said = " ".join(filter(None, [f"latency {ratio.ratio:.2f}x", BASES[ratio.basis]]))
    if shift > 0 and (not known or lo_b > hi_a):
        return "worse", said, ratio.basis in PAIRED
    if shift < 0 and (not known or hi_b < lo_a):
        return "better", said, ratio.basis in PAIRED
    return None


def floor_notes(floor: NoiseFloor, threshold: float, a: AnalysedRun, b: AnalysedRun) -> list[str]:
    """What the two runs' noise floor means for the verdicts, when it is wider than the threshold or B drifted."""
    if floor.cells < MIN_CELLS_FOR_FLOOR:
        return []
    out = []
    if abs(math.log(floor.drift)) > math.log1p(threshold):
        out.append(
            f"{b.name} runs {floor.drift:.2f}x {a.name} across all {floor.cells} matched cells: a drift of the machine "
            "(or of every cell alike), taken out of each cell's ratio before judging it; see the per-series means"
        )
    limit = math.expm1(floor.limit(threshold))
    if limit > threshold:
        out.append(
            f"the cells' ratios scatter by {math.expm1(floor.spread):.0%} (robust s.d.) around that: only changes beyond "
            f"{limit:.0%} count; quieter machines, pinned threads or more repeats lower this floor (docs/timing.md)"
        )
    return out


def _noisy(row: pd.Series, *, paired: bool = False) -> str:
    """Why either run's row of this cell cannot be trusted for time ('' when both are quiet). `paired`: the change
    cleared the rows' paired intervals, which already hold their blocks' spread (a row's wide-interval or spread
    flag), so only load and contention make it the machine's (a bias pairing does not remove)."""
    parts = []
    for side in ("a", "b"):
        load = row.get(f"load_per_cpu_{side}")
        flagged = not paired and isinstance(row.get(f"noisy_{side}"), (bool, np.bool_)) and row.get(f"noisy_{side}")
        contended = isinstance(row.get(f"contended_{side}"), (bool, np.bool_)) and row.get(f"contended_{side}")
        loaded = _finite(load) and float(load) >= HIGH_LOAD_PER_CPU
        if flagged or contended or loaded:
            said = row.get(f"noise_reason_{side}") if flagged else None
            why = said or (f"load {float(load):.2f} per CPU" if _finite(load) else "")
            parts.append(f"{side.upper()}: " + "; ".join(filter(None, [why, "contended" if contended else ""])))
    return "; ".join(parts)


LOAD_STATUSES = ("timeout", "fit_timeout")  # statuses a loaded machine causes: inconclusive after ok, not a regression


def under_load(run: AnalysedRun) -> str | None:
    """Why a run as a whole was measured under load ('load 14 per CPU, 27 of 29 timed cells contended'), None when
    quiet: the median load of its cells at or above HIGH_LOAD_PER_CPU, or most of its timed cells contended
    (harness.report.clock)."""
    rows = run.frame
    load = median_load(rows)
    contended, timed = contended_count(rows)
    loaded = load is not None and load >= HIGH_LOAD_PER_CPU
    if not (loaded or mostly_contended(rows)):
        return None
    parts = [f"load {load:.2g} per CPU"] if load is not None else []
    parts += [f"{contended} of {timed} timed cells contended"] if timed else []
    return ", ".join(parts)


def load_notes(run: AnalysedRun) -> list[str]:
    """A note when a run was measured under load or has noisy rows: its latency changes are the machine's."""
    rows = run.frame
    if not len(rows) or COL.noisy not in rows:
        return []
    noisy = int((rows[COL.noisy] == True).sum())  # noqa: E712 - None and NaN are not noisy
    load = pd.to_numeric(rows[COL.load_per_cpu], errors="coerce")
    high = load.max() if load.notna().any() else None
    if noisy < NOISY_SHARE * len(rows) and not (high is not None and high >= HIGH_LOAD_PER_CPU):
        return []  # a few noisy rows: their cells say so, the run as a whole is not in question
    where = f"load up to {high:.2f} per CPU" if high is not None else "no load recorded"
    return [
        f"{run.name} was measured under load or noisily ({noisy} of {len(rows)} rows noisy, {where}): its latency "
        f"changes are the machine's, not the code's, and are not counted (docs/timing.md: quiet numbers)"
    ]


def _finite(*values) -> bool:
    """Whether every value is a finite number (not None, NaN or text)."""
    return all(finite(v) is not None for v in values)
