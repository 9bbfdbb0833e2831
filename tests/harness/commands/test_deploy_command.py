"""`python -m harness deploy`: a bad flag is one line and exit 2; a small run writes its files and joins the report."""

from __future__ import annotations

import json

import pytest

from harness.commands import main
from harness.report.render import Heading, Table
from harness.report.study_results import study_sections
from harness.studies import deploy_targets


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--seq-lens", "64"], "--seq-lens '64': need at least two different lengths >= 2"),
        (["--seq-lens", "64,x"], "--seq-lens '64,x': expected comma-separated integers like 128,256"),
        (
            ["--targets", "onnxruntim"],
            "--targets 'onnxruntim': expected some of torch.export, onnxruntime, onnxruntime-web",
        ),
        (["--heads", "0"], "--heads 0: expected an integer >= 1"),
        (["--threads", "0"], "--threads 0: expected an integer >= 1"),
        (["--device", "cuda"], "--device 'cuda': deploy runs on CPU"),
        (["--variants", "dnse"], "no registered variant matches 'dnse'"),
        (["--set", "dense.nope=1"], "--set for dense:"),
        (["--run", "/no/such/run"], "--run '/no/such/run' is not an existing folder"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(argv, message, capsys):
    if argv[0] in ("--variants", "--set", "--run") and deploy_targets.missing_extra_reason():
        pytest.skip(deploy_targets.missing_extra_reason())  # checked after the extra is
    assert main(["deploy", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


@pytest.mark.slow
def test_a_small_run_writes_its_files_and_the_report_shows_the_table(tmp_path, capsys):
    if deploy_targets.missing_extra_reason():
        pytest.skip(deploy_targets.missing_extra_reason())
    argv = ["deploy", "--variants", "dense", "--seq-lens", "16,24", "--heads", "2", "--head-dim", "8"]
    assert main([*argv, "--targets", "torch.export,onnxruntime", "--out", str(tmp_path)]) == 0
    for name in ("deploy.jsonl", "deploy.csv", "deploy.json", "deploy.md", "deploy/dense.onnx", "deploy/dense.pt2"):
        assert (tmp_path / name).is_file(), name
    meta = json.loads((tmp_path / "deploy.json").read_text())["meta"]
    assert meta["opset"] == deploy_targets.OPSET and meta["seq_lens"] == [16, 24] and meta["torch_threads"] == 1
    blocks = study_sections(tmp_path)
    assert Heading(2, "Deployable? (deploy)") in blocks
    table = next(b for b in blocks if isinstance(b, Table))
    assert table.headers == ["variant", "torch.export", "onnxruntime"]
    assert table.rows[0][0] == "dense (sdpa)" and all(cell.startswith("ok ") for cell in table.rows[0][1:])
