"""Compare two runs (`python -m harness compare RUN_A RUN_B`): match their cells, ratios B/A, each cell judged
(harness.report.verdicts, on a time ratio that cancels the machine: harness.report.normalize), and the output: the
printed summary, compare.md (the flagged cells side by side in the report's columns, harness.report.tables) and
compare.csv (every matched cell, raw numbers; time_ratio and time_basis are what the verdict judged).

Cells are matched on what was measured, not where: harness.schema.match_key, every field of a cell's id but
the device (two GPUs, or CPU vs GPU, are the point of a comparison; CPU vs GPU is noted: the CPU and CUDA
generators draw other inputs from one seed), the seed (noted when it differs: errors then come from other inputs) and a searched quality knob (the value found may differ; the budget names the
cell). Not on run_id, host, device_name, threads, or the resolved backend (shown when it differs: "auto" may
pick another kernel on another machine).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness.errors import UsageError
from harness.report.analysed import AnalysedRun
from harness.report.render import inert_markdown, md_cell
from harness.report.tables import COLUMNS
from harness.report.normalize import SUFFIX_A, SUFFIX_B, A, B, basis_note, time_ratio
from harness.report.verdicts import (
    DEFAULT_THRESHOLD,
    NoiseFloor,
    floor_notes,
    judge,
    load_notes,
    noise_floor,
    under_load,
)
from harness.schema import CELL_FIELDS, canonical, describe, match_key
from harness.store import COL, inert_csv_frame, write_plain

# What judge reads of each side, besides the report's compared columns (harness.report.tables), all in compare.csv.
MEASURED = tuple(
    dict.fromkeys(
        [
            *(c.field for c in COLUMNS if c.compared),
            COL.latency_p20_s,
            COL.latency_p80_s,
            COL.speedup,
            COL.speedup_low,
            COL.speedup_high,
            COL.reference_speedup,
            COL.reference_speedup_low,
            COL.reference_speedup_high,
            COL.load_per_cpu,
            COL.noisy,
            COL.noise_reason,
            COL.contended,
            COL.cosine,
            "dense_status",
        ]
    )
)


@dataclass
class Comparison:
    """Matched cells with ratios and verdicts, plus what did not match."""

    cells: pd.DataFrame  # one row per matched cell (see compare_runs)
    only_a: pd.DataFrame  # cells of A with no match in B
    only_b: pd.DataFrame  # cells of B with no match in A
    notes: list[str] = field(default_factory=list)
    floor: NoiseFloor = NoiseFloor()  # the drift and scatter the verdicts were judged against

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
    merged = fa.merge(fb, on="match_key", how="outer", suffixes=(SUFFIX_A, SUFFIX_B), indicator=True)
    for name in CELL_FIELDS:  # one column per cell field: A's value, B's where only B has the cell
        merged[name] = merged[name + SUFFIX_A].where(merged["_merge"] != "right_only", merged[name + SUFFIX_B])
    only_a = merged[merged["_merge"] == "left_only"]
    only_b = merged[merged["_merge"] == "right_only"]
    cells = merged[merged["_merge"] == "both"].copy()
    floor = noise_floor(cells)
    notes += [n for n in [basis_note(cells)] if n] + floor_notes(floor, threshold, a, b)
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
    ratios = [time_ratio(row) for _, row in cells.iterrows()]
    cells["time_ratio"] = [r.ratio if r else float("nan") for r in ratios]  # what the verdict judged
    cells["time_basis"] = [r.basis if r else None for r in ratios]
    cells["latency_ratio"] = cells[B.latency_s] / cells[A.latency_s]
    cells["memory_ratio"] = cells[B.peak_memory_bytes] / cells[A.peak_memory_bytes].where(
        cells[A.peak_memory_bytes] > 0
    )
    cells["error_change"] = cells[B.rel_l2_error] - cells[A.rel_l2_error]
    cells["verdict"] = verdicts
    cells["why"] = whys
    # numbers, not strings: a cell only one run has turns the other's seed column to floats (0 vs 0.0)
    if len(cells) and (pd.to_numeric(cells[A.seed]) != pd.to_numeric(cells[B.seed])).any():
        notes.append("some matched cells have different seeds: their errors come from different inputs")
    if len(cells) and (cells[A.device].map(str) != cells[B.device].map(str)).any():
        notes.append(  # harness.inputs draws on the cell's device: torch's CPU and CUDA generators differ
            "some matched cells ran on another device type: CPU and CUDA generators draw other inputs from the same "
            "seed, so their errors come from different inputs (compare error levels, not exact values)"
        )
    changed = cells[cells[A.backend].map(str) != cells[B.backend].map(str)]  # map: astype(str) makes None NaN
    if len(changed):
        notes.append(
            f"{len(changed)} matched cell(s) ran on another backend in B (e.g. {changed[A.backend].iloc[0]} -> {changed[B.backend].iloc[0]})"
        )
    return Comparison(
        cells.reset_index(drop=True), only_a.reset_index(drop=True), only_b.reset_index(drop=True), notes, floor
    )


def _keyed(run: AnalysedRun, notes: list[str]) -> pd.DataFrame:
    """The run's rows with their match key, one per key (the last row of a cell measured twice)."""
    frame = run.frame.copy()
    columns = ["match_key", *CELL_FIELDS, COL.series, COL.status, COL.reason, COL.backend, *MEASURED]
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


