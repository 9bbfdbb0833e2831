"""Effective attention maps computed in a child process, each panel under a time limit.

The maps run every variant again, so they get the same protection as the cells: a variant that
hangs, crashes, calls sys.exit or returns garbage costs its own panel (a note saying why),
never the report or the sweep. The panels run one after another in one child (harness.child); when the
child dies or a panel runs past the limit, that panel is marked failed and a fresh child takes the rest.
A panel's limit starts when the child is ready (torch imported, plugins loaded), so a slow start on a busy machine
costs no panel; a child that cannot start (a plugin that fails or hangs on import) fails every panel left, once.
Given the run folder, learnable variants are drawn in the fitted state the sweep stored (harness.report.maps_fitted).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from harness.child import ChildFailed, ChildProcess
from harness.plugins import load_plugins
from harness.report.maps import MapPanel, MapSet, make_probe, map_panel
from harness.report.maps_fitted import fitted_panel, stored_fits
from variants import attention_weights, get_variant

DEFAULT_PANEL_TIMEOUT_S = 120.0  # a panel's limit when the run recorded no cell_timeout_s
PANEL_SERVER = "harness.report.maps_isolated:serve_panels"  # the child's entry (harness.child)
NAME = "the maps' process"  # how a failure's reason names the child


def isolated_maps(
    series: Sequence[tuple[str, str, dict]],
    *,
    n: int = 64,
    inputs: str = "gaussian",
    seed: int = 0,
    causal: bool = False,
    run_dir: str | Path | None = None,
    timeout_s: float | None = None,
    plugins: Sequence[str] = (),
) -> MapSet:
    """harness.report.maps.attention_maps, each panel in a child process with `timeout_s` seconds (default 120);
    with `run_dir`, learnable variants in the fitted state stored in RUN_DIR/fitted/ (refused where none is)."""
    q, k, used = make_probe(n, inputs, seed=seed)  # here too: an unknown distribution is the caller's ValueError
    exact = attention_weights(q, k, causal=causal)[0, 0].numpy()
    limit = timeout_s or DEFAULT_PANEL_TIMEOUT_S
    fitted = None if run_dir is None else str(run_dir)
    setup = {"n": n, "inputs": used, "seed": seed, "causal": causal, "run_dir": fitted, "plugins": list(plugins)}
    panels: list[MapPanel] = []
    with ChildProcess(PANEL_SERVER, setup, name=NAME, result="panel") as child:
        for index, (label, name, config) in enumerate(series):
            if len(panels) == len(series):
                break  # the child could not start: every panel left has failed already
            try:
                panels.append(_panel_from(child.run([label, name, config], limit)))
            except ChildFailed as failed:  # the panel it was on; every panel left when the child could not start
                failed_here = series[index : index + 1] if failed.started else series[index:]
                panels += [MapPanel(label, None, f"failed: {_why(failed)}", None) for label, _, _ in failed_here]
    return MapSet(exact=exact, panels=panels, n=n, inputs=used, seed=seed, causal=causal, fitted=fitted is not None)


def _why(failed: ChildFailed) -> str:
    """The failure without the child's name: a panel's note says 'failed: did not finish within 4 s ...'."""
    return failed.reason.removeprefix(NAME).strip()


def _panel_from(data: dict[str, Any]) -> MapPanel:
    weights = None if data["weights"] is None else np.asarray(data["weights"], dtype=np.float64)
    return MapPanel(data["label"], weights, data["note"], data["rel_error"])


def serve_panels(setup: dict[str, Any]) -> Callable[[list], dict[str, Any]]:
    """In the child: the plugins loaded, the probe made and the run's fits listed, then one panel (as JSON-safe data)
    per series sent."""
    load_plugins(setup["plugins"])
    q, k, used = make_probe(setup["n"], setup["inputs"], seed=setup["seed"])
    causal = setup["causal"]
    exact = attention_weights(q, k, causal=causal)[0, 0].numpy()
    fits = None if setup["run_dir"] is None else stored_fits(setup["run_dir"])

    def panel(series: list) -> dict[str, Any]:
        label, name, config = series
        if fits is not None and _learnable(name):
            drawn = fitted_panel(label, name, config, fits, q, k, inputs=used, causal=causal, exact=exact)
        else:
            drawn = map_panel(label, name, config, q, k, seed=setup["seed"], causal=causal, exact=exact)
        weights = None if drawn.weights is None else drawn.weights.tolist()
        return {"label": drawn.label, "weights": weights, "note": drawn.note, "rel_error": drawn.rel_error}

    return panel


def _learnable(name: str) -> bool:
    try:
        return get_variant(name).capabilities.learnable
    except ValueError:  # not registered here: map_panel says so
        return False
