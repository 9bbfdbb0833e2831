"""A sweep's later timing processes (harness.runner.processes): the merge by value on hand-made rows and timings, the
rewrite of rows.jsonl, a budget cell that shares another's measurement, and one real sweep timed in two processes."""

from __future__ import annotations

import json
import math

import pytest

from harness.child import ChildFailed
from harness.commands import main
from harness.measure.rounds import ProcessTiming, process_interval
from harness.row import Row
from harness.runner import processes
from harness.runner.processes import TIMINGS_FILE, merged_fields, rewrite_rows, time_in_processes
from harness.schema import Cell
from harness.store import read_rows
from harness.store.reader import read_env


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
        "speedup_round_sd": 0.01,  # timed in rounds (None: a bootstrap over pairs, read as one round)
    }


def test_merged_fields_are_the_process_interval_of_every_process():
    first = _timing(2.0)
    row = _row("a", **first, processes=1, noise_reason="re-timed once: the first blocks disagreed")
    later = [_timing(2.0 * math.exp(0.02)), _timing(2.0 * math.exp(-0.02))]  # s.d. 0.02: narrow, not noisy
    got = merged_fields(row, [first, *later], 3)
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
            "noisy": False,
            "noise_reason": "re-timed once: the first blocks disagreed",  # a note, kept
        }
    )
    assert want.speedup == pytest.approx(2.0)
    assert math.log(want.high / 2.0) == pytest.approx(4.303 * 0.02 * math.sqrt(2 / 3))


def test_the_baselines_reference_speedup_is_merged_and_judged_again():
    first = _timing(0.3, prefix="reference_")
    old = "reference speed-up interval wide (0.2-0.4)"  # the first process's own interval, replaced
    row = _row("d", variant="dense", **first, processes=1, noisy=True, noise_reason=old)
    timings = [first, _timing(0.36, prefix="reference_"), _timing(0.33, prefix="reference_")]
    got = merged_fields(row, timings, 3)
    want = process_interval(
        [
            ProcessTiming(t["reference_speedup"], t["reference_speedup_low"], t["reference_speedup_high"], 4)
            for t in timings
        ]
    )
    assert got["reference_speedup"] == pytest.approx((0.3 * 0.36 * 0.33) ** (1 / 3)) == pytest.approx(want.speedup)
    assert (got["reference_speedup_low"], got["reference_speedup_high"]) == pytest.approx((want.low, want.high))
    assert "speedup" not in got and got["processes"] == 3 and want.high / want.low > 1.3
    wide = f"reference speed-up interval wide over 3 processes ({want.low:.3g}-{want.high:.3g})"
    assert (got["noisy"], got["noise_reason"]) == (True, wide)


def test_a_merged_interval_that_is_narrow_clears_the_first_processes_wide_one_but_not_the_load():
    first = _timing(2.0)
    later = [_timing(2.0 * math.exp(0.02)), _timing(2.0 * math.exp(-0.02))]
    wide = _row("a", **first, processes=1, noisy=True, noise_reason="speed-up interval wide (1.9-2.6)")
    assert (
        merged_fields(wide, [first, *later], 3)["noisy"],
        merged_fields(wide, [first, *later], 3)["noise_reason"],
    ) == (False, None)
    loaded = _row(
        "b", **first, processes=1, noisy=True, noise_reason="load 1.20 per CPU >= 1.0; speed-up interval wide (1.9-2.6)"
    )
    got = merged_fields(loaded, [first, *later], 3)
    assert (got["noisy"], got["noise_reason"]) == (True, "load 1.20 per CPU >= 1.0")


def test_fewer_than_three_usable_processes_leave_the_interval_and_say_so():
    first = _timing(2.0)
    row = _row("a", **first, processes=1)
    got = merged_fields(row, [first, _timing(2.1), {"speedup": None}], 4)
    assert got == {
        "noise_reason": f"timed in 2 of 4 processes (the others' reasons: {TIMINGS_FILE}): one process's interval"
    }


def test_a_bootstrap_interval_counts_as_one_round():
    """A process whose interval is a bootstrap over pairs (no between-round s.d.) reads as one round (1.96 s.e.)."""
    got = processes._process_timing(
        {"speedup": 2.0, "speedup_low": 1.9, "speedup_high": 2.1, "rounds": 4}, "speedup", ""
    )
    assert got == ProcessTiming(2.0, 1.9, 2.1, 1)


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
    assert not (tmp_path / ".cells").exists()  # the children's temp folders are gone
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
    heap = read_env(run / "env.json")["heap"]  # a table env.json keeps (harness.heap)
    assert heap["set_by"] in ("harness (mallopt)", "environment"), heap
    for name in ("sliding_window", "distilled"):
        assert rows[name]["processes"] == 3 and rows[name]["speedup_process_sd"] is not None, rows[name]


def test_a_child_that_cannot_start_ends_its_pass_without_a_start_per_cell(monkeypatch):
    starts = []

    class NeverStarts:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def run(self, job, limit):
            starts.append(job)
            raise ChildFailed("error", "isolated cell: exit 1 before it was ready", started=False)

    monkeypatch.setattr(processes, "ChildProcess", NeverStarts)
    todo = [_row(name, **_timing(2.0)) for name in ("a", "b", "c")]
    job = type("Job", (), {"to_dict": lambda self: {}, "run_dir": None})()
    replies = list(processes._retimed(todo, job, 2, 10.0))
    assert len(starts) == 1 and [r["timing"] for r in replies] == [None, None, None]
    assert replies[1]["failed"] == "process 2 did not start: isolated cell: exit 1 before it was ready"
