"""write_report: a run folder's report.md, self-contained report.html and PNG figures, from its rows.

Everything shown is computed from rows.jsonl (harness.report.analysis) and the studies' .json
files beside it; failed cells are shown with their reason, never dropped. The page is built once
as a list of blocks (harness.report.page) and rendered twice (harness.report.render).
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from harness.report import cells, choice, figures, findings, overview, scopes
from harness.report.page import Block, Heading, Paragraph
from harness.report.render import render_html, render_markdown
from harness.report.study_results import study_caveats, study_sections
from harness.report.vs_published import published_comparison
from harness.store import load_run

NO_ROWS = ("**This run has no rows**: no cell finished (the run may have been killed before the first cell, or every line "
           "was unreadable). Nothing to answer.")
NOTHING_OK = ("**No cell ran successfully** in this run, so there is no answer, and no figures or fits; the tables "
              "below give each cell's status and reason.")


def write_report(
    run_dir: str | Path,
    *,
    maps: bool = True,
    maps_n: int = 64,
    maps_inputs: str | None = None,
    maps_calibrate: bool = True,
    budgets: Sequence[float] | None = None,
    plugins: Sequence[str] = (),
) -> list[Path]:
    """Write report.md, report.html and the figures (PNG) into the run folder; return the paths written.

    Args:
        run_dir: the run folder (rows.jsonl, env.json, spec.toml).
        maps: draw the effective attention maps (runs each variant once on CPU at N = maps_n).
        maps_n: N = M = D of the maps.
        maps_inputs: input distribution of the maps (default: the first of local, global, lowrank,
            gaussian that the run measured).
        maps_calibrate: fit learnable variants at maps_n before drawing (a few seconds each); False draws
            them as built, which shows an untrained starting point rather than what the sweep measured.
        budgets: error budgets of the answer (in the run's metric); None: the run's own (its spec.toml's error_budgets,
            else harness.report.budgets.DEFAULT_BUDGETS).
        plugins: plugin modules or files the maps' child process imports (the run's variants).
    Raises:
        harness.errors.UsageError: run_dir is not a run folder.
    """
    run = load_run(run_dir)
    title = f"attnsuite report: {run.name}"
    frame = choice.answer_frame(run.rows, run.spec_text, budgets)
    ok = bool(len(frame) and (frame["status"] == "ok").any())
    written: list[Path] = []
    blocks: list[Block] = [Heading(1, title)]
    if ok:
        paths, section = findings.recommendation(frame, run.env, run.path)
        written += paths
        blocks += section + [Paragraph(caveat) for caveat in study_caveats(run.path)]
    else:
        blocks += [Heading(2, "Which one should I use"), Paragraph(NOTHING_OK if len(frame) else NO_ROWS)]
    blocks += [Paragraph(f"**{n}**") for n in overview.load_warning(frame)]
    blocks += [Paragraph(f"Note: {n}") for n in run.notes]
    blocks += overview.environment(run.env, frame) + overview.devices(frame)
    if len(frame):
        blocks += overview.outcome(frame)
    if ok:
        blocks += findings.scaling(frame)
        blocks += scopes.layer_share(frame)
        paths, section = figures.figures(frame, run.path)
        written += paths
        blocks += section
        paths, section = scopes.decode_figures(frame, run.path)
        written += paths
        blocks += section
        if maps:
            paths, section = figures.maps(frame, run.path, n=maps_n, inputs=maps_inputs, calibrate=maps_calibrate,
                                          timeout_s=_cell_timeout(run.spec_text), plugins=plugins)
            written += paths
            blocks += section
        blocks += published_comparison(frame, run.env)
    if len(frame):
        blocks += cells.cell_tables(frame)
    blocks += study_sections(run.path)
    blocks += overview.spec(run.spec_text)
    md_path, html_path = run.path / "report.md", run.path / "report.html"
    md_path.write_text(render_markdown(blocks), encoding="utf-8")
    html_path.write_text(render_html(blocks, run.path, title=title), encoding="utf-8")
    return [md_path, html_path] + written


def _cell_timeout(spec_text: str | None) -> float | None:
    """The run's per-cell limit (spec.toml's cell_timeout_s), which the maps' panels get too; None if unknown."""
    import tomllib

    try:
        value = tomllib.loads(spec_text or "").get("cell_timeout_s")
    except tomllib.TOMLDecodeError:
        return None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None
