"""What a reader sees on the report page: it opens on the answer with each later section folded, tables scroll inside
their box with long texts wrapping, `report --clock cpu` writes a second page beside the run's own, and a run whose
wall-clock answer is refused still shows a winner map, drawn from CPU time and labelled as not a verdict."""

from __future__ import annotations

import re

import pytest

from harness.__main__ import main
from harness.report import write_report
from harness.report.document import folded
from harness.report.render import LONG_CELL, Fold, Heading, Paragraph, Table, render_html, render_markdown
from tests.harness.report.test_clock import _rows as contended_rows
from tests.helpers.synthetic_run import write_run


def test_sections_fold_in_html_and_stay_written_out_in_markdown(tmp_path):
    blocks = folded([Paragraph("before"), Heading(2, "Tables"), Paragraph("t1"), Heading(3, "sub"), Heading(2, "Spec")])
    assert blocks == [
        Paragraph("before"),
        Fold("Tables", (Paragraph("t1"), Heading(3, "sub"))),
        Fold("Spec", ()),
    ]
    page = render_html(blocks, tmp_path, title="t")
    assert "<details><summary><h2>Tables</h2></summary>\n<p>t1</p>\n<h3>sub</h3>\n</details>" in page
    assert "<details open" not in page  # closed: the page opens on what comes before the first section
    assert render_markdown(blocks) == "before\n\n## Tables\n\nt1\n\n### sub\n\n## Spec\n"


def test_a_table_scrolls_in_its_box_and_only_long_cells_wrap(tmp_path):
    long = "x" * LONG_CELL
    page = render_html([Table(["a", "reason"], [["ok", long], ["-", long[:-1]]])], tmp_path, title="t")
    assert '<div class="table"><table>' in page and ".table{overflow-x:auto" in page
    assert page.count('<td class="text">') == 1 and f'<td class="text">{long}</td>' in page
    assert "td.text{white-space:normal;min-width:24em" in page


@pytest.mark.slow  # a whole sweep, report or compile: seconds on 2 cores (the full suite runs it)
def test_the_report_opens_on_the_answer_and_folds_every_later_section(tmp_path):
    run = write_run(tmp_path / "r")
    write_report(run, maps=False)
    page = (run / "report.html").read_text()
    answer_at, first_fold = page.index("<h2>Which one should I use</h2>"), page.index("<details>")
    assert answer_at < first_fold
    summaries = re.findall(r"<summary><h2>(.*?)</h2></summary>", page)
    assert summaries[0] == "Environment" and "Tables" in summaries and summaries[-1] == "Appendix: the spec"
    assert not re.search(r"</details>\s*<h2>", page)  # no section left open after the folds


@pytest.mark.slow  # a whole sweep, report or compile: seconds on 2 cores (the full suite runs it)
def test_report_clock_cpu_writes_a_second_page_and_leaves_the_runs_own_alone(tmp_path, capsys):
    run = write_run(tmp_path / "r", contended_rows(contended=0), spec_text='variants = ["dense"]\n')
    assert main(["report", str(run), "--no-maps"]) == 0
    own = {name: (run / name).read_bytes() for name in ("report.md", "report.html", "winner_map.png")}
    assert main(["report", str(run), "--no-maps", "--clock", "cpu"]) == 0
    assert {name: (run / name).read_bytes() for name in own} == own  # the wall-clock page, unchanged
    cpu = (run / "report-cpu" / "report.md").read_text()
    assert cpu.startswith("# attnsuite report: r\n\n**This page answers on the cpu clock**")
    assert "sliding_window(window=128) 3x" in cpu and "sliding_window(window=128) 3x" not in own["report.md"].decode()
    assert (run / "report-cpu" / "winner_map.png").read_bytes() != own["winner_map.png"]
    assert main(["report", str(run), "--no-maps", "--clock", "wall"]) == 0  # the run's own clock: its own page
    assert not (run / "report-wall").exists()


def test_a_planted_link_in_place_of_the_cpu_page_folder_is_refused(tmp_path, capsys):
    run = write_run(tmp_path / "r", contended_rows(contended=0))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "report-cpu").symlink_to(elsewhere)
    assert main(["report", str(run), "--no-maps", "--clock", "cpu"]) == 2
    assert f"{run / 'report-cpu'} is a symbolic link" in capsys.readouterr().err
    assert list(elsewhere.iterdir()) == []


def test_a_refused_wall_clock_answer_still_shows_a_map_drawn_from_cpu_time(tmp_path):
    run = write_run(tmp_path / "r", contended_rows())  # every timed cell contended: no verdict on the wall clock
    write_report(run, maps=False)
    md = (run / "report.md").read_text()
    answer = md[: md.index("## Environment")]
    assert "**No verdict**: measured under load 14 per CPU" in answer
    assert (
        "**Not a verdict**: the wall clock was contended, so this map is drawn from the timing thread's CPU time"
        in (answer)
    )
    assert "![winner_map.png](winner_map.png)" in answer and (run / "winner_map.png").is_file()
