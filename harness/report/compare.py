"""Match the cells of two runs, ratios B/A, regressions flagged (`python -m harness compare RUN_A RUN_B`).

Cells are matched on what was measured, not where: harness.schema.match_key, every field of a cell's id but
the device (two GPUs, or CPU vs GPU, are the point of a comparison; CPU vs GPU is noted: the CPU and CUDA
generators draw other inputs from one seed), the seed (noted when it differs: errors then come from other inputs) and a searched quality knob (the value found may differ; the budget names the
cell). Not on run_id, host, device_name, threads, or the resolved backend (shown when it differs: "auto" may
pick another kernel on another machine).

A cell is flagged:
- latency: B/A, taken relative to the run-wide drift (the median B/A over every matched cell), beyond
  the noise floor (1 +/- threshold, or NOISE_SIGMAS times the robust spread of the cells' ratios
  around the drift, whichever is wider) AND outside both runs' intervals (p20-p80 ranges; paired
  speed-up intervals where both rows have them); a row measured under load or flagged noisy gets
  the verdict "noisy" instead, never counted;
- memory: B/A beyond 1 +/- threshold and the change larger than MIN_MEMORY_CHANGE bytes;
- error: changed by more than max(ERROR_ABS, ERROR_REL x the smaller one);
- status: ok in one run only (e.g. ok -> oom is a regression), except a change to timeout or fit_timeout in a
  run measured under load (under_load): "inconclusive", never counted (the machine ran out of time, maybe not the code).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from harness.errors import UsageError
from harness.measure.noise import HIGH_LOAD_PER_CPU, NOISY_SHARE
from harness.report.analysed import AnalysedRun
from harness.report.clock import contended_count, median_load, mostly_contended
from harness.report.tables import COLUMNS
from harness.schema import CELL_FIELDS, match_key

# What judge reads of each side, besides the report's compared columns (harness.report.columns), all in compare.csv.
MEASURED = tuple(
    dict.fromkeys(
        [
            *(c.field for c in COLUMNS if c.compared),
            "latency_p20_s",
            "latency_p80_s",
            "speedup",
            "speedup_low",
            "speedup_high",
            "load_per_cpu",
            "noisy",
            "noise_reason",
            "contended",
            "cosine",
            "dense_status",
        ]
    )
)
DEFAULT_THRESHOLD = 0.05  # minimum relative change of latency or memory that can be flagged
MIN_MEMORY_CHANGE = 64 * 1024  # bytes: smaller memory changes are never flagged (allocator granularity)
ERROR_ABS = 1e-4  # relative-L2 error changes below this are rounding, never flagged
ERROR_REL = 0.25  # ... nor changes below 25% of the smaller error
NOISE_SIGMAS = 3.0  # a latency change must exceed this many robust standard deviations of the cells' ratios
MIN_CELLS_FOR_FLOOR = 8  # fewer matched cells give no usable spread: then the threshold alone is the floor


@dataclass(frozen=True)
class NoiseFloor:
    """How much two runs' latencies move for no reason of the code: the run-wide drift and the cells' scatter around it."""

    drift: float = 1.0  # median B/A over the matched ok cells (a machine that got slower or faster as a whole)
    spread: float = 0.0  # robust standard deviation (1.4826 x MAD) of log(B/A) around log(drift)
    cells: int = 0  # cells it was estimated from

    def limit(self, threshold: float) -> float:
        """The smallest |log(B/A / drift)| that counts as a change."""
        return max(math.log1p(threshold), NOISE_SIGMAS * self.spread)


def noise_floor(cells: pd.DataFrame) -> NoiseFloor:
    """The drift and scatter of B/A over matched cells that are ok in both runs (identity with too few cells)."""
    if not len(cells):
        return NoiseFloor()
    ok = cells[(cells["status_a"] == "ok") & (cells["status_b"] == "ok")]
    ratios = pd.to_numeric(ok["latency_s_b"], errors="coerce") / pd.to_numeric(ok["latency_s_a"], errors="coerce")
    logs = np.log(ratios[np.isfinite(ratios) & (ratios > 0)].to_numpy(dtype=float))
    if len(logs) < MIN_CELLS_FOR_FLOOR:
        return NoiseFloor(cells=len(logs))
    center = float(np.median(logs))
    return NoiseFloor(drift=math.exp(center), spread=1.4826 * float(np.median(np.abs(logs - center))), cells=len(logs))


@dataclass
class Comparison:
    """Matched cells with ratios and verdicts, plus what did not match."""

    cells: pd.DataFrame  # one row per matched cell (see compare_runs)
    only_a: pd.DataFrame  # cells of A with no match in B
    only_b: pd.DataFrame  # cells of B with no match in A
    notes: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> pd.DataFrame:
        return self.cells[self.cells["verdict"] == "regression"]

    @property
    def improvements(self) -> pd.DataFrame:
        return self.cells[self.cells["verdict"] == "improvement"]

    @property
    def inconclusive(self) -> pd.DataFrame:
        """Cells that timed out in a run measured under load where the other run had them ok: said, not counted."""
        return self.cells[self.cells["verdict"] == "inconclusive"]

    @property
    def noisy(self) -> pd.DataFrame:
        """Cells whose latency moved while either run was under load or noisy: said, not counted."""
        return self.cells[self.cells["verdict"] == "noisy"]


def compare_runs(a: AnalysedRun, b: AnalysedRun, *, threshold: float = DEFAULT_THRESHOLD) -> Comparison:
    """Match A's and B's cells and judge each: verdict "regression" | "improvement" | "same" | "noisy" |
    "inconclusive", with why.

    Raises UsageError when either run has no readable row (nothing to compare).
    """
    for run in (a, b):
        if not len(run.frame):
            raise UsageError(
                f"{run.path}: no readable row in rows.jsonl ({'; '.join(run.run.notes) or 'the file is empty'}); "
                "nothing to compare: pass a run folder with measured rows"
            )
    notes = [f"{run.name}: {n}" for run in (a, b) for n in run.run.notes] + load_notes(a) + load_notes(b)
    fa, fb = (_keyed(run, notes) for run in (a, b))
    merged = fa.merge(fb, on="match_key", how="outer", suffixes=("_a", "_b"), indicator=True)
    for name in CELL_FIELDS:  # one column per cell field: A's value, B's where only B has the cell
        merged[name] = merged[f"{name}_a"].where(merged["_merge"] != "right_only", merged[f"{name}_b"])
    only_a = merged[merged["_merge"] == "left_only"]
    only_b = merged[merged["_merge"] == "right_only"]
    cells = merged[merged["_merge"] == "both"].copy()
    floor = noise_floor(cells)
    notes += floor_notes(floor, threshold, a, b)
    same_reference = a.accuracy_reference == b.accuracy_reference
    if not same_reference:
        notes.append(
            f"A's errors are against {a.errors_against}, B's against {b.errors_against}: errors are not compared"
        )
    verdicts, whys = [], []
    loaded = {side: under_load(run) for side, run in (("a", a), ("b", b))}
    for _, row in cells.iterrows():
        verdict, why = judge(row, threshold=threshold, floor=floor, errors=same_reference, loaded=loaded)
        verdicts.append(verdict)
        whys.append(why)
    cells["latency_ratio"] = cells["latency_s_b"] / cells["latency_s_a"]
    cells["memory_ratio"] = cells["peak_memory_bytes_b"] / cells["peak_memory_bytes_a"].where(
        cells["peak_memory_bytes_a"] > 0
    )
    cells["error_change"] = cells["rel_l2_error_b"] - cells["rel_l2_error_a"]
    cells["verdict"] = verdicts
    cells["why"] = whys
    # numbers, not strings: a cell only one run has turns the other's seed column to floats (0 vs 0.0)
    if len(cells) and (pd.to_numeric(cells["seed_a"]) != pd.to_numeric(cells["seed_b"])).any():
        notes.append("some matched cells have different seeds: their errors come from different inputs")
    if len(cells) and (cells["device_a"].map(str) != cells["device_b"].map(str)).any():
        notes.append(  # harness.inputs draws on the cell's device: torch's CPU and CUDA generators differ
            "some matched cells ran on another device type: CPU and CUDA generators draw other inputs from the same "
            "seed, so their errors come from different inputs (compare error levels, not exact values)"
        )
    changed = cells[cells["backend_a"].map(str) != cells["backend_b"].map(str)]  # map: astype(str) makes None NaN
    if len(changed):
        notes.append(
            f"{len(changed)} matched cell(s) ran on another backend in B (e.g. {changed['backend_a'].iloc[0]} -> {changed['backend_b'].iloc[0]})"
        )
    return Comparison(cells.reset_index(drop=True), only_a.reset_index(drop=True), only_b.reset_index(drop=True), notes)


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
    sa, sb = row["status_a"], row["status_b"]
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
    if latency and _noisy(row):  # the machine, not the code: said, never counted
        return "noisy", f"latency {latency[1]:.2f}x, but measured under load or noisy ({_noisy(row)})"
    if latency:
        (worse if latency[0] == "worse" else better).append(f"latency {latency[1]:.2f}x")
    ma, mb = row["peak_memory_bytes_a"], row["peak_memory_bytes_b"]
    if _finite(ma, mb) and ma > 0 and abs(mb - ma) > MIN_MEMORY_CHANGE:
        ratio = mb / ma
        if ratio > 1 + threshold:
            worse.append(f"memory {ratio:.2f}x")
        elif ratio < 1 / (1 + threshold):
            better.append(f"memory {ratio:.2f}x")
    ea, eb = row["rel_l2_error_a"], row["rel_l2_error_b"]
    if errors and _finite(ea, eb) and abs(eb - ea) > max(ERROR_ABS, ERROR_REL * min(ea, eb)):
        (worse if eb > ea else better).append(f"error {ea:.2g} -> {eb:.2g}")
    if worse:
        return "regression", "; ".join(worse + better)
    if better:
        return "improvement", "; ".join(better)
    return "same", ""


def _latency_change(row: pd.Series, threshold: float, floor: NoiseFloor = NoiseFloor()) -> tuple[str, float] | None:
    """("worse" | "better", B/A) when latency moved beyond the noise floor and both runs' intervals, else None.

    Beyond the floor: B/A relative to the run-wide drift exceeds floor.limit(threshold). Beyond the
    intervals: the p20-p80 ranges do not overlap and, where both rows have paired speed-ups (timed in
    alternation with dense inside the cell), neither do their speed-up intervals.
    """
    ta, tb = row["latency_s_a"], row["latency_s_b"]
    if not (_finite(ta, tb) and ta > 0 and tb > 0):
        return None
    ratio = tb / ta
    shift = math.log(ratio / floor.drift)
    if abs(shift) <= floor.limit(threshold):
        return None
    spread_a = (row["latency_p20_s_a"], row["latency_p80_s_a"])
    spread_b = (row["latency_p20_s_b"], row["latency_p80_s_b"])
    has_spread = _finite(*spread_a, *spread_b)
    paired_a = (row.get("speedup_low_a"), row.get("speedup_high_a"))
    paired_b = (row.get("speedup_low_b"), row.get("speedup_high_b"))
    has_paired = _finite(*paired_a, *paired_b)
    if shift > 0 and (not has_spread or spread_b[0] > spread_a[1]) and (not has_paired or paired_b[1] < paired_a[0]):
        return "worse", ratio
    if shift < 0 and (not has_spread or spread_b[1] < spread_a[0]) and (not has_paired or paired_b[0] > paired_a[1]):
        return "better", ratio
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


def _noisy(row: pd.Series) -> str:
    """Why either run's row of this cell cannot be trusted for time ('' when both are quiet)."""
    parts = []
    for side in ("a", "b"):
        load = row.get(f"load_per_cpu_{side}")
        flagged = isinstance(row.get(f"noisy_{side}"), (bool, np.bool_)) and row.get(f"noisy_{side}")
        contended = isinstance(row.get(f"contended_{side}"), (bool, np.bool_)) and row.get(f"contended_{side}")
        if flagged or contended or (_finite(load) and float(load) >= HIGH_LOAD_PER_CPU):
            why = row.get(f"noise_reason_{side}") or (f"load {float(load):.2f} per CPU" if _finite(load) else "")
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
    if not len(rows) or "noisy" not in rows:
        return []
    noisy = int((rows["noisy"] == True).sum())  # noqa: E712 - None and NaN are not noisy
    load = pd.to_numeric(rows["load_per_cpu"], errors="coerce")
    high = load.max() if load.notna().any() else None
    if noisy < NOISY_SHARE * len(rows) and not (high is not None and high >= HIGH_LOAD_PER_CPU):
        return []  # a few noisy rows: their cells say so, the run as a whole is not in question
    where = f"load up to {high:.2f} per CPU" if high is not None else "no load recorded"
    return [
        f"{run.name} was measured under load or noisily ({noisy} of {len(rows)} rows noisy, {where}): its latency "
        f"changes are the machine's, not the code's, and are not counted (docs/timing.md: quiet numbers)"
    ]


def _keyed(run: AnalysedRun, notes: list[str]) -> pd.DataFrame:
    """The run's rows with their match key, one per key (the last row of a cell measured twice)."""
    frame = run.frame.copy()
    columns = ["match_key", *CELL_FIELDS, "series", "status", "reason", "backend", *MEASURED]
    if not len(frame):
        return pd.DataFrame(columns=columns)
    frame["match_key"] = [match_key(r) for r in frame[list(CELL_FIELDS)].to_dict("records")]
    duplicated = frame.duplicated("match_key", keep="last")
    if duplicated.any():
        notes.append(f"{run.name}: {int(duplicated.sum())} cell(s) measured twice; the last row of each is used")
    for column in columns:
        if column not in frame:
            frame[column] = None
    return frame[~duplicated][columns]


def _finite(*values) -> bool:
    try:
        return all(v is not None and math.isfinite(float(v)) for v in values)
    except (TypeError, ValueError):
        return False
