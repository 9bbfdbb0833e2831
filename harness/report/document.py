"""write_report: a run folder's report.md, self-contained report.html and PNG figures, from the run analysed once.

Everything shown is computed from the analysed run (harness.report.analysed: rows.jsonl and spec.toml, read once)
and the studies' .json files beside it; failed cells are shown with their reason, never dropped. The page is built once
as a list of blocks and rendered twice (harness.report.render).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from harness.report import findings, overview, scaling, tables
from harness.report.analysed import AnalysedRun, analyse
from harness.report.figures import figure_section
from harness.report.heatmaps import MapOptions
from harness.report.published import published_comparison
from harness.report.render import Block, Fold, Heading, Paragraph, render_html, render_markdown
from harness.report.study_results import study_caveats, study_sections
from harness.safe_files import check_run_folder, write_plain

# the figure sections after the scaling tables, in page order: (Figure.section, its heading)
SECTIONS = (
    ("measured", "Figures"),
    ("decode", "Decoding"),
    ("distributions", "Attention distributions of the inputs"),
    ("maps", "Effective attention maps"),
)
NO_ROWS = (
    "**This run has no rows**: no cell finished (the run may have been killed before the first cell, or every line "
    "was unreadable). Nothing to answer."
)
NOTHING_OK = (
    "**No cell ran successfully** in this run, so there is no answer, and no figures or fits; the tables "
    "below give each cell's status and reason."
)


def write_report(
    run: "str | Path | AnalysedRun",
    *,
    maps: bool = True,
    maps_n: int = 64,
    maps_inputs: str | None = None,
    maps_calibrate: bool = True,
    budgets: Sequence[float] | None = None,
    plugins: Sequence[str] = (),
) -> list[Path]:
    """Write report.md, report.html and the figures (PNG) into the run folder; return the paths written. On a clock
    other than the run's own (`report --clock cpu` of a wall-clock run) they go to RUN_DIR/report-<clock>/ instead,
    beside the run's own page, never over it.

    Args:
        run: the run folder (rows.jsonl, env.json, spec.toml), or the run already analysed (harness.report.analyse).
        maps: draw the effective attention maps (runs each variant once on CPU at N = maps_n).
        maps_n: N = M = D of the maps.
        maps_inputs: input distribution of the maps (default: the first of local, global, lowrank,
            gaussian that the run measured).
        maps_calibrate: draw learnable variants in the fitted state the sweep stored (RUN_DIR/fitted/; one without
            a stored fit is refused by name, never fitted again); False draws them as built, which shows an untrained
            starting point rather than what the sweep measured.
        budgets: error budgets of the answer (in the run's metric); None: the run's own (its spec.toml's error_budgets,
            else harness.report.analysis.DEFAULT_BUDGETS). Only for a folder: an analysed run has its budgets.
        plugins: plugin modules or files the maps' child process imports (the run's variants).
    Raises:
        harness.errors.UsageError: run is not a run folder.
    """
    analysed = run if isinstance(run, AnalysedRun) else analyse(run, budgets=budgets)
    frame, folder, out = analysed.frame, analysed.path, _report_folder(analysed)
    options = MapOptions(draw=maps, n=maps_n, inputs=maps_inputs, fitted=maps_calibrate, plugins=plugins)
    title = f"attnsuite report: {analysed.name}"
    written, opening = _answer(analysed, out)
    opening = [Heading(1, title)] + _clock_page_note(analysed, out) + opening
    opening += [Paragraph(f"Note: {n}") for n in analysed.run.notes]
    blocks = overview.environment(analysed.run.env, frame) + overview.devices(frame)
    if len(frame):
        blocks += overview.outcome(frame)
    if analysed.ok:
        blocks += scaling.scaling(frame)
        blocks += scaling.layer_share(frame)
        for section, heading in SECTIONS:
            paths, figures = figure_section(analysed, out, section, options)
            written += paths
            blocks += [Heading(2, heading)] + figures if figures else []
        blocks += published_comparison(frame, analysed.run.env)
    if len(frame):
        blocks += tables.cell_tables(analysed)
    blocks += study_sections(folder, images_from="" if out == folder else "../")
    blocks += overview.spec(analysed.run.spec_text)
    blocks = opening + folded(blocks)  # the page opens on the answer; each later section one click away
    md_path, html_path = out / "report.md", out / "report.html"
    write_plain(md_path, render_markdown(blocks))  # never through a link planted in the run folder
    write_plain(html_path, render_html(blocks, out, title=title))
    return [md_path, html_path] + written


def folded(blocks: list[Block]) -> list[Block]:
    """Each level-2 section as a Fold (its heading, and the blocks up to the next level-2 heading); blocks before
    the first section stay as they are."""
    out: list[Block] = []
    for block in blocks:
        if isinstance(block, Heading) and block.level == 2:
            out.append(Fold(block.text, ()))
        elif out and isinstance(out[-1], Fold):
            out[-1] = Fold(out[-1].title, out[-1].blocks + (block,))
        else:
            out.append(block)
    return out


def _report_folder(analysed: AnalysedRun) -> Path:
    """analysed.report_folder, made (a real folder: a link or a file in its place is refused by name)."""
    out = analysed.report_folder
    if out != analysed.path:
        check_run_folder(analysed.path, folders=(out.name,))
        out.mkdir(exist_ok=True)
    return out


def _clock_page_note(analysed: AnalysedRun, out: Path) -> list[Block]:
    """The first line of a page on another clock than the run's own: which clock, and where the run's own page is."""
    if out == analysed.path:
        return []
    return [
        Paragraph(
            f"**This page answers on the {analysed.clock} clock**; the run's own report, on the "
            f"{analysed.own_clock} clock, is ../report.html (and ../report.md), unchanged."
        )
    ]


def _answer(analysed: AnalysedRun, out: Path) -> tuple[list[Path], list[Block]]:
    """The report's opening: the answer (or why there is none), the studies' caveats and the load warning beside it,
    then the memory budget's answer; with the figures written for them (into `out`)."""
    frame, folder = analysed.frame, analysed.path
    load_warnings = [Paragraph(f"**{n}**") for n in overview.load_warning(frame)]
    if not analysed.ok:
        return [], [
            Heading(2, "Which one should I use"),
            Paragraph(NOTHING_OK if len(frame) else NO_ROWS),
        ] + load_warnings
    written, blocks = findings.recommendation(analysed, out)
    blocks += [Paragraph(caveat) for caveat in study_caveats(folder)]
    blocks += load_warnings  # beside the answer it qualifies, before the memory-budget section
    paths, section = findings.memory_budget_section(analysed, out)
    return written + paths, blocks + section
