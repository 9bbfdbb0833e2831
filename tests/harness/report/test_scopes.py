"""The layer-share table, the decode figures and the math-fallback warning, from synthetic rows."""

from __future__ import annotations

from harness.report import analysis, overview, scaling
from harness.report.figures import FIGURES, figure_section
from harness.report.render import Image, Paragraph, Table
from harness.store import rows_frame
from tests.helpers.synthetic_run import analysed_rows, blank_row


def _row(variant, n, latency, **fields):
    row = blank_row()
    row.update(
        variant=variant,
        config={"backend": "auto"},
        seq_len=n,
        kv_len=n,
        batch=1,
        heads=8,
        head_dim=64,
        status="ok",
        dtype="float32",
        device="cpu",
        mode="forward",
        causal=False,
        inputs="gaussian",
        latency_s=latency,
    )
    row.update(fields)
    return row


def _frame(rows):
    return analysis.with_dense_ratios(rows_frame(rows))


def test_layer_share_and_both_speedups_per_n():
    rows = []
    for n, dense_attention, dense_layer, window_attention, window_layer in (
        (1024, 1.0, 4.0, 0.5, 3.5),
        (2048, 4.0, 10.0, 1.0, 7.0),
    ):
        rows += [
            _row("dense", n, dense_attention),
            _row("dense", n, dense_layer, scope="layer"),
            _row("sliding_window", n, window_attention),
            _row("sliding_window", n, window_layer, scope="layer"),
        ]
    blocks = scaling.layer_share(_frame(rows))
    table = next(b for b in blocks if isinstance(b, Table))
    assert table.headers[3] == "attention share"
    assert [r[3] for r in table.rows] == ["25%", "40%"]
    assert table.rows[1][4].replace(" ", "") == "4.00x/1.43x;-"  # 4 / 1 attention, 10 / 7 layer; no error recorded


def test_the_layer_table_shows_a_matched_series_layer_error_above_its_budget():
    from harness.report.analysis import with_budgets

    matched = dict(matched_budget=0.05, error_metric="rel_l2")
    rows = [
        _row("dense", 1024, 1.0, rel_l2_error=1e-7),
        _row("dense", 1024, 4.0, scope="layer", rel_l2_error=2e-7),
        _row("sliding_window", 1024, 0.5, rel_l2_error=0.04, **matched),
        _row("sliding_window", 1024, 3.5, scope="layer", rel_l2_error=0.16, **matched),
    ]
    blocks = scaling.layer_share(with_budgets(_frame(rows), (0.05,), "rel_l2"))
    table = next(b for b in blocks if isinstance(b, Table))
    assert table.headers[4] == "sliding_window@0.05 (attention / layer; layer error)"
    assert table.rows[0][4].endswith("; 0.16")
    intro = next(b for b in blocks if isinstance(b, Paragraph)).text
    assert "searched on attention alone" in intro and "not paired with dense" in intro


def test_no_layer_section_without_both_scopes():
    assert scaling.layer_share(_frame([_row("dense", 64, 1.0), _row("sliding_window", 64, 0.5)])) == []


def test_decode_figures_only_with_decode_rows(tmp_path):
    assert figure_section(analysed_rows([_row("dense", 64, 1.0)]), tmp_path, "decode") == ([], [])
    rows = [_row("dense", n, 1e-4 * n / 64, phase="decode", causal=True, state_bytes=1024 * n) for n in (64, 128)]
    rows += [_row("sliding_window", n, 1e-4, phase="decode", causal=True, state_bytes=4096) for n in (64, 128)]
    paths, blocks = figure_section(analysed_rows(rows), tmp_path, "decode")
    assert (
        sorted(p.name for p in paths)
        == sorted(f.file for f in FIGURES if f.section == "decode")
        == ["decode_latency_vs_n.png", "state_bytes_vs_n.png"]
    )
    assert all(p.stat().st_size > 0 for p in paths)
    assert sum(isinstance(b, Image) for b in blocks) == 2


def test_math_fallback_on_cuda_is_flagged_and_cpu_is_not():
    cpu = _frame([_row("dense", 64, 1.0, sdpa_kernel="math")])
    assert overview.math_fallback(cpu) == []
    cuda = _frame(
        [
            _row("dense", 64, 1.0, device="cuda", sdpa_kernel="flash"),
            _row("dense", 128, 1.0, device="cuda", sdpa_kernel="math"),
        ]
    )
    [line] = overview.math_fallback(cuda)
    assert isinstance(line, Paragraph) and "math kernel on CUDA" in line.text and "dense N=128" in line.text
    assert any(isinstance(b, Paragraph) and "math kernel" in b.text for b in overview.outcome(cuda))


def test_outcome_says_how_many_cells_were_not_run_as_the_terminal_does():
    frame = _frame(
        [
            _row("dense", 64, 1.0),
            _row("dense", 128, None, status="timeout", reason="cell ran past its limit of 120 s"),
            _row("dense", 256, None, status="timeout", reason="not run: timeout at N=128 for the same variant"),
        ]
    )
    [total] = [b.text for b in overview.outcome(frame) if isinstance(b, Paragraph)]
    assert total.startswith("3 cells: 1 ok, 2 timeout (1 of them not run: a shorter N of their series ran out")
    assert "not run" not in [b.text for b in overview.outcome(frame.iloc[:2]) if isinstance(b, Paragraph)][0]
