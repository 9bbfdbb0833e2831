"""A cell that hits the per-cell time limit spares its series every longer N, as an OOM does, and says so."""

from __future__ import annotations

import pytest

from harness.runner import run_sweep
from harness.runner import sweep_spec as build_spec
from harness.store import read_rows
from tests.helpers.load import load_scaled

TINY = {
    "device": "cpu",
    "heads": "1",
    "head_dims": "8",
    "time_budget_s": "0.005",
    "repeats": "1",
    "error_rows": "8",
    "inputs": "gaussian",
    "error_budgets": "",
}


@pytest.mark.slow
def test_a_timeout_spares_the_longer_lengths_of_its_series_only(tmp_path, test_variants, no_report):
    limit = f"{load_scaled(5):.0f}"  # dense's tiny cells (warm-up, profiler, timing) fit in it on a busy machine too
    spec = build_spec(
        cli={**TINY, "variants": "t_sleep:seconds=1000,dense", "seq_lens": "16,32,64", "cell_timeout_s": limit}
    )
    run_dir = run_sweep(spec, out=tmp_path, run_id="timeout", quiet=True)
    rows = {(r["variant"], r["seq_len"]): r for r in read_rows(run_dir)}
    assert len(rows) == 6
    first = rows[("t_sleep", 16)]
    assert first["status"] == "timeout" and not first["reason"].startswith("not run"), first["reason"]
    for n in (32, 64):  # never tried: each would have cost the limit again
        assert rows[("t_sleep", n)]["status"] == "timeout"
        assert rows[("t_sleep", n)]["reason"] == "not run: timeout at N=16 for the same variant, config and setting"
    assert [rows[("dense", n)]["status"] for n in (16, 32, 64)] == ["ok"] * 3  # another series is not spared
