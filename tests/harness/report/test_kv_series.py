"""kv_dtype is a series field: dense with an int8 cache is its own series, 'dense[kv=int8]', in the same table as plain
dense (the baseline it is paired with) and the other variants, so an error budget can pick it."""

from __future__ import annotations

from harness.report.analysis import is_baseline_series
from tests.helpers.synthetic_run import analysed_rows, make_rows


def _rows():
    """dense exact, sliding_window (error 0.3), and dense with an int8 cache: error 0.01, 1.5x faster than dense,
    paired [1.4-1.6] (a fused int8 kernel moving a quarter of the bytes)."""
    rows = make_rows(variants=("dense", "sliding_window"), inputs=("gaussian",), with_failures=False)
    quantized = []
    for r in rows:
        if r["variant"] == "dense":
            q = dict(r, kv_dtype="int8", cell_id=r["cell_id"] + "-int8", rel_l2_error=0.01)
            q.update(
                latency_s=r["latency_s"] / 1.5, latency_p20_s=r["latency_s"] / 1.52, latency_p80_s=r["latency_s"] / 1.48
            )
            q.update(speedup=1.5, speedup_low=1.4, speedup_high=1.6)
            quantized.append(q)
    return rows + quantized


def test_dense_with_an_int8_cache_is_its_own_series_and_not_the_baseline():
    run = analysed_rows(_rows(), None, (0.05, 1e-3))
    frame = run.frame
    labels = set(frame["series"])
    assert labels == {"dense", "dense[kv=int8]", "sliding_window"}
    assert not is_baseline_series("dense[kv=int8]") and not is_baseline_series("dense(backend=math)[kv=int8]")
    assert is_baseline_series("dense") and is_baseline_series("dense(backend=math)")
    (table,) = run.tables  # one table: kv_dtype is no setting of its own
    at = frame[frame["seq_len"] == 1024].set_index("series")
    assert at.at["dense", "dense_speedup"] == 1  # plain dense is the baseline
    assert at.at["dense[kv=int8]", "dense_speedup"] == 1.5  # paired with it
    # within 0.05 the int8 cache wins (faster than dense, its error 0.01); within 1e-3 only plain dense is left
    assert table.picks[(1024, 0.05)].text() == "dense[kv=int8] 1.5x [1.4-1.6]"
    assert table.picks[(1024, 1e-3)].text() == "dense"
