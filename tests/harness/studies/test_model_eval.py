"""`model-eval`: metrics on known vectors, disjoint splits, a small end-to-end run, and bad input."""

from __future__ import annotations

import json
import re

import pytest
import torch

from harness.commands import main
from harness.models import minilm as realmodel
from harness.studies import model_eval, passages
from variants import build_variant, get_variant

needs_extra = pytest.mark.skipif(
    realmodel.missing_extra_reason() is not None, reason=str(realmodel.missing_extra_reason())
)


def test_nearest_and_compare_on_known_vectors():
    a = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    assert passages.nearest(a).tolist() == [1, 0, 3, 2]
    same = passages.compare(a, a * 3)  # scale does not matter
    assert same["cosine_mean"] == pytest.approx(1.0) and same["retrieval_agreement"] == 1.0
    swapped = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.9, 0.1], [0.1, 0.9]])
    result = passages.compare(a, swapped)
    assert result["cosine_min"] == pytest.approx(0.1 / (0.81 + 0.01) ** 0.5, abs=1e-5)  # row 1: (0.9, 0.1) vs (0, 1)
    # neighbours under `swapped`: 0->2, 1->3, 2->0, 3->1; none matches [1, 0, 3, 2]
    assert result["retrieval_agreement"] == 0.0


@needs_extra
def test_passages_fit_the_limit_and_the_splits_are_disjoint():
    tokenizer = realmodel.load_tokenizer()
    evaluation, calibration = passages.split_passages(128, 40, 10)
    assert len(evaluation) == 40 and len(calibration) == 10 and not set(evaluation) & set(calibration)
    long_ones = [len(tokenizer.tokens(t)) for t in evaluation]
    assert max(long_ones) > 64  # passages are joined paragraphs, not single short sentences
    with pytest.raises(ValueError, match=r"pass smaller --texts"):
        passages.split_passages(512, 10**5, 1)


