"""The progress line: full labels, the last cell's latency, and an ETA weighted by each cell's expected cost."""

from __future__ import annotations

import io

from harness.row import Row
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
    progress.finish(cells[0], Row(cell=cells[0], cell_id=cells[0].cell_id, status="ok", latency_s=0.0123))
    progress.close()
    text = stream.getvalue()
    assert "1/2 cells" in text and "sliding_window N=256 forward float32 D=64 gaussian: ok 12.3ms" in text


def test_the_eta_is_weighted_by_cost_and_skipped_cells_leave_the_total():
    cells = [_cell(256), _cell(4096), _cell(8192)]
    progress = Progress(cells, {cells[0].cell_id}, enabled=False)
    assert progress.done == 1 and progress.planned_cost == expected_cost(cells[1]) + expected_cost(cells[2])
    progress.finish(
        cells[1], Row(cell=cells[1], cell_id=cells[1].cell_id, status="oom"), measured=False
    )  # not run: its cost leaves the total
    assert progress.planned_cost == expected_cost(cells[2]) and progress.measured_cost == 0
    progress.finish(cells[2], Row(cell=cells[2], cell_id=cells[2].cell_id, status="ok", latency_s=1.0))
    assert progress.measured_cost == progress.planned_cost and progress.done == 3


def test_without_a_terminal_a_plain_line_comes_every_30_seconds_with_the_counts():
    cells = [_cell(n) for n in (64, 128, 256, 512)]
    now = iter([0.0, 10.0, 31.0, 40.0, 75.0])  # start, then one reading per finished cell: lines at 31 s and 75 s
    stream = io.StringIO()  # not a terminal: a log file or CI
    progress = Progress(cells, enabled=True, stream=stream, clock=lambda: next(now))
    for cell, status in zip(cells, ["ok", "timeout", "ok", "ok"]):
        progress.finish(
            cell,
            Row(cell=cell, cell_id=cell.cell_id, status=status, latency_s=0.001, contended=cell.seq_len >= 256 or None),
        )
    lines = stream.getvalue().splitlines()
    assert lines == [
        "progress: 2/4 cells (1 ok, 1 timeout); last dense N=128 forward float32 D=64 gaussian: timeout",
        "progress: 4/4 cells (3 ok, 1 timeout; 2 contended); last dense N=512 forward float32 D=64 gaussian: ok 1ms "
        "contended",
    ], lines
    quiet = io.StringIO()
    progress = Progress(cells, enabled=False, stream=quiet, clock=lambda: 1e9)
    progress.finish(cells[0], Row(cell=cells[0], cell_id=cells[0].cell_id, status="ok"))
    assert quiet.getvalue() == ""  # --quiet
