"""The progress line: full labels, the last cell's latency, and an ETA weighted by each cell's expected cost."""

from __future__ import annotations

import io

from harness.runner.progress import Progress, expected_cost
from harness.schema import Cell


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _cell(N: int, mode: str = "forward", variant: str = "dense") -> Cell:
    return Cell(
        variant=variant,
        config={},
        seq_len=N,
        kv_len=N,
        batch=1,
        heads=8,
        head_dim=64,
        dtype="float32",
        device="cpu",
        causal=False,
        mode=mode,
        inputs="gaussian",
        seed=0,
    )


def test_a_long_cell_weighs_more_than_a_short_one():
    assert expected_cost(_cell(8192)) > 100 * expected_cost(_cell(256))
    assert expected_cost(_cell(1024, "train")) == 3.5 * expected_cost(_cell(1024))


def test_the_line_shows_counts_full_labels_and_the_last_latency():
    cells = [_cell(256, variant="sliding_window"), _cell(512)]
    stream = _Terminal()
    progress = Progress(cells, enabled=True, stream=stream)
    progress.start(cells[0])
    progress.finish(cells[0], {"status": "ok", "latency_s": 0.0123})
    progress.close()
    text = stream.getvalue()
    assert "1/2 cells" in text and "sliding_window N=256 forward float32 D=64 gaussian: ok 12.3ms" in text


def test_the_eta_is_weighted_by_cost_and_skipped_cells_leave_the_total():
    cells = [_cell(256), _cell(4096), _cell(8192)]
    progress = Progress(cells, {cells[0].cell_id}, enabled=False)
    assert progress.done == 1 and progress.planned_cost == expected_cost(cells[1]) + expected_cost(cells[2])
    progress.finish(cells[1], {"status": "oom"}, measured=False)  # not run: its cost leaves the total
    assert progress.planned_cost == expected_cost(cells[2]) and progress.measured_cost == 0
    progress.finish(cells[2], {"status": "ok", "latency_s": 1.0})
    assert progress.measured_cost == progress.planned_cost and progress.done == 3