@needs_extra
@pytest.mark.slow
def test_end_to_end_dense_exact_and_a_learnable_variant_calibrated(tmp_path, capsys):
    """distilled (learnable, runs on CPU) must be an ok row here: calibrated layer by layer, its loss lowered, approximate."""
    assert get_variant("distilled").capabilities.learnable
    rc = main(
        [
            "model-eval",
            "--variants",
            "dense,distilled",
            "--max-lens",
            "48",
            "--texts",
            "6",
            "--calibration-texts",
            "2",
            "--calibration-steps",
            "3",
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 0, capsys.readouterr().err
    data = json.loads((tmp_path / "model_eval.json").read_text())
    assert data["meta"]["dense_check"]["48"]["cosine_min"] > 0.9999
    rows = {r["variant"]: r for r in data["rows"]}
    assert (
        rows["dense"]["status"] == "ok"
        and rows["dense"]["cosine_min"] > 0.9999
        and rows["dense"]["retrieval_agreement"] == 1.0
    )
    assert rows["dense"]["seq_len_max"] <= 48 and rows["dense"]["texts"] == 6 and rows["dense"]["calibration"] is None
    row = rows["distilled"]
    assert row["status"] == "ok" and row["reason"] is None, row["reason"]  # never "unsupported" on a CPU machine
    assert row["texts"] == 6 and row["seq_len_max"] == rows["dense"]["seq_len_max"]  # the same passages as dense
    calibration = row["calibration"]
    assert calibration["layers"] == 6 and calibration["passages"] == 2 and calibration["steps_per_layer"] == 3
    assert len(calibration["per_layer"]) == 6  # every MiniLM layer fitted, each against the exact teacher
    for layer in calibration["per_layer"]:
        assert (
            layer["variant"] == "distilled"
            and layer["learnable"]
            and layer["teacher"] == "exact"
            and layer["steps"] == 3
        )
        assert layer["loss_after"] < layer["loss_before"]  # the fit did something
    assert calibration["loss_after_mean"] < calibration["loss_before_mean"]
    assert row["calibration_s"] > 0 and row["eval_s"] > 0
    # approximate: measurably below dense, yet a real embedding (a broken fit gives ~0 or NaN)
    assert 0.3 < row["cosine_min"] <= row["cosine_mean"] < 0.9999
    assert 0.0 <= row["retrieval_agreement"] <= 1.0
    assert (tmp_path / "model_eval.png").read_bytes()[:4] == b"\x89PNG"
    md = (tmp_path / "model_eval.md").read_text()
    assert "| dense | 48 |" in md and "| distilled | 48 |" in md


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--max-lens", "128,600"], r"sequence length 600 is outside what all-MiniLM-L6-v2 takes: 2\.\.512"),
        (["--max-lens", "12x"], r"--max-lens '12x': expected comma-separated integers"),
        (["--variants", "densx"], r"no registered variant matches 'densx'.*Did you mean 'dense'"),
        (["--texts", "1"], r"need --texts >= 2"),
        (["--error-budgets", "0.1", "--error-metric", "kl"], r"--error-metric 'kl': this model's budgets bound cosine"),
        (["--error-budgets", "2.5"], r"must be in \(0, 2\] \(1 - cosine\), got '2.5'"),
        (
            ["--plugin", "missing_plugin.py"],
            r"--plugin missing_plugin\.py: ImportError: plugin file 'missing_plugin\.py' does not exist",
        ),
        (["--device", "tpu"], r"--device: device must be 'cpu', 'cuda' or 'cuda:<index>', got 'tpu'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    if realmodel.missing_extra_reason():
        pytest.skip("without the extra every model-eval call stops at the missing extra")
    assert main(["model-eval", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(message, err), err


def test_missing_extra_is_one_line_naming_the_install_command(monkeypatch, capsys):
    monkeypatch.setattr(realmodel, "REQUIRED_MODULES", realmodel.REQUIRED_MODULES + ("attnsuite_no_such_module",))
    assert main(["model-eval"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install 'attnsuite[real]'" in err, err


@needs_extra
@pytest.mark.slow
def test_error_budgets_search_one_minus_cosine_on_calibration_passages():
    rows, meta = model_eval.run_model_eval(
        ["dense", "sliding_window"], [128], n_eval=3, n_calibration=2, steps=0, budgets=(1e-9, 2.0)
    )
    assert meta["error_budgets"] == [1e-9, 2.0] and meta["error_metric"] == "1 - cosine"
    assert meta["tokenizer"] == "the model's"
    dense, impossible, loose = rows
    assert dense["budget"] is None and dense["tuning"] is None
    assert loose["status"] == "ok" and loose["config"]["window"] == 16 and loose["budget"] == 2.0
    # the searched error: 1 - mean cosine over the calibration passages (never the evaluated ones)
    evaluation, calibration = passages.split_passages(128, 3, 2)
    encoded = passages.encode_each(realmodel.load_tokenizer(), calibration, 128, "cpu")
    reference = passages.embed_all(realmodel.load_model(), encoded)
    swapped = realmodel.swap_attention(realmodel.load_model(), lambda i: build_variant("sliding_window", window=16))
    expected = 1 - passages.compare(reference, passages.embed_all(swapped, encoded))["cosine_mean"]
    assert loose["tuning"]["tried"]["16"] == pytest.approx(expected, rel=1e-4) and expected > 1e-6
    top = impossible["tuning"]["high"]
    assert impossible["status"] == "unreachable" and impossible["cosine_mean"] is None
    assert f"1 - cosine {impossible['tuning']['tried'][str(top)]:.3g} at window {top}" in impossible["reason"]
    table = model_eval.summary(rows)[0]
    assert table.headers[:3] == ["variant", "max_len", "budget (1 - cosine)"]
    assert ["sliding_window(window=16)", "128", "2"] == table.rows[2][:3]
