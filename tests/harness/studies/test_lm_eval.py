"""`model-eval --model PATH` on a tiny causal LM: end to end, the dense row equals the stock model, refusals exit 2."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch

from harness.commands import main
from harness.models import hf_adapter, hf_layers, hf_model
from harness.studies import lm_eval
from tests.helpers.tiny_hf import save_tiny
from variants import build_variant

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


@pytest.mark.slow  # a whole sweep, report or compile: seconds on 2 cores (the full suite runs it)
def test_end_to_end_dense_equals_the_stock_model(llama, tmp_path, capsys):
    argv = [
        "model-eval",
        "--tokenizer",
        "bytes",
        "--model",
        str(llama),
        "--seq-lens",
        "128,256",
        "--variants",
        "dense,sliding_window",
    ]
    argv += ["--set", "sliding_window.window=16", "--texts", "2", "--calibration-texts", "1", "--out", str(tmp_path)]
    assert main(argv) == 0, capsys.readouterr().err
    data = json.loads((tmp_path / "lm_eval.json").read_text())
    assert data["meta"]["H"] == 4 and data["meta"]["H_kv"] == 2 and data["meta"]["D"] == 16
    rows = {(r["variant"], r["seq_len"]): r for r in data["rows"]}
    stream, _ = hf_model.token_ids(str(llama), lm_eval_text(), 128, tokenizer="bytes")
    for N in (128, 256):
        dense = rows[("dense", N)]
        assert dense["status"] == "ok"
        expected = _stock_perplexity(llama, hf_model.token_windows(stream, N, 2, calibration=False))
        assert dense["perplexity"] == pytest.approx(expected, rel=1e-5)
        assert dense["perplexity_reference"] == pytest.approx(expected, rel=1e-5)
        assert dense["top1_agreement"] == 1.0 and abs(dense["kl_mean"]) < 1e-6
        assert dense["continuation_agreement"] == 1.0 and dense["generated_tokens"] == 32  # the default
        window = rows[("sliding_window", N)]
        assert window["status"] == "ok" and window["kl_mean"] > 1e-4 and window["top1_agreement"] < 1.0
    assert (tmp_path / "lm_eval.png").read_bytes()[:4] == b"\x89PNG"
    assert "| dense | 128 |" in (tmp_path / "lm_eval.md").read_text()


@pytest.mark.slow  # a whole sweep on a model of 512-token windows: seconds on 2 cores (the full suite runs it)
def test_gemma2_softcap_and_alternating_windows_end_to_end(tmp_path, capsys):
    """Gemma 2's logit softcapping and its alternating 128-token sliding layers: dense (sliding_window's band in the
    sliding layer, softcapped) and chunked (its tiles in the band) equal the stock model and generate its tokens;
    sliding_window (256 keys) is exact at 256 and an approximation at 512."""
    folder = save_tiny(tmp_path / "gemma2", "gemma2", attn_logit_softcapping=50.0, sliding_window=128)
    argv = ["model-eval", "--tokenizer", "bytes", "--model", str(folder), "--seq-lens", "256,512"]
    argv += ["--variants", "dense,sliding_window,chunked", "--texts", "1", "--generate-tokens", "4"]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    rows = {
        (r["variant"], r["seq_len"]): r for r in json.loads((tmp_path / "out" / "lm_eval.json").read_text())["rows"]
    }
    stream, _ = hf_model.token_ids(str(folder), lm_eval_text(), 128, tokenizer="bytes")
    for N in (256, 512):
        expected = _stock_perplexity(folder, hf_model.token_windows(stream, N, 1, calibration=False))
        for name in ("dense", "chunked"):
            row = rows[(name, N)]
            assert row["status"] == "ok" and row["perplexity"] == pytest.approx(expected, rel=1e-5), row
            assert row["continuation_agreement"] == 1.0 and abs(row["kl_mean"]) < 1e-6
        window = rows[("sliding_window", N)]
        assert window["status"] == "ok" and (abs(window["kl_mean"]) < 1e-6) == (N == 256)
    model = hf_model.load_pretrained(str(folder))
    windows = {getattr(m, "sliding_window", None) for m in hf_layers.attention_modules(model).values()}
    assert windows == {128, None}  # the tiny model really alternates a 128-token layer with a full one


def lm_eval_text() -> str:
    from harness.commands.model_eval import _read_text

    return _read_text(None)


@pytest.mark.slow  # a whole sweep, report or compile: seconds on 2 cores (the full suite runs it)
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
        tokenizer="bytes",
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
        (["--error-budgets", "0.05,x"], r"--error-budgets: expected a number, got 'x'"),
        (
            ["--error-budgets", "3"],
            r"must be in \(0, 2\] \(KL\(dense\|\|variant\) or perplexity increase or greedy disagreement",
        ),
        (["--error-budgets", "0,0.1"], r"--error-budgets: an error budget must be in \(0, 2\]"),
        (
            ["--error-budgets", "0.1", "--error-metric", "cosine"],
            r"--error-metric 'cosine'.*kl or perplexity or disagreement",
        ),
        (
            ["--error-budgets", "0.1", "--error-metric", "disagreement", "--generate-tokens", "0"],
            r"--error-metric disagreement bounds generated tokens: pass --generate-tokens >= 1",
        ),
        (["--error-budgets", "0.1", "--calibration-texts", "0"], r"pass --calibration-texts >= 1"),
        (["--generate-tokens", "-1"], r"--generate-tokens >= 0; got 4, 2, \d+, -1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(llama, argv, message, capsys, tmp_path):
    assert (
        main(
            [
                "model-eval",
                "--tokenizer",
                "bytes",
                "--model",
                str(llama),
                "--variants",
                "dense",
                "--out",
                str(tmp_path),
                *argv,
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(message, err), err


def test_a_refused_model_feature_is_an_unsupported_row_naming_it(tmp_path, capsys):
    folder = save_tiny(tmp_path / "m", "mistral", sliding_window=32)
    # distilled cannot restrict itself to the model's window (dense, sliding_window, chunked can: test_hf_model_window.py)
    argv = [
        "model-eval",
        "--tokenizer",
        "bytes",
        "--model",
        str(folder),
        "--seq-lens",
        "64",
        "--variants",
        "distilled",
        "--calibration-steps",
        "0",
        "--texts",
        "1",
    ]
    assert main([*argv, "--out", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    (row,) = json.loads((tmp_path / "out" / "lm_eval.json").read_text())["rows"]
    assert row["status"] == "unsupported" and "sliding-window" in row["reason"]


def test_not_a_model_is_exit_2(tmp_path, capsys):
    assert main(["model-eval", "--model", str(tmp_path / "nothing"), "--variants", "dense"]) == 2
    assert "--model: transformers cannot load the model" in capsys.readouterr().err


def _calibration_totals(folder, N: int, make_variant) -> dict:
    """lm_eval's sums on the first calibration window, computed here from the stock model and a swap."""
    model = hf_model.load_pretrained(str(folder))
    stream, _ = hf_model.token_ids(str(folder), lm_eval_text(), 128, tokenizer="bytes")
    (window,) = hf_model.token_windows(stream, N, 1, calibration=True)
    ids = torch.tensor([window])
    reference = lm_eval._logits(model, ids)
    hf_model.swap_layers(model, make_variant)
    return lm_eval._window_stats(ids, reference, lm_eval._logits(model, ids))


