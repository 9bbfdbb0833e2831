"""Effective attention maps: the N x M matrix each variant actually applies, revealed by V = identity.

Every built-in variant computes out = A(q, k) v for some matrix A (softmax weights, a band,
projected keys, a linear-attention kernel), so feeding v = I (M x M, hence D = M) returns A
itself. The probe then checks the claim on a random v (out == A v); a variant that is not linear
in v fails the check and gets a panel saying so instead of a misleading picture. A plugin can opt
out up front with a class attribute ``linear_in_v = False``.

Runs on CPU in float32 at a small N (default 64, so D = 64 too); nothing here needs the run's device.
Learnable variants are used as built (seeded, uncalibrated) here; the report draws them in the fitted state the
sweep stored instead (harness.report.maps_fitted), never fitting them again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

LINEARITY_TOLERANCE = 1e-3  # relative L2 of out(v) - A v above which a variant is "not linear in v"


@dataclass(frozen=True)
class MapPanel:
    """One panel of the figure: a variant's effective map, or the reason there is none."""

    label: str  # series label (variant plus the config fields that vary)
    weights: np.ndarray | None  # (N, M) float64, row i = the weights query i puts on each key; None if unavailable
    note: str  # why weights is None, or a short remark (e.g. the backend used)
    rel_error: float | None  # ||A - A_exact||_F / ||A_exact||_F, None without weights


@dataclass(frozen=True)
class MapSet:
    """The exact map and one panel per series, with how they were made (for the caption)."""

    exact: np.ndarray  # (N, N) float64, softmax weights of the exact attention
    panels: list[MapPanel]
    n: int  # N = M = D
    inputs: str  # the input distribution
    seed: int
    causal: bool
    fitted: bool  # True: learnable variants in the fitted state the sweep stored (RUN_DIR/fitted/); False: as built


def make_probe(n: int, inputs: str = "gaussian", *, seed: int = 0):
    """q, k of shape (1, 1, n, n) from the registered distribution `inputs` ("name" or "name:param=value").

    Returns (q, k, inputs). D = n so that v = I (n x n) fits the contract (k and v share a shape).
    Raises ValueError for an unknown distribution or knob (harness.inputs.parse_inputs).
    """
    from harness.inputs import make_inputs, parse_inputs  # torch: the report loads it only where maps are drawn

    name, knobs = parse_inputs(inputs)
    q, k, _ = make_inputs(name, knobs, B=1, H=1, N=n, M=n, D=n, seed=seed)
    return q, k, inputs


def effective_map(variant, q, k, *, causal: bool = False) -> np.ndarray:
    """The (N, M) matrix A with variant(q, k, v) == A v, for q (1, 1, N, D) and k (1, 1, M, D) with D == M.

    Raises ValueError when the variant is not linear in v (checked on a random v).
    """
    import torch  # torch: the report loads it only where maps are drawn

    M = k.shape[2]
    if q.shape[3] != M:
        raise ValueError(f"the identity probe needs D == M, got D={q.shape[3]}, M={M}")
    eye = torch.eye(M, dtype=q.dtype)[None, None]  # (1, 1, M, M): v = I, so out = A
    with torch.no_grad():
        out = variant(q, k, eye, causal=causal)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (1, 1, q.shape[2], M):
            got = f"shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(f"the variant returned {got}; expected a tensor of shape {(1, 1, q.shape[2], M)}")
        weights = out[0, 0].double()  # (N, M)
        v = torch.randn(1, 1, M, M, generator=torch.Generator().manual_seed(1), dtype=q.dtype)
        out = variant(q, k, v, causal=causal)[0, 0].double()
    predicted = weights @ v[0, 0].double()
    gap = float((out - predicted).norm() / out.norm().clamp_min(1e-30))
    if not np.isfinite(gap) or gap > LINEARITY_TOLERANCE:
        raise ValueError(f"output is not linear in v (|out - A v| / |out| = {gap:.2g}), so no single map describes it")
    return weights.numpy()


def attention_maps(
    series: Sequence[tuple[str, str, dict]],
    *,
    n: int = 64,
    inputs: str = "gaussian",
    seed: int = 0,
    causal: bool = False,
) -> MapSet:
    """The exact map and each series' effective map on one probe, learnable variants as built.

    Args:
        series: (label, variant name, config dict) per panel; the config as recorded in the rows.
        n: N = M = D of the probe.
        inputs: input distribution (with knobs, "name:k=v").
        seed: seed of the probe.
        causal: draw the causal maps.
    Returns:
        A MapSet; a series that cannot be built, is unsupported or fails gets a panel with the reason.
    """
    from variants import attention_weights  # torch: the report loads it only where maps are drawn

    q, k, used = make_probe(n, inputs, seed=seed)
    exact = attention_weights(q, k, causal=causal)[0, 0].numpy()  # (N, N) float64
    panels = [
        map_panel(label, name, config, q, k, seed=seed, causal=causal, exact=exact) for label, name, config in series
    ]
    return MapSet(exact=exact, panels=panels, n=n, inputs=used, seed=seed, causal=causal, fitted=False)


def map_panel(label, name, config, q, k, *, seed, causal, exact) -> MapPanel:
    """One series' panel on the probe q, k; a failure of the variant becomes the panel's note."""
    import torch  # torch: the report loads it only where maps are drawn

    from variants import NotSupportedError, get_variant  # torch: loaded only where maps are drawn

    try:
        spec = get_variant(name)
    except ValueError as exc:
        return MapPanel(label, None, f"not registered here: {exc}", None)
    if not getattr(spec.cls, "linear_in_v", True):
        return MapPanel(label, None, "declares linear_in_v = False: no single matrix describes it", None)
    fields = {f: v for f, v in (config or {}).items() if f in {x.name for x in spec.fields}}
    note = ""
    try:
        torch.manual_seed(seed)
        variant = spec.cls(spec.config(**fields)).eval()
        eye = torch.eye(k.shape[2])[None, None]
        reasons = variant.not_supported_reasons(q, k, eye, causal=causal, training=False)
        if reasons and fields.get("backend", "auto") != "auto":
            torch.manual_seed(seed)
            variant = spec.cls(spec.config(**{**fields, "backend": "auto"})).eval()
            reasons = variant.not_supported_reasons(q, k, eye, causal=causal, training=False)
            note = f"backend {fields['backend']} unavailable on CPU; drawn with auto"
        if reasons:
            return MapPanel(label, None, "unsupported: " + "; ".join(reasons), None)
        weights = effective_map(variant, q, k, causal=causal)
    except NotSupportedError as exc:
        return MapPanel(label, None, "unsupported: " + "; ".join(exc.reasons), None)
    except Exception as exc:  # one failing variant must not sink the figure: its panel says why
        return MapPanel(
            label, None, f"failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", None
        )
    rel = float(np.linalg.norm(weights - exact) / np.linalg.norm(exact))
    return MapPanel(label, weights, note, rel)
