"""The end of a sweep: after the table, the report's path and the answer at the largest N and where it differs."""

from __future__ import annotations

import pytest

import harness.report
from harness.commands import main
from harness.runner.run import finish_run
from tests.helpers.synthetic_run import BUDGET_SPEC, make_budget_rows, write_run


def _fake_report(analysed, **options):  # finish_run hands the report the run it analysed once
    (analysed.path / "report.html").write_text("<html></html>")


def test_the_sweep_ends_with_the_report_path_and_one_answer_line_per_inputs(tmp_path, capsys, monkeypatch):
    run = write_run(tmp_path / "run", make_budget_rows(inputs=("gaussian", "local")), spec_text=BUDGET_SPEC)
    monkeypatch.setattr(harness.report, "write_report", _fake_report)
    finish_run(run)
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == f"run folder: {run}"
    assert lines[-6] == f"report: {run / 'report.html'}"
    assert lines[-5:-1] == [
        line
        for d in ("gaussian", "local")
        for line in (
            f"answer at N=8192 ({d}): rel_l2<=0.05: sliding_window(window=512) 8.4x [7.6-9.2]; "
            "rel_l2<=0.1: linformer(k=256) 25.6x [12.8-38.4] (error 0.105; tie: sliding_window(window=256)); "
            "out of reach: linformer for rel_l2<=0.05 (best 0.32)",
            f"answer at N=1024 ({d}): rel_l2<=0.05: dense (tie: sliding_window(window=512)); "
            "rel_l2<=0.1: linformer(k=256) 3.2x [3.1-3.3] (error 0.105)",  # where it differs from the largest N's
        )
    ]


def test_a_failed_report_prints_no_path_but_still_the_answer(tmp_path, capsys, monkeypatch):
    run = write_run(tmp_path / "run", make_budget_rows(), spec_text=BUDGET_SPEC)
    (run / "report.html").write_text("stale")

    def broken(run_dir, **options):
        raise RuntimeError("no matplotlib")

    monkeypatch.setattr(harness.report, "write_report", broken)
    finish_run(run)
    captured = capsys.readouterr()
    assert "report: " not in captured.out and "warning: the report failed (RuntimeError: no matplotlib)" in captured.err
    assert "answer at N=8192 (local): rel_l2<=0.05: sliding_window(window=512)" in captured.out


def test_a_real_sweep_answers_at_its_largest_n(tmp_path, capsys, no_report):
    args = [
        "sweep",
        "--device",
        "cpu",
        "--variants",
        "dense",
        "--seq-lens",
        "16,32",
        "--heads",
        "1",
        "--head-dims",
        "8",
        "--inputs",
        "gaussian",
        "--time-budget",
        "0.005",
        "--repeats",
        "1",
        "--error-rows",
        "8",
        "--quiet",
        "--out",
        str(tmp_path),
        "--run-id",
        "r",
        "--clock",  # a verdict on any machine: on wall time a busy one gets none (the test just below)
        "cpu",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "answer at N=32 (gaussian): rel_l2<=0.05: dense; rel_l2<=0.1: dense\n" in out  # the CPU default's budgets
    assert "(speed-ups and latencies are CPU time of the timing thread (--clock cpu)" in out


@pytest.mark.slow
def test_the_end_of_a_sweep_reads_rows_jsonl_once(tmp_path, capsys, monkeypatch):
    """rows.csv, the report, the table and the answer all come from one read of rows.jsonl (harness.report.analysed)."""
    import harness.store.reader as reader
    from harness.report.document import write_report

    run = write_run(tmp_path / "run", make_budget_rows(), spec_text=BUDGET_SPEC)
    reads = []
    real = reader.read_row_lines
    monkeypatch.setattr(reader, "read_row_lines", lambda *a, **k: (reads.append(a[0]), real(*a, **k))[1])
    monkeypatch.setattr(harness.report, "write_report", lambda analysed, **options: write_report(analysed, maps=False))
    finish_run(run)
    assert len(reads) == 1
    assert (run / "report.html").is_file() and (run / "rows.csv").is_file()
    assert "answer at N=8192" in capsys.readouterr().out


def test_the_end_counts_cells_by_status_noise_and_load(tmp_path, capsys, monkeypatch):
    rows = make_budget_rows()
    rows[0] = {**rows[0], "status": "timeout", "latency_s": None, "noisy": None, "reason": "exceeded 120 s"}
    rows[1] = {**rows[1], "status": "timeout", "latency_s": None, "noisy": None, "reason": "not run: timeout at N=1024"}
    for r in rows[2:]:
        r.update(noisy=True if r.get("latency_s") is not None else None, load_per_cpu=14.0)
    run = write_run(tmp_path / "run", rows, spec_text=BUDGET_SPEC)
    monkeypatch.setattr(harness.report, "write_report", _fake_report)
    finish_run(run)
    out = capsys.readouterr().out
    timed = sum(1 for r in rows[2:] if r.get("latency_s") is not None)
    ok = sum(1 for r in rows[2:] if r["status"] == "ok")
    line = next(line for line in out.splitlines() if line.startswith("cells: "))
    assert line.startswith(f"cells: {ok} ok, 1 timeout") and "1 not run (a shorter N" in line, line
    assert f"{timed} of {timed} timed cells noisy" in line and "load 14.0 per CPU" in line, line
    assert "timings then follow the machine" in line


def test_the_end_counts_contended_cells_and_refuses_an_answer_measured_under_load(tmp_path, capsys, monkeypatch):
    rows = make_budget_rows(inputs=("local",))
    timed = [r for r in rows if r.get("latency_s") is not None]
    for i, r in enumerate(timed):
        r.update(noisy=True, load_per_cpu=14.0, cpu_share=0.06, contended=i > 0, cpu_latency_s=r["latency_s"] / 15)
    run = write_run(tmp_path / "run", rows, spec_text=BUDGET_SPEC)
    monkeypatch.setattr(harness.report, "write_report", _fake_report)
    finish_run(run)
    out = capsys.readouterr().out.splitlines()
    line = next(line for line in out if line.startswith("cells: "))
    assert f"{len(timed)} of {len(timed)} timed cells noisy, {len(timed) - 1} of {len(timed)} contended" in line, line
    answer = next(line for line in out if line.startswith("answer at N=8192 (local)"))
    assert answer.startswith(
        f"answer at N=8192 (local): measured under load 14 per CPU ({len(timed) - 1} of {len(timed)} timed cells "
        "contended): no verdict; rerun on a quiet machine, or pass --clock cpu to compare CPU time"
    )  # the searches' out-of-reach verdicts may follow: errors do not depend on the load
