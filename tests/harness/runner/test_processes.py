"""A sweep's later timing processes (harness.runner.processes): the merge by value on hand-made rows and timings, the
rewrite of rows.jsonl, a budget cell that shares another's measurement, and one real sweep timed in two processes."""

from __future__ import annotations

import json
import math

import pytest

from harness.commands import main
from harness.measure.rounds import ProcessTiming, process_interval
from harness.row import Row
from harness.runner import processes
from harness.runner.processes import TIMINGS_FILE, merged_fields, rewrite_rows, time_in_processes
from harness.schema import Cell
from harness.store import read_rows


def _row(cell_id: str, variant: str = "sliding_window", **fields) -> Row:
    cell = Cell(
        variant=variant, config={}, seq_len=256, kv_len=256, device="cpu", batch=1, heads=1, head_dim=8,
        dtype="float32", causal=False, mode="forward", inputs="gaussian", seed=0,
    )  # fmt: skip
    return Row(cell=cell, cell_id=cell_id, run_id="r", status="ok", **fields)


def _timing(speedup: float, half: float = 0.01, rounds: int = 4, prefix: str = "") -> dict:
    value = f"{prefix}speedup" if prefix else "speedup"
    return {
        value: speedup,
        f"{prefix}speedup_low": speedup * math.exp(-half),
        f"{prefix}speedup_high": speedup * math.exp(half),
        "rounds": rounds,
    }


def test_merged_fields_are_the_process_interval_of_every_process():
    first = _timing(2.0)
    row = _row("a", **first, processes=1, noise_reason="re-timed once: the first blocks disagreed")
    later = [_timing(2.0 * math.exp(0.02)), _timing(2.0 * math.exp(-0.02))]  # s.d. 0.02: narrow, not noisy
    got = merged_fields(row, [first, *later])
    want = process_interval(
        [ProcessTiming(t["speedup"], t["speedup_low"], t["speedup_high"], 4) for t in [first, *later]]
    )
    assert got == pytest.approx(
        {
            "speedup": want.speedup,
            "speedup_low": want.low,
            "speedup_high": want.high,
            "rounds": 12,
            "processes": 3,
            "speedup_process_sd": 0.02,
        }
    )
    assert want.speedup == pytest.approx(2.0) and math.log(want.high / 2.0) == pytest.approx(
        4.303 * 0.02 * math.sqrt(2 / 3)
    )


def test_the_baselines_reference_speedup_is_merged_and_a_wide_interval_is_noisy():
    first = _timing(0.3, prefix="reference_")
    row = _row("d", variant="dense", **first, processes=1)
    got = merged_fields(row, [first, _timing(0.36, prefix="reference_")])
    low, high = first["reference_speedup_low"], first["reference_speedup_high"]
    second = ProcessTiming(0.36, 0.36 * math.exp(-0.01), 0.36 * math.exp(0.01), 4)
    want = process_interval([ProcessTiming(0.3, low, high, 4), second])
    assert got["reference_speedup"] == pytest.approx(math.sqrt(0.3 * 0.36)) == pytest.approx(want.speedup)
    assert (got["reference_speedup_low"], got["reference_speedup_high"]) == pytest.approx((want.low, want.high))
    assert "speedup" not in got and got["processes"] == 2
    assert got["noisy"] is True and got["noise_reason"].startswith("reference speed-up over 2 processes wide")


def test_one_usable_process_leaves_the_row_as_it_was():
    first = _timing(2.0)
    assert merged_fields(_row("a", **first, processes=1), [first, {"speedup": None}]) == {}


def test_later_processes_merge_into_rows_jsonl_and_a_shared_measurement_follows(tmp_path, monkeypatch):
    """time_in_processes with the children replaced by hand-made replies: every timing appended to the timings file,
    the paired row merged, the budget row that took its measurement (tuning.measured_with) given the same, the
    unpaired row and the order of rows.jsonl untouched."""
    own = _row("own", **_timing(2.0), processes=1)
    shared = _row("shared", **_timing(2.0), processes=1, tuning={"measured_with": "own"})
    alone = _row("alone", latency_s=0.01)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in (own, shared, alone)))
    replies = {2: _timing(2.0 * math.exp(0.1)), 3: _timing(2.0 * math.exp(-0.1))}
    seen = []

    def fake(todo, job, process, limit):
        seen.append((process, [r.cell_id for r in todo]))
        return [{"timing": replies[process], "failed": None} for _ in todo]

    monkeypatch.setattr(processes, "_retimed", fake)
    spec = type("Spec", (), {"processes": 3, "executor": "local"})()
    job = type("Job", (), {"settings": {"cell_timeout_s": 10.0}})()
    rows = {r.cell_id: r for r in (own, shared, alone)}
    time_in_processes(tmp_path, spec, job, rows, quiet=True)
    assert seen == [(2, ["own"]), (3, ["own"])]
    lines = [json.loads(line) for line in (tmp_path / TIMINGS_FILE).read_text().splitlines()]
    assert [(x["cell_id"], x["process"]) for x in lines] == [("own", 2), ("own", 3)]
    written = read_rows(tmp_path)
    assert [r["cell_id"] for r in written] == ["own", "shared", "alone"]
    half = 4.303 * 0.1 * math.sqrt(2 / 3)
    for r in written[:2]:
        assert r["processes"] == 3 and r["speedup"] == pytest.approx(2.0)
        assert r["speedup_high"] == pytest.approx(2.0 * math.exp(half)) and r["noisy"] is True
    assert written[2]["processes"] is None and written[2]["latency_s"] == 0.01


def test_rewrite_rows_keeps_what_it_does_not_merge(tmp_path):
    rows = [_row("a", latency_s=1.0), _row("b", latency_s=2.0)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in rows))
    rewrite_rows(tmp_path, {"b": _row("b", latency_s=3.0)})
    assert [(r["cell_id"], r["latency_s"]) for r in read_rows(tmp_path)] == [("a", 1.0), ("b", 3.0)]


@pytest.mark.slow
def test_a_sweep_times_its_paired_cells_in_three_processes(tmp_path, no_report):
    """Real: dense (paired with the reference kernel), sliding_window (paired with dense) and distilled (a learnable
    variant: the later processes time the run's stored fit, never fit again) timed again in two fresh children."""
    args = ["sweep", "--variants", "dense,sliding_window,distilled", "--seq-lens", "64", "--heads", "1"]
    args += ["--head-dims", "8", "--inputs", "gaussian", "--error-budgets", "", "--time-budget", "0.02"]
    args += ["--calibration-steps", "2", "--processes", "3", "--quiet", "--out", str(tmp_path), "--run-id", "p3"]
    assert main(args) == 0
    run = tmp_path / "p3"
    rows = {r["variant"]: r for r in read_rows(run)}
    assert len(read_rows(run)) == 3
    lines = [json.loads(line) for line in (run / TIMINGS_FILE).read_text().splitlines()]
    assert sorted(x["process"] for x in lines) == [2, 2, 2, 3, 3, 3]
    assert [x["failed"] for x in lines] == [None] * 6, lines
    assert (
        rows["dense"]["processes"] == 3
        and rows["dense"]["reference_speedup_low"] < rows["dense"]["reference_speedup_high"]
    )
    for name in ("sliding_window", "distilled"):
        assert rows[name]["processes"] == 3 and rows[name]["speedup_process_sd"] is not None, rows[name]
