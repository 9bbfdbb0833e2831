"""A sweep killed with SIGKILL mid-run and resumed has every planned cell exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from harness.commands import main
from harness.plan import plan
from harness.runner import sweep_spec as build_spec
from harness.store import read_rows
from tests.helpers import REPO as ROOT
from tests.helpers.load import load_scaled


@pytest.mark.slow
def test_killed_run_resumes_with_each_cell_exactly_once(tmp_path, test_variants, no_report):
    from tests.helpers.sweep_fixtures import PLUGIN

    argv = [
        sys.executable,
        "-m",
        "harness",
        "sweep",
        "--device",
        "cpu",
        "--processes",
        "1",  # a command's sweep is not under the suite's one-process default (tests/conftest.py)
        "--plugin",
        str(PLUGIN),
        "--variants",
        "t_sleep:seconds=0.1,dense",
        "--seq-lens",
        "16,32,64,128,256,512",
        "--heads",
        "1",
        "--head-dims",
        "8",
        "--time-budget",
        "0.01",
        "--repeats",
        "1",
        "--error-rows",
        "8",
        "--inputs",
        "gaussian",  # one distribution: 12 cells, enough to kill the sweep after 3 and resume the rest
        "--quiet",
        "--out",
        str(tmp_path),
        "--run-id",
        "killed",
    ]
    run_dir = tmp_path / "killed"
    child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300  # the first plugin cell starts the plugin child (a process start)
        while time.monotonic() < deadline and child.poll() is None:
            if len(read_rows(run_dir)) >= 3:
                break
            time.sleep(0.05)
        assert child.poll() is None, f"the sweep finished or died before it could be killed: {child.stderr.read()}"
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    finally:
        if child.poll() is None:
            child.kill()
    before = read_rows(run_dir)
    spec = build_spec(toml_path=run_dir / "spec.toml", trust_config=True)
    planned = {cell.cell_id for cell in plan(spec)}
    assert 3 <= len(before) < len(planned)

    assert main(["sweep", "--resume", str(run_dir), "--trust-config", "--quiet"]) == 0
    after = read_rows(run_dir)
    ids = [row["cell_id"] for row in after]
    assert sorted(ids) == sorted(planned)  # none lost, none twice
    assert [row["cell_id"] for row in after[: len(before)]] == [row["cell_id"] for row in before]  # nothing rewritten
    assert all(row["status"] == "ok" for row in after), [(r["variant"], r["status"], r["reason"]) for r in after]
    assert {row["run_id"] for row in after} == {"killed"}


def test_resume_after_a_partial_line_and_a_finished_run_is_a_no_op(tmp_path, test_variants, no_report):
    assert (
        main(
            [
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
                "--quiet",
                "--out",
                str(tmp_path),
                "--run-id",
                "done",
            ]
        )
        == 0
    )
    run_dir = tmp_path / "done"
    with open(run_dir / "rows.jsonl", "a") as f:
        f.write('{"cell_id": "partial')
    with pytest.warns(UserWarning, match="cut a partial last line"):  # the cut is said, not silent
        assert main(["sweep", "--resume", str(run_dir), "--trust-config", "--quiet"]) == 0
    rows = read_rows(run_dir)
    assert len(rows) == 2
    assert (run_dir / "rows.jsonl").read_text().endswith("}\n")


def _two_dense_cells(out, run_id: str) -> list[str]:
    """A sweep of two tiny dense cells (N = 16, 32) into out/run_id."""
    argv = [
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
    ]
    argv += ["--inputs", "gaussian", "--time-budget", "0.005", "--repeats", "1", "--quiet"]
    return argv + ["--out", str(out), "--run-id", run_id]


def test_resume_keeps_a_complete_last_row_that_lost_its_newline(tmp_path, no_report):
    argv = _two_dense_cells(tmp_path, "nl")
    assert main(argv) == 0
    path = tmp_path / "nl" / "rows.jsonl"
    path.write_bytes(path.read_bytes()[:-1])  # killed after the last row but before its newline
    before = read_rows(tmp_path / "nl")
    assert main(["sweep", "--resume", str(tmp_path / "nl"), "--trust-config", "--quiet"]) == 0
    after = read_rows(tmp_path / "nl")
    assert after == before  # the very row kept (a re-measured cell would differ in latency), its cell not run again
    assert path.read_text().endswith("}\n")


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_keeps_the_rows_and_says_how_to_resume(tmp_path):
    from tests.helpers.sweep_fixtures import PLUGIN

    argv = [
        sys.executable,
        "-m",
        "harness",
        "sweep",
        "--device",
        "cpu",
        "--processes",
        "1",  # a command's sweep is not under the suite's one-process default (tests/conftest.py)
        "--plugin",
        str(PLUGIN),
        "--variants",
        "t_sleep:seconds=0.2,dense",
        "--seq-lens",
        "16,32,64,128,256",
        "--heads",
        "1",
        "--head-dims",
        "8",
        "--time-budget",
        "0.01",
        "--repeats",
        "1",
        "--error-rows",
        "8",
        "--quiet",
        "--out",
        str(tmp_path),
        "--run-id",
        "ctrlc",
    ]
    run_dir = tmp_path / "ctrlc"
    child = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + load_scaled(
            300
        )  # the first plugin cell starts the plugin child (a process start)
        while time.monotonic() < deadline and child.poll() is None and len(read_rows(run_dir)) < 2:
            time.sleep(0.05)
        assert child.poll() is None, f"the sweep finished or died before Ctrl-C: {child.stderr.read()}"
        assert len(read_rows(run_dir)) >= 2, "no two rows within the (load-scaled) limit: Ctrl-C would land in start-up"
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=load_scaled(60))
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 130
    assert (
        f"continue with python -m harness sweep --resume {run_dir} --plugin {PLUGIN}" in err and "Traceback" not in err
    )
    rows = read_rows(run_dir)
    assert len(rows) >= 2 and len({r["cell_id"] for r in rows}) == len(rows)  # every row whole, none twice


def test_a_run_from_before_error_budgets_resumes_without_searching(tmp_path, capsys):
    """Its spec.toml has no error_budgets: the resumed plan is the run's own, not today's default budgets."""
    run_dir = tmp_path / "old"
    run_dir.mkdir()
    (run_dir / "spec.toml").write_text(
        'device = "cpu"\nvariants = ["dense", "sliding_window"]\nseq_lens = [64]\ninputs = ["local"]\n',
        encoding="utf-8",
    )
    assert main(["sweep", "--resume", str(run_dir), "--dry-run"]) == 0
    planned = capsys.readouterr().out
    assert "sliding_window N=64" in planned and "rel_l2<=" not in planned and "2 cells planned" in planned
    (run_dir / "spec.toml").write_text(
        (run_dir / "spec.toml").read_text() + "error_budgets = [0.1]\n", encoding="utf-8"
    )
    assert main(["sweep", "--resume", str(run_dir), "--dry-run"]) == 0
    assert (
        "sliding_window N=64 forward float32 D=64 causal rel_l2<=0.1 local" in capsys.readouterr().out
    )  # the default: causal


def test_a_row_without_a_cell_id_is_not_a_result_and_its_cell_is_measured_on_resume(tmp_path, no_report):
    """A row that lost its cell_id (hand-edited, or written by a tool that does not know cell ids) is no result: a
    resume neither crashes on it nor counts it as done; its cell is measured again, the other cell is kept."""
    import json

    argv = _two_dense_cells(tmp_path, "noid")
    assert main(argv) == 0
    path = tmp_path / "noid" / "rows.jsonl"
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    del second["cell_id"]
    path.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    assert [row["cell_id"] for row in read_rows(tmp_path / "noid")] == [first["cell_id"]]
    assert main(["sweep", "--resume", str(tmp_path / "noid"), "--trust-config", "--quiet"]) == 0
    rows = read_rows(tmp_path / "noid")
    assert rows[0] == first and len(rows) == 2  # the kept row untouched; the id-less row's cell measured again
    assert rows[1]["seq_len"] == second["seq_len"] and rows[1]["cell_id"]
