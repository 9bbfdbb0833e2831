"""The Python entry (`from harness import sweep, open_run`): the same run folder as the command, analysed, in one call."""

from __future__ import annotations

import json

import pytest

import harness
from harness.api import cli_values
from harness.errors import UsageError

TINY = dict(
    device="cpu",
    heads=1,
    head_dims=8,
    inputs="gaussian",
    time_budget_s=0.005,
    repeats=1,
    error_rows=8,
    error_budgets="",
)


def test_python_values_become_the_flags_text():
    cli = cli_values({"seq_lens": [16, 32], "variants": ["dense", "sliding_window:window=4,sinks=1"], "causals": True})
    # each variant entry one use of the repeatable --variants (an entry holds commas); lists of a plain key joined
    assert cli == {"seq_lens": "16,32", "variants": ["dense", "sliding_window:window=4,sinks=1"], "causals": "true"}
    assert cli_values({"variants": "dense,chunked", "error_budgets": ""}) == {
        "variants": ["dense,chunked"],
        "error_budgets": "",
    }


def test_an_unknown_setting_names_the_close_key():
    with pytest.raises(UsageError, match=r"unknown setting 'seq_len'.*Did you mean 'seq_lens'\?"):
        harness.sweep(seq_len=[16])


@pytest.mark.slow  # a whole sweep, report or compile: seconds on 2 cores (the full suite runs it)
def test_sweep_returns_the_run_analysed_with_its_frame_and_figures(tmp_path):
    run = harness.sweep(variants=["dense", "chunked"], seq_lens=[16, 32], out=tmp_path, run_id="py", **TINY)
    assert run.path == tmp_path / "py" and (run.path / "report.html").is_file()
    rows = [json.loads(line) for line in (run.path / "rows.jsonl").read_text().splitlines()]
    frame = run.frame
    assert len(frame) == len(rows) == 4 and set(frame["variant"]) == {"dense", "chunked"}
    assert sorted(frame["seq_len"]) == [16, 16, 32, 32] and (frame["status"] == "ok").all()
    assert sorted(frame["latency_s"]) == sorted(r["latency_s"] for r in rows)  # the rows as written, not re-measured
    assert "latency_vs_n" in run.figures and run.figures["latency_vs_n"].read_bytes()[:4] == b"\x89PNG"
    again = harness.open_run(run.path)
    assert again.frame["latency_s"].tolist() == frame["latency_s"].tolist() and again.budgets == run.budgets
    assert harness.open_run(run.path, budgets=[0.5]).budgets == (0.5,)
