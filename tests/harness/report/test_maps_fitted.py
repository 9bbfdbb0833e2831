"""The report's maps draw a learnable variant in the fitted state the sweep stored (RUN_DIR/fitted/), never re-fitted."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.executors.worker import store_fitted
from harness.measure import MeasureSettings, calibration_key
from harness.report.maps import make_probe
from harness.report.maps_fitted import fitted_panel, stored_fits
from harness.report.maps_isolated import isolated_maps
from harness.schema import Cell
from tests.helpers.load import load_scaled
from variants import attention_weights, build_config, build_variant

N = 16  # the maps' N = M = D


def _store_fit(run_dir, variant: str, *, heads: int = 2, head_dim: int = N, **config) -> torch.nn.Module:
    """A variant with parameters no build or fit would give, stored as the sweep stores a cell's fit; returned."""
    full = build_config(variant, **config).to_dict()
    cell = Cell(
        variant=variant,
        config=full,
        seq_len=32,
        kv_len=32,
        batch=1,
        heads=heads,
        head_dim=head_dim,
        dtype="float32",
        device="cpu",
        causal=False,
        mode="forward",
        inputs="gaussian",
        seed=0,
    )
    module = build_variant(variant, **full)
    g = torch.Generator().manual_seed(7)
    module(*(torch.randn(1, heads, 32, head_dim, generator=g) for _ in range(3)))  # a lazy variant makes its parameters
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.5)
    store_fitted(run_dir, calibration_key(cell, MeasureSettings(device="cpu")), (module, 1.0, {}))
    return module.eval()


def _expected(module, heads: int = 2) -> np.ndarray:
    q, k, _ = make_probe(N, "gaussian", seed=0)
    with torch.no_grad():
        return module.attention_weights(q.expand(1, heads, N, N), k.expand(1, heads, N, N))[0, 0].double().numpy()


def test_a_fitted_panel_is_the_stored_states_attention_weights_and_a_missing_fit_is_refused(tmp_path):
    fitted = _store_fit(tmp_path, "distilled", features=8)
    config = build_config("distilled", features=8).to_dict()
    q, k, _ = make_probe(N, "gaussian", seed=0)
    exact = attention_weights(q, k)[0, 0].numpy()
    panel = fitted_panel(
        "distilled", "distilled", config, stored_fits(tmp_path), q, k, inputs="gaussian", causal=False, exact=exact
    )
    np.testing.assert_allclose(panel.weights, _expected(fitted), rtol=1e-5, atol=1e-7)
    torch.manual_seed(0)
    as_built = build_variant("distilled", **config)
    as_built.materialize(2, N)
    assert np.abs(panel.weights - _expected(as_built)).max() > 1e-3  # the stored state, not a fresh variant
    assert panel.note.startswith("fitted state ") and "fitted at N=32, H=2, inputs gaussian" in panel.note
    assert panel.rel_error == pytest.approx(np.linalg.norm(panel.weights - exact) / np.linalg.norm(exact))
    other = build_config("distilled", features=4).to_dict()  # a config the sweep never fitted
    missing = fitted_panel(
        "distilled(features=4)",
        "distilled",
        other,
        stored_fits(tmp_path),
        q,
        k,
        inputs="gaussian",
        causal=False,
        exact=exact,
    )
    assert missing.weights is None
    assert missing.note == "no fitted state of distilled(features=4) in RUN_DIR/fitted/: not drawn (not re-fitted)"


def test_a_fit_at_another_head_dim_is_refused_with_the_maps_n_that_draws_it(tmp_path):
    _store_fit(tmp_path, "distilled", head_dim=8, features=8)
    q, k, _ = make_probe(N, "gaussian", seed=0)
    config = build_config("distilled", features=8).to_dict()
    panel = fitted_panel(
        "d", "distilled", config, stored_fits(tmp_path), q, k, inputs="gaussian", causal=False, exact=None
    )
    assert (
        panel.weights is None
        and panel.note == f"fitted at D=8, the maps' probe has D = N = {N}: draw them with --maps-n 8"
    )


@pytest.mark.slow
def test_the_maps_child_draws_the_stored_fit_and_refuses_a_learnable_variant_without_one(tmp_path):
    fitted = _store_fit(tmp_path, "distilled", features=8)
    series = [
        ("dense", "dense", {}),
        ("distilled", "distilled", build_config("distilled", features=8).to_dict()),
        ("linformer", "linformer", build_config("linformer", k=4, max_seq_len=N).to_dict()),
    ]
    maps = isolated_maps(series, n=N, inputs="gaussian", run_dir=tmp_path, timeout_s=load_scaled(60))
    dense, distilled, linformer = maps.panels
    assert maps.fitted and dense.rel_error < 1e-5
    np.testing.assert_allclose(distilled.weights, _expected(fitted), rtol=1e-5, atol=1e-7)
    assert linformer.weights is None and "no fitted state of linformer in RUN_DIR/fitted/" in linformer.note
