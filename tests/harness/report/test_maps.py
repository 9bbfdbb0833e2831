"""harness.report.maps: the identity probe recovers each variant's matrix, and says why when it cannot."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.report.maps import attention_maps, effective_map, make_probe
from variants import attention_weights, build_variant, list_variants


def test_identity_probe_recovers_the_exact_map_and_a_band():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 1, 32, 32, generator=g), torch.randn(1, 1, 32, 32, generator=g)
    dense = effective_map(build_variant("dense", backend="reference"), q, k)
    assert np.allclose(dense, attention_weights(q, k)[0, 0].numpy(), atol=1e-5)
    causal = effective_map(build_variant("dense"), q, k, causal=True)
    assert np.abs(np.triu(causal, 1)).max() == 0.0
    if "sliding_window" in list_variants():
        sw = build_variant("sliding_window", window=4)
        band = attention_weights(q, k, pattern=sw.pattern)[0, 0].numpy()
        assert np.allclose(effective_map(sw, q, k), band, atol=1e-5)
        assert (band[0, 10:] == 0).all()  # the probe really distinguishes a band from dense


def test_a_variant_not_linear_in_v_gets_no_map():
    q = k = torch.randn(1, 1, 8, 8)

    def squares(q, k, v, *, causal=False):
        return torch.softmax(q @ k.transpose(-1, -2), -1) @ (v * v)

    with pytest.raises(ValueError, match="not linear in v"):
        effective_map(squares, q, k)


def test_maps_panels_explain_what_cannot_be_drawn(monkeypatch):
    from variants.dense import DenseAttention

    series = [
        ("dense", "dense", {"backend": "auto"}),
        ("xf", "dense", {"backend": "xformers"}),
        ("linformer", "linformer", {"k": 16}),
        ("ghost", "ghost_attention", {}),
    ]
    maps = attention_maps(series, n=16, inputs="local", causal=True)
    panels = {p.label: p for p in maps.panels}
    assert panels["dense"].rel_error < 1e-5 and panels["dense"].weights.shape == (16, 16)
    assert panels["xf"].weights is not None and "drawn with auto" in panels["xf"].note
    assert panels["linformer"].weights is None and panels["linformer"].note.startswith(
        "unsupported: does not support causal=True"
    )
    assert panels["ghost"].weights is None and "not registered here" in panels["ghost"].note
    monkeypatch.setattr(DenseAttention, "linear_in_v", False, raising=False)
    opted_out = attention_maps(series[:1], n=16).panels[0]
    assert opted_out.weights is None and "linear_in_v = False" in opted_out.note


def test_probe_uses_the_registered_distribution_and_its_knobs():
    q, k, used = make_probe(8, "gaussian:scale=4", seed=3)
    q1, k1, _ = make_probe(8, "gaussian", seed=3)
    assert used == "gaussian:scale=4" and q.shape == k.shape == (1, 1, 8, 8)
    torch.testing.assert_close(q, 4 * q1)  # the knob reached the generator
    torch.testing.assert_close(k, k1)
    with pytest.raises(ValueError, match=r"inputs 'gaussian' has no parameter 'rank'"):
        make_probe(8, "gaussian:rank=8")  # no silent fallback to other inputs
    with pytest.raises(ValueError, match=r"Unknown inputs 'gausian'.*Did you mean 'gaussian'"):
        make_probe(8, "gausian")


def test_maps_draw_each_config_a_run_really_ran_once_and_an_out_of_budget_search_labelled():
    from harness.report.heatmaps import map_series
    from harness.store import rows_frame
    from tests.helpers.synthetic_run import make_budget_rows

    rows = make_budget_rows(inputs=("local",))
    rows += [
        dict(r, cell_id=r["cell_id"] + "-same", matched_budget=0.1, config={"backend": "auto", "window": 512})
        for r in rows
        if r["variant"] == "sliding_window" and r["matched_budget"] == 0.05
    ]  # 512 found for 0.1 too
    series = map_series(rows_frame(rows), "local", 64)
    labels = [label for label, _, _ in series]
    assert labels.count("sliding_window(window=512)") == 1 and "sliding_window(window=256)" in labels
    assert "linformer(k=256)" in labels  # ran ok for 0.1: drawn with the k it ran
    unreachable_only = [dict(r, status="unreachable") if r["variant"] == "linformer" else r for r in make_budget_rows()]
    labels = [label for label, _, _ in map_series(rows_frame(unreachable_only), "local", 64)]
    assert "linformer(k=1024) (out of budget)" in labels  # the top of the range its search tried


@pytest.mark.parametrize("n,label", [(64, "exact at this N"), (128, "out of budget")])
def test_an_unreached_window_that_covers_every_key_of_the_map_is_labelled_exact(n, label):
    """sliding_window(window=73) missed its budget at a longer N; in a map of N = 64 it sees every key: plain softmax."""
    from harness.report.heatmaps import map_series
    from harness.store import rows_frame
    from tests.helpers.synthetic_run import make_budget_rows

    rows = [
        dict(
            r,
            variant="sliding_window",
            config={"backend": "auto", "window": 73},
            tuning={"knob": "window", "low": 16, "high": 73, "tried": {"73": 0.2}},
        )
        for r in make_budget_rows()
        if r["status"] == "unreachable"
    ]
    (series,) = map_series(rows_frame(rows), "local", n)
    assert series[0] == f"sliding_window(window=73) ({label})"
