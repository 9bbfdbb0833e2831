"""The tasks study: a short dense run beats chance, an unsupported variant is a row, the command writes its files, bad input."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch

from harness.commands import main
from harness.studies.task_training import PRESETS, TaskPreset, make_problem, train_and_test


def test_an_unknown_task_names_the_nearest():
    with pytest.raises(ValueError, match=r"Unknown task 'mqr'.*Did you mean 'mqar'"):
        make_problem("mqr", 64, PRESETS["cpu"])


@pytest.mark.slow
def test_short_dense_mqar_run_beats_chance_clearly():
    preset = TaskPreset(
        d_model=64,
        layers=2,
        heads=4,
        seq_lens=(32,),
        steps=200,
        tokens_per_step=512,
        lr=3e-3,
        test_size=256,
        mqar_pairs_per_token=1 / 8,
        mqar_values=16,
    )
    row = train_and_test(make_problem("mqar", 32, preset), "dense", preset, seed=0)
    assert row["status"] == "ok", row["reason"]
    assert row["chance"] == pytest.approx(1 / 16)
    # 4 pairs per sequence: guessing among the values present gives 1/4, so recall must beat that too.
    assert row["accuracy"] > 0.8, row  # seeds 0-2 reach 0.99-1.0 here


def test_a_variant_that_cannot_run_is_an_unsupported_row():
    if torch.cuda.is_available():
        pytest.skip("xformers may run here")
    preset = dataclasses.replace(PRESETS["cpu"], steps=1, tokens_per_step=64, test_size=8)
    row = train_and_test(make_problem("mqar", 32, preset), "dense", preset, overrides={"backend": "xformers"})
    assert row["status"] == "unsupported" and "CUDA" in row["reason"] and row["accuracy"] is None


def test_cuda_without_cuda_is_one_line_and_exit_2(capsys):
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    assert main(["tasks", "--device", "cuda", "--steps", "1", "--seq-lens", "16"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--device: CUDA is not available here" in err, err


def test_cli_writes_tables_and_figure(tmp_path, capsys):
    argv = ["tasks", "--variants", "dense", "--seq-lens", "16", "--steps", "2", "--tasks", "mqar,listops"]
    assert main([*argv, "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "tasks.json").read_text())["rows"]
    assert {(r["task"], r["seq_len"], r["variant"]) for r in rows} == {("mqar", 16, "dense"), ("listops", 16, "dense")}
    assert all(r["status"] == "ok" and 0 <= r["accuracy"] <= 1 and r["delta_to_dense"] == 0 for r in rows)
    assert "| mqar | dense |" in (tmp_path / "tasks.md").read_text()
    assert (tmp_path / "tasks.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "tasks.csv").read_text().startswith("task,variant,")


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--tasks", "mqar,lisops"], r"Unknown task 'lisops'.*Did you mean 'listops'"),
        (["--variants", "nosuch*"], r"no registered variant matches 'nosuch\*'"),
        (["--seq-lens", "64,abc"], r"--seq-lens '64,abc': expected comma-separated integers"),
        (["--set", "dense.backend"], r"expected VARIANT.FIELD=VALUE"),
        (["--set", "dense.nofield=1"], r"dense.*no config field 'nofield'"),
        (["--run", "/nonexistent/run"], r"--run '/nonexistent/run' is not an existing folder"),
        (
            ["--plugin", "missing_plugin.py"],
            r"--plugin missing_plugin\.py: ImportError: plugin file 'missing_plugin\.py' does not exist",
        ),
        (["--device", "tpu"], r"--device: device must be 'cpu', 'cuda' or 'cuda:<index>', got 'tpu'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert main(["tasks", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(message, err), err


@pytest.mark.slow
def test_a_window_covering_every_length_is_called_out_and_configs_are_shown(tmp_path, capsys):
    """sliding_window at its default window (256) on N=32 is dense: the table names its config and the run warns."""
    argv = ["tasks", "--variants", "dense,sliding_window", "--seq-lens", "32", "--steps", "1", "--out", str(tmp_path)]
    assert main(argv) == 0  # the default tasks: MQAR only (ListOps needs far more steps than the preset gives)
    out = capsys.readouterr().out
    assert "warning: sliding_window(window=256) covers every length studied (window 256 >= N = 32)" in out, out
    md = (tmp_path / "tasks.md").read_text()
    assert "covers every length studied" in md and "| mqar | sliding_window |" in md
    assert {r["task"] for r in json.loads((tmp_path / "tasks.json").read_text())["rows"]} == {"mqar"}
    assert main([*argv[:-2], "--set", "sliding_window.window=8", "--out", str(tmp_path / "w8")]) == 0
    out = capsys.readouterr().out
    assert "covers every length" not in out
    assert "| mqar | sliding_window(window=8) |" in (tmp_path / "w8" / "tasks.md").read_text()
