"""The run folder a sweep writes: where it may be (--run-id), who may write it (the lock), how its tail is repaired."""

from __future__ import annotations

import pytest

from harness.commands import main
from harness.store import read_rows

TINY = [
    "--device",
    "cpu",
    "--variants",
    "dense",
    "--seq-lens",
    "16",
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
]


@pytest.mark.parametrize(
    "out,run_id",
    [
        ("runs", "../escape"),
        ("runs", "ABS"),
        ("runs/inner", ".."),
        ("runs", "."),
        ("runs", "a/b"),
        ("runs", ""),
        ("runs", "x y"),
    ],
)
def test_a_run_id_that_is_not_one_plain_name_exits_2_and_writes_nothing(out, run_id, tmp_path, capsys, no_report):
    run_id = str(tmp_path / "abs-escape") if run_id == "ABS" else run_id
    assert main(["sweep", *TINY, "--out", str(tmp_path / out), "--run-id", run_id]) == 2
    err = capsys.readouterr().err
    assert "a run id must be one plain folder name" in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []  # neither the folder nor --out was made


def test_a_plain_run_id_with_dots_and_dashes_is_fine(tmp_path, no_report):
    assert main(["sweep", *TINY, "--out", str(tmp_path), "--run-id", "v1.2_cpu-a"]) == 0
    assert (tmp_path / "v1.2_cpu-a" / "rows.jsonl").is_file()


def test_a_second_lock_on_a_run_folder_is_refused_naming_the_holder(tmp_path):
    import os

    from harness.errors import UsageError
    from harness.store import lock_run_dir

    with lock_run_dir(tmp_path):
        assert (tmp_path / ".lock").read_text().strip() == str(os.getpid())
        with pytest.raises(UsageError, match=rf"being written by another sweep \(pid {os.getpid()},"):
            with lock_run_dir(tmp_path):  # a second open file description conflicts even in this process
                pass
    with lock_run_dir(tmp_path):  # released on exit
        pass


