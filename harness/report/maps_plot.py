"""The effective attention maps' figure (attention_maps.png): the exact weights, then each series' map, on one scale."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness.report import plotting
from harness.report.maps import MapSet


def plot_attention_maps(maps: MapSet, path: Path, *, colors: dict[str, str] | None = None) -> Path:
    """Heatmaps side by side: the exact softmax weights, then each series' effective map on the same colour scale."""
    plt = plotting.pyplot()
    panels = [("exact (float64)", maps.exact, "", None)] + [
        (p.label, p.weights, p.note, p.rel_error) for p in maps.panels
    ]
    nrows, ncols = map_grid(len(panels))
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(3.1 * ncols + 0.8, 3.2 * nrows + 0.6), squeeze=False, constrained_layout=True
    )
    axes = axes.ravel()
    vmax = float(np.max(maps.exact)) * (1 + 1e-3) or 1.0  # headroom: rounding-level excess is not "over"
    # red: negative weights (a linear kernel or a projection can produce them); white: above the exact maximum
    cmap = plt.get_cmap("viridis").with_extremes(under="red", over="white")
    image = None
    for ax, (label, weights, note, rel) in zip(axes, panels):
        variant = label.split("(")[0]
        title_color = (colors or {}).get(variant, "black")
        if weights is None:
            ax.text(
                0.5,
                0.5,
                plotting.wrap(note, 34),
                ha="center",
                va="center",
                fontsize=7,
                transform=ax.transAxes,
                wrap=True,
            )
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(label, fontsize=9, color=title_color)
            continue
        image = ax.imshow(weights, cmap=cmap, vmin=0.0, vmax=vmax, interpolation="nearest")
        subtitle = "" if rel is None else f"\nweights rel. error {rel:.2g}"
        ax.set_title(f"{label}{subtitle}", fontsize=9, color=title_color)
        if note:
            ax.set_xlabel(plotting.wrap(note, 40), fontsize=6)
        ax.tick_params(labelsize=6)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    if image is not None:
        fig.colorbar(
            image, ax=list(axes[: len(panels)]), shrink=0.8, extend="both", label="weight (red < 0, white > exact max)"
        )
    how = (
        "learnable variants as the sweep fitted them"
        if maps.fitted
        else "learnable variants as built (uncalibrated, seeded)"
    )
    causal = ", causal" if maps.causal else ""
    fig.suptitle(
        f"Effective attention maps, N = M = D = {maps.n}, inputs {maps.inputs}, seed {maps.seed}{causal}; "
        f"row = query, column = key; {how}",
        fontsize=9,
    )
    plotting.save(plt, fig, path)
    return path


def map_grid(count: int, *, most: int = 4) -> tuple[int, int]:
    """(rows, columns) for `count` map panels: the fewest rows of at most `most`, filled evenly (6 panels: 2 x 3, not
    2 x 4 with two empty), so fewer than `rows` slots are left empty."""
    nrows = max(1, -(-count // most))
    return nrows, max(1, -(-count // nrows))
