"""`model-eval --model PATH` on a tiny causal LM: end to end, the dense row equals the stock model, refusals exit 2."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from harness.commands import main
from harness.inputs import hf_adapter, hf_model
from harness.studies import lm_eval
from tests.helpers.tiny_hf import save_tiny

pytestmark = pytest.mark.skipif(
    hf_adapter.missing_transformers_reason() is not None, reason=str(hf_adapter.missing_transformers_reason())
)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("llama"), "llama")


def _stock_perplexity(folder, windows) -> float:
    model = hf_model.load_pretrained(str(folder))
    nll, count = 0.0, 0
    for w in windows:
        ids = torch.tensor([w])
        with torch.no_grad():
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss  # transformers' own shifted mean NLL
        nll, count = nll + float(loss) * (len(w) - 1), count + len(w) - 1
    return math.exp(nll / count)


def test_end_to_end_dense_equals_the_stock_model(llama, tmp_path, capsys):
    argv = ["model-eval", "--model", str(llama), "--seq-lens", "128,256", "--variants", "dense,sliding_window"]
    argv += ["--set", "sliding_window.window=16", "--texts", "2", "--calibration-texts", "1", "--out", str(tmp_path)]
    assert main(argv) == 0, capsys.readouterr().err
    data = json.loads((tmp_path / "lm_eval.json").read_text())
    assert data["meta"]["H"] == 4 and data["meta"]["H_kv"] == 2 and data["meta"]["D"] == 16
    rows = {(r["variant"], r["seq_len"]): r for r in data["rows"]}
    stream, _ = hf_model.token_ids(str(llama), lm_eval_text(), 128)
    for N in (128, 256):
        dense = rows[("dense", N)]
        assert dense["status"] == "ok"
        expected = _stock_perplexity(llama, hf_model.token_windows(stream, N, 2, calibration=False))
        assert dense["perplexity"] == pytest.approx(expected, rel=1e-5)
        assert dense["perplexity_reference"] == pytest.approx(expected, rel=1e-5)
        assert dense["top1_agreement"] == 1.0 and abs(dense["kl_mean"]) < 1e-6
        window = rows[("sliding_window", N)]
        assert window["status"] == "ok" and window["kl_mean"] > 1e-4 and window["top1_agreement"] < 1.0
    assert (tmp_path / "lm_eval.png").read_bytes()[:4] == b"\x89PNG"
    assert "| dense | 128 |" in (tmp_path / "lm_eval.md").read_text()


def lm_eval_text() -> str:
    from harness.commands.model_eval import _read_text

    return _read_text(None)


def test_a_learnable_variant_is_calibrated_on_other_windows_and_refusals_are_rows(llama, tmp_path):
    rows, _ = lm_eval.run_lm_eval(
        str(llama),
        ["distilled", "linformer"],
        [64],
        text=lm_eval_text(),
        n_eval=1,
        n_calibration=1,
        steps=3,
        layers=[1],
    )
    distilled, linformer = rows
    assert distilled["status"] == "ok" and distilled["calibration"]["layers"] == 1 and distilled["layers"] == "1"
    assert distilled["calibration"]["loss_after_mean"] < distilled["calibration"]["loss_before_mean"]
    assert linformer["status"] == "unsupported" and "does not support causal=True" in linformer["reason"]
    assert hf_model.token_windows(list(range(1000)), 64, 1, calibration=True)[0][0] >= 750  # the last quarter


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--seq-lens", "4096"], r"--seq-lens \[4096\] outside 2\.\.1024 \(the model's max_position_embeddings\)"),
        (["--layers", "5"], r"--layers \[5\]: the model has layers 0\.\.1"),
        (["--texts", "10000"], r"windows of 256, asked for 10000; pass a longer --text FILE"),
        (["--text", "/no/such/file"], r"--text '/no/such/file' cannot be read"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(llama, argv, message, capsys, tmp_path):
    assert main(["model-eval", "--model", str(llama), "--variants", "dense", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(message, err), err


def test_a_refused_model_feature_is_an_unsupported_row_naming_it(tmp_path, capsys):
    folder = save_tiny(tmp_path / "m", "mistral", sliding_window=32)
    argv = ["model-eval", "--model", str(folder), "--seq-lens", "64", "--variants", "dense", "--texts", "1"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    (row,) = json.loads((tmp_path / "out" / "lm_eval.json").read_text())["rows"]
    assert row["status"] == "unsupported" and "sliding-window" in row["reason"]


def test_not_a_model_is_exit_2(tmp_path, capsys):
    assert main(["model-eval", "--model", str(tmp_path / "nothing"), "--variants", "dense"]) == 2
    assert "--model: transformers cannot load the model" in capsys.readouterr().err
