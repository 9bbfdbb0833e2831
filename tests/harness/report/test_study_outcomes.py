"""A study row's outcome (harness.report.study_outcomes): what a refusal, an error and a cut reason become."""

from __future__ import annotations

from harness.report.study_outcomes import failed, outcome_text, succeeded, with_outcome
from variants import NotSupportedError


def test_a_refusal_is_unsupported_with_its_reasons_and_an_error_names_its_type():
    row = {"variant": "v", "status": "ok", "reason": None}
    refused = failed(row, NotSupportedError("v", ["no causal", "no GQA"]))
    assert refused == {"variant": "v", "status": "unsupported", "reason": "no causal; no GQA"}
    assert failed(row, ValueError("bad window"))["reason"] == "ValueError: bad window"
    assert row["status"] == "ok"  # a new dict: the row given is left as it was
    assert succeeded(row) and not succeeded(refused) and not succeeded({"variant": "v"})
    assert with_outcome(row, "nonfinite", "NaN") == {"variant": "v", "status": "nonfinite", "reason": "NaN"}


def test_outcome_text_is_one_line_cut_where_asked():
    row = {"status": "error", "reason": "first line\n" + "x" * 200}
    assert outcome_text(row, width=None) == "error: first line " + "x" * 200
    assert outcome_text(row, 20) == "error: first line xxxxxx..."  # 17 characters and "..."
    assert len(outcome_text(row)) == len("error: ") + 90
    assert outcome_text({"status": "oom", "reason": None}) == "oom: "
