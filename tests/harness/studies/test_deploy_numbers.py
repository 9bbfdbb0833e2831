"""The deploy study's numbers on hand-made cases: errors, latency ratios, mismatch, reasons and the table's cells."""

from __future__ import annotations

import numpy as np
import pytest

from harness.studies.deploy_numbers import MATCH_TOLERANCE, first_line, latency_ratio, target_scores, timed_fields
from harness.report.deploy_table import deploy_caveat, deployable_table, ok_summary


def test_errors_are_max_abs_against_the_call_and_rel_l2_against_float64():
    exact = np.array([[3.0, 4.0]])  # ||exact|| = 5
    call = np.array([[3.0, 4.0 + 2e-5]], dtype=np.float32)
    output = np.array([[3.0 + 3e-5, 4.0]], dtype=np.float32)
    scores = target_scores(output, call, exact)
    assert scores["max_abs_error"] == pytest.approx(3e-5, rel=1e-2)  # |3+3e-5 - 3| beats |4 - (4+2e-5)|
    assert scores["rel_l2_error"] == pytest.approx(3e-5 / 5, rel=1e-2)
    with pytest.raises(ValueError, match=r"output shape \(1, 2\) differs"):
        target_scores(output, call[:, :1], exact)


def test_latency_ratio_is_target_over_eager_and_a_mismatch_says_by_how_much():
    assert latency_ratio(0.003, 0.002) == pytest.approx(1.5)
    assert latency_ratio(None, 0.002) is None and latency_ratio(0.003, 0.0) is None
    ok = timed_fields(0.001, 0.004, {"max_abs_error": MATCH_TOLERANCE / 2, "rel_l2_error": 1e-7})
    assert ok["status"] == "ok" and ok["latency_ratio"] == pytest.approx(0.25) and ok["latency_s"] == 0.001
    off = timed_fields(0.001, 0.004, {"max_abs_error": 2e-3, "rel_l2_error": 1e-3})
    assert off["status"] == "mismatch"
    assert off["reason"] == "max abs error 0.002 against the PyTorch call exceeds 0.0001"


def test_first_line_keeps_the_exporters_words_and_what_specialised():
    assert first_line(TypeError("unhashable type: non-nested SymInt\nmore")) == (
        "TypeError: unhashable type: non-nested SymInt"
    )
    message = (
        "Constraints violated (L['q'].size()[2])! For more information, run with TORCH_LOGS=\"+dynamic\".\n"
        "  - You marked L['q'].size()[2] as dynamic but your code specialized it to be a constant (32). If you're...\n"
    )
    assert first_line(RuntimeError(message)) == (
        "RuntimeError: Constraints violated: You marked L['q'].size()[2] as dynamic but your code specialized it to "
        "be a constant (32)."
    )


def _row(target, seq_len, **fields):
    base = {"variant": "dense", "backend": "sdpa", "target": target, "seq_len": seq_len, "step": None}
    return {**base, "status": "ok", "reason": None, **fields}


def test_the_table_cells_give_the_ratio_range_worst_errors_and_size():
    rows = [
        _row("onnxruntime", 64, latency_ratio=0.8, max_abs_error=1e-7, rel_l2_error=2e-7, file_bytes=13 * 1024),
        _row("onnxruntime", 128, latency_ratio=1.25, max_abs_error=3e-7, rel_l2_error=1e-7, file_bytes=13 * 1024),
    ]
    assert ok_summary(rows) == "ok 0.80-1.25x, err 3.0e-07, L2 2.0e-07, 13 KiB"
    refused = _row("onnxruntime-web", 128, status="unsupported", step="run", reason="Error: no kernel")
    table = deployable_table([*rows, _row("onnxruntime-web", 64, latency_ratio=2.0, file_bytes=10), refused])
    assert table.headers == ["variant", "onnxruntime", "onnxruntime-web"]
    assert table.rows[0][0] == "dense (sdpa)"
    assert table.rows[0][2] == "ok 2.00x, err -, L2 -, 10 B at N=64; unsupported (run) at N=128: Error: no kernel"


def test_the_recommendation_names_variants_a_target_refuses_at_every_length():
    ok = _row("onnxruntime", 64, latency_ratio=1.0, max_abs_error=0.0, rel_l2_error=0.0, file_bytes=1)
    refused = {"variant": "chunked", "status": "unsupported", "step": "torch.export", "reason": "constant (64)"}
    partly = {**refused, "variant": "linformer", "target": "torch.export", "step": "run", "seq_len": 128}
    rows = [ok, {**refused, "target": "torch.export"}, {**refused, "target": "onnxruntime"}, partly]
    rows.append({**ok, "variant": "linformer", "target": "torch.export"})  # ok at one length: not refused everywhere
    assert deploy_caveat(rows) == (
        "**Deployable?** Refused at every length by some target (deploy): chunked (torch.export, onnxruntime: fails "
        "at torch.export); reasons in the Deployable? table."
    )
    assert deploy_caveat([ok]) is None
