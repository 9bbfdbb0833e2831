"""lm_eval's numbers by value: hand-written next-token distributions whose KL(dense || variant), NLL and top-1
agreement are written out here with math.log; the row's perplexities from planted sums; learnable variants fitted
causal, each layer on its own calibration batch."""

from __future__ import annotations

import math

import pytest
import torch

from harness.studies import budget_search, lm_eval

# two predicted positions over a vocabulary of 3 (a third, final position predicts nothing and is left out)
DENSE = [[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.2, 0.2, 0.6]]
VARIANT = [[0.5, 0.4, 0.1], [0.3, 0.4, 0.3], [0.9, 0.05, 0.05]]
IDS = [2, 0, 1]  # targets of the two predicted positions: token 0, then token 1


def _log(rows):
    return torch.tensor(rows, dtype=torch.float64).log()[None]  # (1, N, V)


def test_window_sums_are_kl_dense_to_variant_nll_and_agreement_by_formula():
    stats = lm_eval._window_stats(torch.tensor([IDS]), _log(DENSE), _log(VARIANT))
    kl = sum(p * math.log(p / q) for P, Q in zip(DENSE[:2], VARIANT[:2]) for p, q in zip(P, Q))
    reverse = sum(q * math.log(q / p) for P, Q in zip(DENSE[:2], VARIANT[:2]) for p, q in zip(P, Q))
    assert stats["kl"] == pytest.approx(kl, rel=1e-9) and abs(kl - reverse) > 1e-3  # the direction shows
    assert stats["nll"] == pytest.approx(-math.log(0.5) - math.log(0.4), rel=1e-9)  # the variant's, on the targets
    assert stats["nll_reference"] == pytest.approx(-math.log(0.7) - math.log(0.3), rel=1e-9)
    assert stats["agree"] == 1.0 and stats["count"] == 2.0  # argmax 0 = 0, then 2 != 1


def test_the_budget_errors_are_mean_kl_and_the_relative_perplexity_increase():
    totals = {"nll": 6.0, "nll_reference": 4.0, "kl": 0.3, "agree": 3.0, "count": 4.0}
    assert budget_search.budget_error(totals, "kl") == pytest.approx(0.075)
    assert budget_search.budget_error(totals, "perplexity") == pytest.approx(math.exp(6 / 4) / math.exp(4 / 4) - 1)
    assert budget_search.budget_error({**totals, "kl": math.nan}, "perplexity") == math.inf


def test_a_rows_perplexities_are_exp_of_the_mean_nll(monkeypatch):
    totals = {"nll": 6.0, "nll_reference": 4.0, "kl": 0.3, "agree": 3.0, "count": 4.0}
    monkeypatch.setattr(lm_eval, "_totals", lambda *args: dict(totals))
    monkeypatch.setattr(lm_eval, "calibrated_variants", lambda *args, **kwargs: ({}, None))
    at = lm_eval.AtLength(
        model=None, own="sdpa", stream=[], N=16, windows=["w"], n_calibration=0, chosen=[0], n_layers=1, steps=1,
        device="cpu", seed=0,
    )  # fmt: skip
    row = lm_eval._evaluate(at, "dense", {}, None, None)
    assert row["status"] == "ok"
    assert row["perplexity"] == pytest.approx(math.exp(1.5)) and row["perplexity_reference"] == pytest.approx(math.e)
    assert row["perplexity_increase"] == pytest.approx(math.exp(0.5) - 1)
    assert row["top1_agreement"] == pytest.approx(0.75) and row["kl_mean"] == pytest.approx(0.075)


def test_learnable_variants_are_fitted_causal_each_layer_on_its_own_batch(monkeypatch):
    batches = [[("layer 0",)], [("layer 1",)], [("layer 2",)]]
    fits = []

    def fit(variant, batch, *, steps, causal):
        fits.append((batch, steps, causal))
        return {"steps": steps}

    monkeypatch.setattr(lm_eval, "fit", fit)
    monkeypatch.setattr(lm_eval, "fit_summary", lambda reports, steps: {"fitted": len(reports)})
    out, report = lm_eval.calibrated_variants(
        "linformer", {}, lambda: batches, layers=[0, 2], steps=3, device="cpu", seed=0
    )
    assert fits == [([("layer 0",)], 3, True), ([("layer 2",)], 3, True)]
    assert sorted(out) == [0, 2] and out[0] is not out[2] and report == {"fitted": 2}
    fits.clear()
    assert (
        lm_eval.calibrated_variants("dense", {}, lambda: batches, layers=[1], steps=3, device="cpu", seed=0)[1] is None
    )
    assert fits == []  # an exact variant is never fitted
