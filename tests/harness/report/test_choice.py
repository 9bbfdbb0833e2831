"""harness.report.choice: the recommendation trusts only paired speed-ups whose interval excludes 1, and says ties."""
from __future__ import annotations

import numpy as np

from harness.report.analysis import with_dense_ratios
from harness.report.choice import recommend
from harness.store import rows_frame
from tests.helpers.synthetic_run import make_rows


def _rows(sliding: tuple[float, float, float] | None, chunked: tuple[float, float, float] | None = None):
    """dense and two exact-enough variants at every N; each variant gets a paired (speedup, low, high) or none."""
    rows = make_rows(variants=("dense", "chunked", "sliding_window"), inputs=("gaussian",), with_failures=False)
    for r in rows:
        r["rel_l2_error"] = 1e-7
        paired = {"sliding_window": sliding, "chunked": chunked}.get(r["variant"])
        if paired:
            r["speedup"], r["speedup_low"], r["speedup_high"] = paired
    return with_dense_ratios(rows_frame(rows))


def test_paired_speedup_overrides_the_latency_ratio_and_old_rows_fall_back():
    frame = _rows((1.5, 1.4, 1.6))
    sw = frame[frame["variant"] == "sliding_window"]
    assert np.allclose(sw["speedup"], 1.5)
    ch = frame[frame["variant"] == "chunked"]  # no paired fields: dense latency / latency, as in older runs
    assert np.allclose(ch["speedup"], ch["dense_latency_s"] / ch["latency_s"])


def test_a_variant_beats_dense_only_when_its_interval_is_above_1():
    text = recommend(_rows((1.5, 1.4, 1.6), (0.5, 0.4, 0.6)), budgets=(1e-3,))[0]
    assert "**sliding_window** (speed-up over dense 1.5x" in text and "tie" not in text
    text = recommend(_rows((1.1, 0.95, 1.3), (0.5, 0.4, 0.6)), budgets=(1e-3,))[0]
    assert "**dense** (a tie: within the timing spread of sliding_window at N=256" in text
    assert "**sliding_window**" not in text


def test_a_winner_within_the_runner_ups_interval_is_a_tie():
    text = recommend(_rows((1.5, 1.3, 1.7), (1.4, 1.2, 1.6)), budgets=(1e-3,))[0]
    assert "**sliding_window**" in text and "a tie: within the timing spread of chunked at N=256" in text
    text = recommend(_rows((2.0, 1.9, 2.1), (1.4, 1.2, 1.6)), budgets=(1e-3,))[0]
    assert "**sliding_window**" in text and "tie" not in text
