"""compare's output: the printed summary, compare.md (the flagged cells side by side in the report's columns,
harness.report.columns) and compare.csv (every matched cell, raw numbers)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd

from harness.errors import UsageError
from harness.report.analysed import AnalysedRun
from harness.report.compare import MEASURED, Comparison
from harness.report.render import inert_markdown, md_cell
from harness.report.tables import COLUMNS
from harness.schema import CELL_FIELDS, canonical, describe
from harness.store import inert_csv_frame, write_plain


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
    ok = cells[(cells["status_a"] == "ok") & (cells["status_b"] == "ok")]
    if len(ok):
        lines.append("geometric mean latency ratio B/A per series (ok in both):")
        for series, group in ok.groupby("series_b", sort=True):
            ratios = group["latency_ratio"][np.isfinite(group["latency_ratio"]) & (group["latency_ratio"] > 0)]
            if len(ratios):
                lines.append(f"  {series:<32} {float(np.exp(np.log(ratios).mean())):.2f}x over {len(ratios)} cells")
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
    report's columns: harness.report.columns) in `out`."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"--out {out}: cannot create that folder ({exc.strerror or exc}); pass a folder path"
        ) from None
    # each side's config: a searched knob may have found another value in each run
    sides = [f"{name}_{side}" for name in ("config", "status", "backend", *MEASURED) for side in ("a", "b")]
    cell = [name for name in CELL_FIELDS if name != "config"]
    columns = [*cell, "series_a", *sides, "latency_ratio", "memory_ratio", "error_change", "verdict", "why"]
    csv_path = out / "compare.csv"
    frame = comparison.cells[columns].rename(columns={"series_a": "series"})
    for column in ("config_a", "config_b"):
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
    """The flagged cells as a Markdown table: each compared column (harness.report.columns) as 'A -> B'."""
    if not len(flagged):
        return []
    shown = [c for c in COLUMNS if c.compared]
    lines = [
        "",
        "| verdict | cell | " + " | ".join(f"{c.header} A -> B" for c in shown) + " |",
        "|" + "---|" * (2 + len(shown)),
    ]
    for _, r in flagged.iterrows():
        side = {x: pd.Series({k[:-2]: v for k, v in r.items() if k.endswith(f"_{x}")}) for x in ("a", "b")}
        texts = [
            " -> ".join(c.text(side[x]) if side[x].get("status") == "ok" else str(side[x].get("status")) for x in "ab")
            for c in shown
        ]
        cells = [str(r["verdict"]), _cell_name(r), *texts]
        lines.append("| " + " | ".join(md_cell(c) for c in cells) + " |")
    return lines


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
    return " ".join([str(r["series_a"]), *describe(r, names)])
