"""A config that several error budgets' searches find at one setting is measured once; its numbers serve each budget's
row (each keeps its own id and search), counted by the measurements made, not by timings."""

from __future__ import annotations

import pytest

import harness.measure.phase as phase
from harness.commands import main
from harness.measure import MeasureContext, measure_cell
from harness.schema import Cell
from harness.store import load_rows
from tests.harness.measure.test_tuning import FAST, RUN, matched


@pytest.fixture
def measurements(monkeypatch):
    """The cells whose found config went through the measurement path (run_phase), in order."""
    made = []
    original = phase.run_phase

    def counted(kind, *args, **kwargs):
        made.append(kind.cell)
        return original(kind, *args, **kwargs)

    monkeypatch.setattr(phase, "run_phase", counted)
    return made


def test_a_config_two_budgets_find_is_measured_once_and_serves_both_rows(measurements):
    context = MeasureContext()
    first = measure_cell(matched("sliding_window", 0.1), FAST, RUN, context).to_dict()
    second = measure_cell(matched("sliding_window", 0.1001), FAST, RUN, context).to_dict()
    assert first["status"] == second["status"] == "ok", (first["reason"], second["reason"])
    assert first["config"] == second["config"]  # both searches found this window
    assert len(measurements) == 1 and measurements[0].matched_budget == 0.1
    for key in ("latency_s", "rel_l2_error", "speedup", "peak_memory_bytes", "backend", "flops"):
        assert second[key] == first[key], key
    assert second["tuning"]["measured_with"] == first["cell_id"] and "measured_with" not in first["tuning"]
    assert second["tuning"]["budget"] == 0.1001  # its own search, its own budget
    assert second["cell_id"] != first["cell_id"] and Cell.from_dict(second).cell_id == second["cell_id"]


def test_the_shared_row_reports_the_load_its_measurement_was_timed_under(measurements, monkeypatch):
    import harness.measure.cell as cell_module

    loads = iter([0.1, 0.1, 9.0, 9.0])  # each cell reads the load at its start and its end
    monkeypatch.setattr(cell_module, "load_per_cpu", lambda: next(loads))
    context = MeasureContext()
    first = measure_cell(matched("sliding_window", 0.1), FAST, RUN, context).to_dict()
    second = measure_cell(matched("sliding_window", 0.1001), FAST, RUN, context).to_dict()
    assert second["tuning"]["measured_with"] == first["cell_id"]
    assert first["load_per_cpu"] == second["load_per_cpu"] == 0.1  # not the 9.0 of the second cell's own moments
    assert (second["noisy"], second["noise_reason"]) == (first["noisy"], first["noise_reason"])


def test_a_budget_that_finds_another_config_is_measured_itself(measurements):
    context = MeasureContext()
    loose = measure_cell(matched("sliding_window", 0.3), FAST, RUN, context).to_dict()
    tight = measure_cell(matched("sliding_window", 0.072), FAST, RUN, context).to_dict()
    assert tight["status"] == "ok" and loose["config"]["window"] < tight["config"]["window"]
    assert len(measurements) == 2 and "measured_with" not in tight["tuning"]
    # the same config at another length is another measurement
    longer = measure_cell(matched("sliding_window", 0.3, N=256), FAST, RUN, context).to_dict()
    assert longer["status"] == "ok" and len(measurements) == 3 and "measured_with" not in longer["tuning"]


@pytest.mark.slow  # a whole sweep, report or compile: seconds on 2 cores (the full suite runs it)
def test_a_sweep_writes_a_row_per_budget_and_measures_each_config_found_once(measurements, tmp_path, capsys):
    argv = ["sweep", "--device", "cpu", "--variants", "sliding_window", "--seq-lens", "64,128", "--batch", "1"]
    argv += [
        "--heads",
        "2",
        "--head-dims",
        "16",
        "--inputs",
        "local",
        "--error-budgets",
        "0.1,0.1001",
        "--causals",
        "false",
    ]
    argv += ["--time-budget", "0.01", "--repeats", "1", "--quiet", "--out", str(tmp_path), "--run-id", "r"]
    assert main(argv) == 0, capsys.readouterr().err
    rows = [row.to_dict() for row in load_rows(tmp_path / "r")]
    assert len(rows) == 4 and {r["status"] for r in rows} == {"ok"}  # a row per budget and length, ids as planned
    assert sorted(r["matched_budget"] for r in rows) == [0.1, 0.1, 0.1001, 0.1001]
    assert all(Cell.from_dict(r).cell_id == r["cell_id"] for r in rows)
    configs = {(r["seq_len"], r["config"]["window"], r["config"]["sinks"]) for r in rows}
    assert len(measurements) == len(configs) == 2  # one measurement per length: both budgets found one config
    for n in (64, 128):
        assert len({r["latency_s"] for r in rows if r["seq_len"] == n}) == 1, n


def test_a_measurement_whose_variant_wrote_into_its_inputs_serves_no_other_budget(measurements, monkeypatch):
    """The first budget's cell ends `error` (its variant changed q in place, found after its stages): the second budget,
    whose search finds the same config, measures it itself instead of taking the refused numbers as `ok`."""
    context = MeasureContext()
    checks = iter([["q"], []])  # what each cell's input check finds written: the first cell's variant wrote into q
    original = context.check_inputs
    monkeypatch.setattr(context, "check_inputs", lambda: next(checks) or original())
    first = measure_cell(matched("sliding_window", 0.1), FAST, RUN, context).to_dict()
    second = measure_cell(matched("sliding_window", 0.1001), FAST, RUN, context).to_dict()
    assert first["status"] == "error" and "changed its input q" in first["reason"]
    assert second["status"] == "ok" and "measured_with" not in second["tuning"]
    assert len(measurements) == 2 and second["config"] == first["config"]
