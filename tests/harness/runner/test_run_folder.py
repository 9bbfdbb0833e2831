"""The run folder a sweep writes: where it may be (--run-id), who may write it (the lock), how its tail is repaired."""
from __future__ import annotations

import pytest

from harness.commands import main

TINY = ["--device", "cpu", "--variants", "dense", "--seq-lens", "16", "--heads", "1", "--head-dim", "8", "--inputs", "gaussian",
        "--time-budget", "0.005", "--repeats", "1", "--error-rows", "8", "--quiet"]


@pytest.mark.parametrize("out,run_id", [
    ("runs", "../escape"), ("runs", "ABS"), ("runs/inner", ".."), ("runs", "."), ("runs", "a/b"), ("runs", ""), ("runs", "x y"),
])
def test_a_run_id_that_is_not_one_plain_name_exits_2_and_writes_nothing(out, run_id, tmp_path, capsys, no_report):
    run_id = str(tmp_path / "abs-escape") if run_id == "ABS" else run_id
    assert main(["sweep", *TINY, "--out", str(tmp_path / out), "--run-id", run_id]) == 2
    err = capsys.readouterr().err
    assert "a run id must be one plain folder name" in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []  # neither the folder nor --out was made


def test_a_plain_run_id_with_dots_and_dashes_is_fine(tmp_path, no_report):
    assert main(["sweep", *TINY, "--out", str(tmp_path), "--run-id", "v1.2_cpu-a"]) == 0
    assert (tmp_path / "v1.2_cpu-a" / "rows.jsonl").is_file()