def test_error_budgets_pick_the_cheapest_window_on_calibration_windows(llama, tmp_path, capsys):
    argv = [
        "model-eval",
        "--tokenizer",
        "bytes",
        "--model",
        str(llama),
        "--seq-lens",
        "128",
        "--variants",
        "dense,sliding_window",
    ]
    argv += ["--error-budgets", "0.0001,0.001,0.01", "--error-metric", "kl", "--texts", "1", "--calibration-texts", "1"]
    assert main([*argv, "--out", str(tmp_path)]) == 0, capsys.readouterr().err
    data = json.loads((tmp_path / "lm_eval.json").read_text())
    assert data["meta"]["error_budgets"] == [0.0001, 0.001, 0.01] and data["meta"]["error_metric"] == "kl"
    rows = {(r["variant"], r["budget"]): r for r in data["rows"]}
    assert set(rows) == {
        ("dense", None),
        ("sliding_window", 0.0001),
        ("sliding_window", 0.001),
        ("sliding_window", 0.01),
    }
    impossible, tight, loose = (rows[("sliding_window", b)] for b in (0.0001, 0.001, 0.01))
    assert tight["status"] == loose["status"] == "ok"
    assert loose["config"]["window"] < tight["config"]["window"] <= tight["tuning"]["high"]
    for row in (tight, loose):  # the value found meets its budget, every smaller value tried misses it
        tried = {int(v): e for v, e in row["tuning"]["tried"].items()}
        value = row["config"]["window"]
        assert tried[value] <= row["budget"] and all(e > row["budget"] for v, e in tried.items() if v < value)
    # the searched error is KL on the calibration window (the text's last quarter), not on the evaluated one
    expected = _calibration_totals(llama, 128, lambda i: build_variant("sliding_window", window=16))
    assert loose["tuning"]["tried"]["16"] == pytest.approx(expected["kl"] / expected["count"], rel=1e-4)
    assert loose["kl_mean"] != pytest.approx(loose["tuning"]["tried"]["16"], rel=1e-3)
    # unreachable: not even the top of the range meets it, and the row says how far it got
    top = impossible["tuning"]["high"]
    assert impossible["status"] == "unreachable" and impossible["perplexity"] is None
    assert impossible["tuning"]["tried"][str(top)] > 0.0001 and impossible["config"]["window"] == top
    assert f"{impossible['tuning']['tried'][str(top)]:.3g} at window {top}" in impossible["reason"]
    md = (tmp_path / "lm_eval.md").read_text()
    assert "| budget (KL(dense\\|\\|variant)) |" in md
    assert f"| sliding_window(window={loose['config']['window']}) | 128 | 0.01 |" in md


