"""A learnable variant's map in the fitted state the sweep measured: RUN_DIR/fitted/ read through attention_weights.

The sweep stores each fit under its calibration key (harness.executors.worker.store_fitted: the .pt from
variants.checkpoint, its .json with the key). A panel loads the fit of its series (same variant and config) and
draws `attention_weights` of head 0 on the maps' probe, after checking that those weights times a random v are
the module's output; a series without a stored fit is refused by name, never fitted again at report time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.executors.worker import FITTED_DIR, fitted_path
from harness.report.maps import LINEARITY_TOLERANCE, MapPanel
from variants.checkpoint import load_variant


@dataclass(frozen=True)
class StoredFit:
    """One fit in RUN_DIR/fitted/: its state file and the calibration key it was stored under."""

    path: Path  # RUN_DIR/fitted/<hash>.pt
    key: dict[str, Any]  # the cell fields of the fit (variant, config, seq_len, heads, head_dim, inputs, causal, ...)


def stored_fits(run_dir: str | Path) -> list[StoredFit]:
    """Every readable fit in RUN_DIR/fitted/ whose state file matches its key (an unreadable one is left out)."""
    fits = []
    for meta_path in sorted((Path(run_dir) / FITTED_DIR).glob("*.json")):
        try:
            text_key = json.loads(meta_path.read_text(encoding="utf-8"))["key"]
            key = json.loads(text_key)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        path = fitted_path(Path(run_dir), text_key)
        if path == meta_path.with_suffix(".pt") and path.is_file() and isinstance(key, dict):
            fits.append(StoredFit(path, key))
    return fits


def choose_fit(fits: list[StoredFit], name: str, config: dict, *, inputs: str, causal: bool) -> StoredFit | None:
    """The fit of `name` with exactly `config`: on the maps' causality and inputs where there is one, then the
    shortest fit length (the file name breaks ties, so the choice is the same on every report)."""
    mine = [f for f in fits if f.key.get("variant") == name and f.key.get("config") == (config or {})]
    return min(
        mine,
        key=lambda f: (f.key.get("causal") != causal, f.key.get("inputs") != inputs, f.key.get("seq_len", 0), f.path),
        default=None,
    )


def fitted_panel(
    label: str, name: str, config: dict, fits: list[StoredFit], q, k, *, inputs, causal, exact
) -> MapPanel:
    """The panel of a learnable series: head 0's attention_weights of its stored fit on the probe q, k (1, 1, N, N)."""
    fit = choose_fit(fits, name, config, inputs=inputs, causal=causal)
    if fit is None:
        return MapPanel(
            label, None, f"no fitted state of {label} in RUN_DIR/{FITTED_DIR}/: not drawn (not re-fitted)", None
        )
    N, D = q.shape[2], int(fit.key.get("head_dim", -1))
    if D != q.shape[3]:
        return MapPanel(
            label, None, f"fitted at D={D}, the maps' probe has D = N = {N}: draw them with --maps-n {D}", None
        )
    try:
        weights = _fitted_weights(fit, q, k, causal=causal)
    except ValueError as exc:
        return MapPanel(label, None, str(exc), None)
    where = f"inputs {fit.key.get('inputs')}" + (
        f", causal={fit.key.get('causal')}" if fit.key.get("causal") != causal else ""
    )
    note = f"fitted state {fit.path.name} (fitted at N={fit.key.get('seq_len')}, H={fit.key.get('heads')}, {where})"
    rel = float(np.linalg.norm(weights - exact) / np.linalg.norm(exact))
    return MapPanel(label, weights, note, rel)


def _fitted_weights(fit: StoredFit, q, k, *, causal: bool) -> np.ndarray:
    """(N, N) float64: head 0's weights of the stored module on the probe repeated over the fit's heads; ValueError
    when it refuses the probe, gives no weights or its weights do not give its output."""
    module = load_variant(fit.path).float().eval()
    N = q.shape[2]
    H, H_kv = int(fit.key.get("heads", 1)), int(fit.key.get("kv_heads", fit.key.get("heads", 1)))
    q_all, k_all = (
        q.expand(1, H, N, N).contiguous(),
        k.expand(1, H_kv, N, N).contiguous(),
    )  # (1, H, N, D), (1, H_kv, N, D)
    v = torch.randn(1, H_kv, N, N, generator=torch.Generator().manual_seed(1), dtype=q.dtype)
    reasons = module.not_supported_reasons(q_all, k_all, v, causal=causal, training=False)
    if reasons:
        raise ValueError("unsupported: " + "; ".join(reasons))
    with torch.no_grad():
        weights = module.attention_weights(q_all, k_all, causal=causal)
        if weights is None:
            raise ValueError(f"{module.name} gives no attention_weights: its fitted map cannot be drawn")
        out = module(q_all, k_all, v, causal=causal)[0, 0].double()  # (N, D): head 0 reads K/V head 0
    head = weights[0, 0].double()  # (N, M)
    gap = float((out - head @ v[0, 0].double()).norm() / out.norm().clamp_min(1e-30))
    if not np.isfinite(gap) or gap > LINEARITY_TOLERANCE:
        raise ValueError(f"failed: attention_weights times v is not the output (|out - A v| / |out| = {gap:.2g})")
    return head.numpy()
