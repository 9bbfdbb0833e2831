"""The report's first warning by what it says on hand-made rows: processes that disagreed on a quiet machine are
named as such, a loaded run as loaded, other noise as noise, and a few noisy cells need no warning."""

from __future__ import annotations

import pandas as pd

from harness.report.overview import load_warning

WIDE = "speed-up interval wide over 4 processes (0.3-0.43)"


def _frame(reasons: list[str | None], load: float = 0.0) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "status": ["ok"] * len(reasons),
            "noisy": [r is not None for r in reasons],
            "noise_reason": reasons,
            "load_per_cpu": [load] * len(reasons),
            "contended": [False] * len(reasons),
        }
    )


def test_processes_that_disagreed_on_a_quiet_machine_are_named():
    [line] = load_warning(_frame([WIDE, WIDE, None, None]))
    assert line.startswith("The processes that timed this run disagreed on 2 of 4 timed cells, marked noisy")


def test_a_loaded_run_and_other_noise_keep_their_words():
    [loaded] = load_warning(_frame([WIDE, WIDE, None, None], load=0.8))
    assert loaded.startswith("This run was measured under load (up to 0.80 per CPU")
    [other] = load_warning(_frame(["timed blocks spread p80/p20 1.50", WIDE, None, None]))
    assert other.startswith("This run was measured with noisy timings: 2 of 4 timed cells are marked noisy")


def test_a_few_noisy_cells_need_no_warning():
    assert load_warning(_frame([WIDE] + [None] * 10)) == []  # under NOISY_SHARE (10%)