# ---- the output ------------------------------------------------------------------------------------
def summary_lines(comparison: Comparison, a: AnalysedRun, b: AnalysedRun, *, limit: int | None = None) -> list[str]:
    """The printed summary: what was compared, counts, and the flagged cells (the first `limit`, or all)."""
    cells = comparison.cells
    lines = [
        f"A: {a.path}  ({_machine(a)})",
        f"B: {b.path}  ({_machine(b)})",
        f"{len(cells)} matched cells: {len(comparison.regressions)} regressions, {len(comparison.improvements)} improvements, "
        f"{len(comparison.noisy)} latency changes under load or noise (not counted), "
        f"{len(comparison.inconclusive)} timeouts under load inconclusive (not counted); "
        f"{len(comparison.only_a)} only in A, {len(comparison.only_b)} only in B",
    ]
    lines += [f"note: {n}" for n in comparison.notes]
    ok = cells[(cells[A.status] == "ok") & (cells[B.status] == "ok")]
    if len(ok):
        lines.append("geometric mean B/A per series (ok in both): absolute latency; time judged inside the cells")
        for series, group in ok.groupby(B.series, sort=True):
            ratios = group["latency_ratio"][np.isfinite(group["latency_ratio"]) & (group["latency_ratio"] > 0)]
            if len(ratios):
                judged = group["time_ratio"][group["time_basis"].isin(("speedup", "reference"))]
                inside = f"; {_geomean(judged):.2f}x inside the cells" if len(judged) else ""
                lines.append(f"  {series:<32} {_geomean(ratios):.2f}x over {len(ratios)} cells{inside}")
    flagged = cells[cells["verdict"] != "same"].sort_values(["verdict", "latency_ratio"], ascending=[False, False])
    if len(flagged):
        lines.append("flagged cells:")
        for _, r in flagged.head(limit).iterrows():
            lines.append(f"  {r['verdict'].upper():<11} {_cell_name(r)}: {r['why']}")
        if limit is not None and len(flagged) > limit:
            lines.append(f"  ... and {len(flagged) - limit} more (all in compare.md and compare.csv)")
    return lines


def write_outputs(comparison: Comparison, a: AnalysedRun, b: AnalysedRun, out: Path) -> list[Path]:
    """compare.csv (every matched cell, raw numbers) and compare.md (summary, and the flagged cells side by side in the
    report's columns: harness.report.tables) in `out`."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"--out {out}: cannot create that folder ({exc.strerror or exc}); pass a folder path"
        ) from None
    # each side's config: a searched knob may have found another value in each run
    sides = [name + side for name in (COL.config, COL.status, COL.backend, *MEASURED) for side in (SUFFIX_A, SUFFIX_B)]
    cell = [name for name in CELL_FIELDS if name != "config"]
    columns = [*cell, A.series, *sides, "time_ratio", "time_basis", "latency_ratio", "memory_ratio", "error_change"]
    columns += ["verdict", "why"]
    csv_path = out / "compare.csv"
    frame = comparison.cells[columns].rename(columns={A.series: COL.series})
    for column in (A.config, B.config):
        frame[column] = [canonical(c) if isinstance(c, dict) else c for c in frame[column]]
    text = io.StringIO()
    inert_csv_frame(frame).to_csv(text, index=False)  # no cell a spreadsheet would run as a formula
    write_plain(csv_path, text.getvalue())
    md_path = out / "compare.md"
    md = [f"# Compare {inert_markdown(a.name)} (A) with {inert_markdown(b.name)} (B)", ""] + [
        f"- {inert_markdown(line)}" if not line.startswith("  ") else f"    - {inert_markdown(line.strip())}"
        for line in summary_lines(comparison, a, b)
    ]
    md += _flagged_table(comparison.cells[comparison.cells["verdict"] != "same"])
    write_plain(md_path, "\n".join(md) + "\n")
    return [csv_path, md_path]


def _flagged_table(flagged: pd.DataFrame) -> list[str]:
    """The flagged cells as a Markdown table: each compared column (harness.report.tables) as 'A -> B'."""
    if not len(flagged):
        return []
    shown = [c for c in COLUMNS if c.compared]
    lines = [
        "",
        "| verdict | cell | " + " | ".join(f"{c.header} A -> B" for c in shown) + " |",
        "|" + "---|" * (2 + len(shown)),
    ]
    for _, r in flagged.iterrows():
        side = {x: pd.Series({k[: -len(x)]: v for k, v in r.items() if k.endswith(x)}) for x in (SUFFIX_A, SUFFIX_B)}
        texts = [
            " -> ".join(
                c.text(side[x]) if side[x].get(COL.status) == "ok" else str(side[x].get(COL.status))
                for x in (SUFFIX_A, SUFFIX_B)
            )
            for c in shown
        ]
        cells = [str(r["verdict"]), _cell_name(r), *texts]
        lines.append("| " + " | ".join(md_cell(c) for c in cells) + " |")
    return lines


def _geomean(ratios: pd.Series) -> float:
    return float(np.exp(np.log(ratios.astype(float)).mean()))


def _machine(run: AnalysedRun) -> str:
    env = run.run.env
    return ", ".join(
        str(x)
        for x in (env.get("gpu") or env.get("cpu"), f"torch {env.get('torch')}", f"commit {env.get('git_commit')}")
        if x
    )


def _cell_name(r: pd.Series) -> str:
    """'sliding_window@0.05 N=4096 inputs local float32 D=64 non-causal forward' (axes at their default left out)."""
    names = [
        k for k in CELL_FIELDS if k not in ("variant", "config", "device", "batch", "heads", "seed", "matched_budget")
    ]
    return " ".join([str(r[A.series]), *describe(r, names)])
