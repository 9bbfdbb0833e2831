"""harness.report.study_results: the studies' .json results become report sections and shape the recommendation."""

from __future__ import annotations

import pytest

from harness.report import write_report
from harness.report.render import render_markdown
from harness.report.study_results import model_eval_table, study_rows, tasks_table
from harness.studies.results_io import write_table
from tests.helpers.synthetic_run import write_run

TASK_ROWS = [
    {
        "task": "mqar",
        "variant": "dense",
        "seq_len": 128,
        "status": "ok",
        "accuracy": 0.71,
        "delta_to_dense": 0.0,
        "chance": 1 / 32,
    },
    {
        "task": "mqar",
        "variant": "linformer",
        "config": {"k": 8, "max_seq_len": 4096},
        "seq_len": 128,
        "status": "ok",
        "accuracy": 0.04,
        "delta_to_dense": -0.67,
        "chance": 1 / 32,
    },
    {
        "task": "mqar",
        "variant": "chunked",
        "seq_len": 128,
        "status": "ok",
        "accuracy": 0.70,
        "delta_to_dense": -0.01,
        "chance": 1 / 32,
    },
    {
        "task": "mqar",
        "variant": "sliding_window",
        "seq_len": 128,
        "status": "unsupported",
        "accuracy": None,
        "reason": "needs\na GPU",
        "chance": 1 / 32,
    },
]
EVAL_ROWS = [
    {
        "variant": "distilled",
        "max_len": 128,
        "seq_len_mean": 101.4,
        "status": "ok",
        "cosine_mean": 0.9255,
        "cosine_min": 0.85,
        "retrieval_agreement": 0.6875,
    },
    {
        "variant": "chunked",
        "max_len": 128,
        "seq_len_mean": 101.4,
        "status": "ok",
        "cosine_mean": 1.0,
        "cosine_min": 1.0,
        "retrieval_agreement": 1.0,
    },
    {"variant": "linformer", "max_len": 128, "seq_len_mean": 101.4, "status": "error", "reason": "ValueError: k > N"},
]


@pytest.mark.slow
def test_model_eval_and_tasks_results_get_sections_and_shape_the_recommendation(tmp_path):
    run = write_run(tmp_path / "run")
    write_table(run, "tasks", TASK_ROWS, {"preset": "cpu"})
    write_table(run, "model_eval", EVAL_ROWS, {"model": "all-MiniLM-L6-v2"})
    # The report reads the .json; a .md beside it is for people and is never parsed.
    (run / "tasks.md").write_text("| task | variant |\n|---|---|\n| from | markdown |\n")
    write_report(run, maps=False)
    md = (run / "report.md").read_text()
    assert "## Inside a pretrained model (model-eval)" in md
    assert "| distilled | 128 | 101 | 0.92550 | 0.85000 | 0.688 |  |" in md
    assert "| linformer | 128 | 101 | - | - | - | error: ValueError: k > N |" in md
    assert (
        "## Trained from scratch on long-range tasks (tasks)" in md
        and "| mqar | linformer(k=8) | 0.040 (-0.670) |" in md
    )
    assert "| mqar | dense | 0.710 |" in md and "| mqar | sliding_window | unsupported: needs a GPU |" in md
    assert "| from | markdown |" not in md
    assert (
        "these lose more than 5% accuracy against dense: linformer(k=8) (mqar N=128: -0.67)" in md
    )  # non-default fields named
    assert "chunked (" not in md.split("**Trained tasks:**")[1].split("\n")[0]  # -0.01 is within the flag
    assert "below cosine 0.99: distilled (cosine 0.925 at 128 tokens)" in md
    assert "<table>" in (run / "report.html").read_text().split("Inside a pretrained model")[1]


@pytest.mark.slow
def test_the_report_shows_the_table_the_study_wrote_into_its_md(tmp_path):
    from harness.studies import model_eval, tasks

    run = write_run(tmp_path / "run")
    write_table(run, "tasks", TASK_ROWS, {})
    write_table(run, "model_eval", EVAL_ROWS, {})
    write_report(run, maps=False)
    md = (run / "report.md").read_text()
    for study, rows, table in ((tasks, TASK_ROWS, tasks_table), (model_eval, EVAL_ROWS, model_eval_table)):
        study_md = render_markdown(study.summary(rows))
        shown = render_markdown([table(rows)])
        assert study_md.startswith(shown.rstrip("\n")) and shown.strip() in md


@pytest.mark.slow
def test_a_study_file_that_cannot_be_read_is_said_not_skipped(tmp_path):
    run = write_run(tmp_path / "run")
    (run / "tasks.json").write_text("{not json")
    assert study_rows(run, "tasks") == [] and study_rows(run, "model_eval") is None
    write_report(run, maps=False)
    md = (run / "report.md").read_text()
    assert "## Trained from scratch on long-range tasks (tasks)" in md and "tasks.json has no readable rows." in md
    assert "Inside a pretrained model" not in md and "**Trained tasks:**" not in md
