"""scripts/repro_check.py's numbers on hand-made matched cells: which run-B ratios lie in run A's intervals."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "repro_check.py"


def _script():
    spec = importlib.util.spec_from_file_location("repro_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_coverage_counts_speedups_and_reference_speedups_inside_a_interval():
    nan = float("nan")
    cells = pd.DataFrame(
        [  # chunked inside, sliding_window outside, dense's reference ratio inside, a cell without intervals skipped
            {"variant": "chunked", "seq_len": 1024, "speedup_b": 0.5, "speedup_low_a": 0.45, "speedup_high_a": 0.6},
            {"variant": "sliding_window", "seq_len": 1024, "speedup_b": 2.0, "speedup_low_a": 1.5, "speedup_high_a": 1.9},
            {"variant": "dense", "seq_len": 1024, "reference_speedup_b": 0.3, "reference_speedup_low_a": 0.3,
             "reference_speedup_high_a": 0.31},
            {"variant": "dense", "seq_len": 2048, "speedup_b": nan, "speedup_low_a": nan, "speedup_high_a": nan},
        ]
    )  # fmt: skip
    inside, checked, missed = _script().coverage(cells)
    assert (inside, checked) == (2, 3)
    assert missed == ["sliding_window N=1024: 2.00 vs [1.50-1.90]"]


def test_pairs_below_one_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as stop:
        _script().main(["0"])
    assert stop.value.code == 2 and "pairs 0: give at least 1" in capsys.readouterr().err