def test_a_resume_while_another_writer_holds_the_folder_exits_2_and_adds_no_rows(tmp_path, capsys, no_report):
    import os

    from harness.store import lock_run_dir, read_rows

    assert main(["sweep", *TINY, "--seq-lens", "16,32", "--out", str(tmp_path), "--run-id", "r"]) == 0
    rows = tmp_path / "r" / "rows.jsonl"
    rows.write_text(rows.read_text().splitlines(keepends=True)[0])  # one cell left to run
    before = read_rows(tmp_path / "r")
    capsys.readouterr()
    with lock_run_dir(tmp_path / "r"):
        assert main(["sweep", "--resume", str(tmp_path / "r"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"pid {os.getpid()}" in err and len(err.strip().splitlines()) == 1, err
    assert read_rows(tmp_path / "r") == before


@pytest.mark.slow
def test_the_lock_of_a_killed_writer_is_released_by_the_os(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from harness.errors import UsageError
    from harness.store import lock_run_dir
    from tests.helpers import REPO

    code = (
        "import sys, time; from harness.store import lock_run_dir\n"
        f"with lock_run_dir({str(tmp_path)!r}):\n    print('locked', flush=True); time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "locked"
        with pytest.raises(UsageError, match=rf"pid {child.pid},"):
            with lock_run_dir(tmp_path):
                pass
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        with lock_run_dir(tmp_path):  # a stale .lock file never blocks
            pass
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


@pytest.mark.parametrize(
    "extra,match",
    [
        (["--run-id", "other"], r"continues that folder under its own name; drop --run-id other"),
        (["--out", "elsewhere"], r"continues that folder where it is; drop --out elsewhere"),
    ],
)
def test_resume_refuses_a_run_id_or_out_it_would_ignore(extra, match, tmp_path, capsys, no_report):
    import re

    assert main(["sweep", *TINY, "--out", str(tmp_path), "--run-id", "r"]) == 0
    capsys.readouterr()
    assert main(["sweep", "--resume", str(tmp_path / "r"), "--quiet", *extra]) == 2
    err = capsys.readouterr().err
    assert re.search(match, err) and len(err.strip().splitlines()) == 1, err


def test_a_chosen_run_id_folder_without_rows_gets_this_sweeps_spec(tmp_path, capsys, no_report):
    folder = tmp_path / "r"
    folder.mkdir()
    (folder / "spec.toml").write_text("seq_lens = [9999]\n")  # stale: left by a sweep that wrote no row
    assert main(["sweep", *TINY, "--out", str(tmp_path), "--run-id", "r"]) == 0
    assert "seq_lens = [16]" in (folder / "spec.toml").read_text()
    assert "held a spec.toml but no rows; replacing it" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--seed", "99999999999999999999999"], r"--seed: must be <= 9223372036854775807"),
        (
            ["--time-budget", "1000", "--timeout", "5"],
            r"--time-budget = 1000 s: the timing budget must be below the per-cell limit \(--timeout = 5 s\)",
        ),
    ],
)
def test_out_of_range_settings_exit_2(argv, match, tmp_path, capsys):
    import re

    assert main(["sweep", *TINY, *argv, "--dry-run", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert re.search(match, err) and len(err.strip().splitlines()) == 1, err


def test_report_on_a_run_without_readable_rows_exits_1(tmp_path, capsys):
    (tmp_path / "rows.jsonl").write_text("")
    assert main(["report", str(tmp_path)]) == 1
    assert "no readable row in rows.jsonl; nothing to report" in capsys.readouterr().err


@pytest.mark.slow
def test_an_unreachable_budget_spares_longer_n_over_the_same_range_and_says_so(tmp_path, no_report):
    """distilled (H=2, D=16): features 16-341 at N=2048 (half of dense's FLOPs), 16-512 from N=4096 on. Unreachable at
    2048 and 4096, searched at both (the range grew); 8192 has 4096's range, so it is not searched."""
    from harness.runner import run_sweep, sweep_spec

    spec = sweep_spec(
        cli={
            "device": "cpu",
            "variants": "distilled",
            "seq_lens": "2048,4096,8192",
            "inputs": "gaussian",
            "causals": "false",  # the ranges below are non-causal dense's FLOPs (causal halves them)
            "heads": "2",
            "head_dims": "16",
            "error_budgets": "1e-6",
            "calibration_steps": "1",
            "calibration_batches": "2",
            "calibration_max_seq_len": "32",
            "time_budget_s": "0.01",
            "error_rows": "16",
        }
    )
    rows = sorted(read_rows(run_sweep(spec, out=tmp_path)), key=lambda r: r["seq_len"])
    assert [r["status"] for r in rows] == ["unreachable"] * 3
    assert [r["tuning"] and (r["tuning"]["low"], r["tuning"]["high"]) for r in rows] == [(16, 334), (16, 512), None]
    assert "at features 512, the largest declared" in rows[1]["reason"]
    assert (
        rows[2]["reason"]
        == "not run: unreachable at N=4096 over the same features range 16-512, and a longer N at a fixed value is no easier"
    )
    assert rows[2]["config"]["features"] is None and rows[1]["config"]["features"] == 512  # the top it tried


def test_an_oom_after_an_unreachable_budget_still_stops_the_series_and_a_resume_remembers_both():
    from harness.plan import plan
    from harness.runner import sweep_spec
    from harness.row import Row
    from harness.runner.blocked import blocked_series

    spec = sweep_spec(
        cli={
            "device": "cpu",
            "variants": "distilled",
            "seq_lens": "256,512,1024,2048",
            "inputs": "gaussian",
            "error_budgets": "0.1",
        }
    )
    cells = {c.seq_len: c for c in plan(spec)}
    rows = [
        Row(
            cell=cells[256],
            cell_id=cells[256].cell_id,
            status="unreachable",
            reason="relative L2 error 0.7 at features 42 ...",
        ),
        Row(cell=cells[512], cell_id=cells[512].cell_id, status="ok"),
        Row(cell=cells[1024], cell_id=cells[1024].cell_id, status="oom", reason="out of memory"),
    ]
    blocked = blocked_series(rows, list(cells.values()))
    key = cells[256].series_key
    assert blocked == {(key, "unreachable"): ("unreachable", 256), (key, "stop"): ("oom", 1024)}
