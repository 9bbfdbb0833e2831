"""The report's attention distributions (harness.report.distributions): the table's means per kind, the panels at the
longest N, and the section on the page, from records written into a run folder as the sweep writes them."""

from __future__ import annotations

import json

import pytest

from harness.executors.distributions import distribution_path
from harness.measure.distribution import KIND_RULE
from harness.report import write_report
from harness.report.distributions import distribution_table, longest, plot_distributions
from tests.helpers.synthetic_run import write_run

KEY = {
    "inputs": "llm", "seq_len": 512, "kv_len": 512, "batch": 1, "heads": 3, "kv_heads": 3, "head_dim": 64,
    "causal": False, "padding": 0.0, "seed": 0,
}  # fmt: skip


def _head(h: int, kind: str, entropy: float, first_4: float, within_16: float) -> dict:
    masses = {"first_1": first_4 / 2, "first_4": first_4, "within_16": within_16, "within_64": 0.7, "within_256": 0.9}
    return {"batch": 0, "head": h, "entropy": entropy, "uniform_entropy": 6.0, **masses, "kind": kind}


def _record(**key) -> dict:
    heads = [_head(0, "sink", 1.0, 0.8, 0.1), _head(1, "sink", 2.0, 0.6, 0.3), _head(2, "diffuse", 5.5, 0.0, 0.05)]
    return {"key": {**KEY, **key}, "rows": 256, "rule": KIND_RULE, "heads": heads}


def test_the_table_has_each_kinds_mean_over_its_heads():
    table = distribution_table([_record()])
    assert table.headers == [
        "inputs", "N", "kind", "heads", "entropy (nats)", "uniform's", "first token", "first 4",
        "within 16", "within 64", "within 256",
    ]  # fmt: skip
    assert table.rows == [
        ["llm", "512", "sink", "2 of 3 (67%)", "1.50", "6.00", "0.35", "0.70", "0.20", "0.70", "0.90"],
        ["llm", "512", "diffuse", "1 of 3 (33%)", "5.50", "6.00", "0.00", "0.00", "0.05", "0.70", "0.90"],
    ]


def test_a_setting_that_differs_between_records_is_a_column():
    table = distribution_table([_record(), _record(causal=True)])
    assert table.headers[2] == "setting"
    assert [row[2] for row in table.rows] == ["non-causal", "non-causal", "causal", "causal"]


def test_the_figure_has_one_panel_per_inputs_at_its_longest_n(tmp_path):
    records = [_record(), _record(seq_len=1024, kv_len=1024), _record(inputs="gaussian")]
    assert [(r["key"]["inputs"], r["key"]["seq_len"]) for r in longest(records)] == [("llm", 1024), ("gaussian", 512)]
    drawn = plot_distributions(records, tmp_path / "distributions.png")
    assert drawn.path.stat().st_size > 10_000
    assert drawn.after[0].text.startswith("A head's kind: sink: mass on the first 4 tokens > 0.5")
    assert len(drawn.after[1].rows) == 6  # 3 records x 2 kinds
    assert plot_distributions([], tmp_path / "none.png") is None


@pytest.mark.slow  # a whole sweep, report or compile: seconds on 2 cores (the full suite runs it)
def test_the_report_shows_the_stored_distributions(tmp_path):
    run = write_run(tmp_path / "run")
    path = distribution_path(run, KEY)
    path.parent.mkdir()
    path.write_text(json.dumps(_record()))
    written = write_report(run, maps=False)
    assert run / "distributions.png" in written
    md = (run / "report.md").read_text()
    section = md.split("## Attention distributions of the inputs")[1].split("\n## ")[0]
    assert "![distributions.png](distributions.png)" in section
    assert "| llm | 512 | sink | 2 of 3 (67%) | 1.50 | 6.00 | 0.35 | 0.70 | 0.20 | 0.70 | 0.90 |" in section


@pytest.mark.slow  # a whole sweep, report or compile: seconds on 2 cores (the full suite runs it)
def test_a_run_without_distributions_has_no_such_section(tmp_path):
    run = write_run(tmp_path / "run")
    write_report(run, maps=False)
    assert "Attention distributions" not in (run / "report.md").read_text()
    assert not (run / "distributions.png").exists()