@pytest.mark.slow  # a whole sweep, report or compile: seconds on 2 cores (the full suite runs it)
def test_the_perplexity_budget_is_the_relative_increase_on_calibration_windows(llama):
    rows, meta = lm_eval.run_lm_eval(
        str(llama),
        ["sliding_window"],
        [64],
        text=lm_eval_text(),
        n_eval=1,
        n_calibration=1,
        steps=0,
        budgets=(2.0,),
        metric="perplexity",
        tokenizer="bytes",
    )
    (row,) = rows
    assert row["status"] == "ok" and row["config"]["window"] == 16 and meta["error_metric"] == "perplexity"
    assert row["tuning"]["metric"] == "perplexity increase"
    expected = _calibration_totals(llama, 64, lambda i: build_variant("sliding_window", window=16))
    increase = math.exp((expected["nll"] - expected["nll_reference"]) / expected["count"]) - 1
    assert row["tuning"]["tried"]["16"] == pytest.approx(increase, rel=1e-3, abs=1e-7)


def test_a_disagreement_budget_bounds_greedy_agreement_with_dense_on_calibration_windows(llama):
    """--error-metric disagreement: 1 - greedy continuation agreement (0.0001 asks agreement 1, 1.0 asks nothing)."""
    T = 16
    rows, meta = lm_eval.run_lm_eval(
        str(llama),
        ["dense", "sliding_window"],
        [64],
        text=lm_eval_text(),
        n_eval=1,
        n_calibration=1,
        steps=0,
        budgets=(0.0001, 1.0),
        metric="disagreement",
        generate_tokens=T,
        tokenizer="bytes",
    )
    dense, strict, loose = rows
    assert meta["error_metric"] == "disagreement" and dense["budget"] is None  # dense has no knob: no search
    assert dense["continuation_agreement"] == 1.0
    assert loose["status"] == "ok" and loose["config"]["window"] == 16  # any window meets disagreement <= 1
    assert loose["tuning"]["metric"] == "greedy disagreement with dense"
    # the searched error: 1 - agreement of sliding_window(16)'s greedy tokens with the stock model's, on the
    # calibration window, generated here without the harness's generation code
    model = hf_model.load_pretrained(str(llama))
    stream, _ = hf_model.token_ids(str(llama), lm_eval_text(), 128, tokenizer="bytes")
    ids = torch.tensor(hf_model.token_windows(stream, 64, 1, calibration=True))
    options = dict(max_new_tokens=T, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        stock = model.generate(ids, **options)[0, 64:]
        model.set_attn_implementation(hf_adapter.register_with_transformers("sliding_window", window=16))
        windowed = model.generate(ids, **options)[0, 64:]
    assert loose["tuning"]["tried"]["16"] == pytest.approx(1 - float((stock == windowed).float().mean()))
    top = strict["tuning"]["high"]  # a narrow window's tokens leave dense's: agreement 1 is out of reach
    assert strict["status"] == "unreachable" and strict["tuning"]["tried"][str(top)] > 0.0001
    assert "greedy disagreement with dense" in strict["reason"]
