"""harness.report.plotting: one colour per variant, one style per config."""
from __future__ import annotations

from harness.report.plotting import series_styles, variant_colors
from harness.store import rows_frame
from tests.helpers.synthetic_run import make_rows


def test_one_colour_per_variant_in_every_figure():
    colors = variant_colors(["zeta", "dense", "alpha", "chunked"])
    assert colors["dense"] == "black" and colors["alpha"] != colors["zeta"]
    assert variant_colors(["alpha", "zeta"]) == {k: colors[k] for k in ("alpha", "zeta")}  # independent of who else ran
    frame = rows_frame([dict(r, config={"window": w}) for w in (64, 128) for r in make_rows(variants=("sliding_window",))]
                       + make_rows(variants=("dense",)))
    styles = series_styles(frame)
    assert styles["sliding_window(window=64)"]["color"] == styles["sliding_window(window=128)"]["color"]
    assert styles["sliding_window(window=64)"]["linestyle"] != styles["sliding_window(window=128)"]["linestyle"]
