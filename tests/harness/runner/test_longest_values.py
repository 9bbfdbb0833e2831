"""harness.runner.longest.search_memory_budget by value: a fake measure function plants each series' peak memory
(bytes per token x N), and the longest N it reports per series is worked out by hand from the search's rule
(double from the planned lengths, then bisect on multiples of 64 to within an eighth)."""

from __future__ import annotations

from harness.plan import plan
from harness.row import Row
from harness.runner import sweep_spec
from harness.runner.longest import search_memory_budget, searched_series

BUDGET = 4_608_000  # bytes: dense's 1000 per token fits 4608 tokens exactly, chunked's 3000 fits 1536 exactly
PER_TOKEN = {"dense": 1000, "chunked": 3000}


def _spec():
    cli = dict(device="cpu", variants="dense,chunked", seq_lens="256,512,1024", heads="1", head_dims="8")
    cli.update(modes="forward,train", inputs="gaussian", error_budgets="", memory_budget=f"{BUDGET}B")
    return sweep_spec(cli=cli)


def _searched():
    """Run the search over planted rows: (the rows by cell_id, the cells of each round)."""
    rows: dict[str, Row] = {}
    rounds: list[list] = []

    def row_of(cell) -> Row:
        peak = PER_TOKEN[cell.variant] * cell.seq_len
        if cell.variant == "chunked" and peak > BUDGET:  # a series that fails by running out of memory
            return Row(cell=cell, cell_id=cell.cell_id, status="oom", reason="out of memory")
        return Row(cell=cell, cell_id=cell.cell_id, status="ok", peak_memory_bytes=peak)

    def measure(cells):
        rounds.append(cells)
        rows.update({cell.cell_id: row_of(cell) for cell in cells})

    spec = _spec()
    rows.update({cell.cell_id: row_of(cell) for cell in plan(spec)})  # the planned cells, measured first
    search_memory_budget(spec, BUDGET, rows, measure)
    return rows, rounds


def _train_lengths(rows, variant, status=None):
    return sorted(
        r.seq_len
        for r in rows.values()
        if r.variant == variant and r.mode == "train" and (status is None or r.status == status)
    )


def test_each_series_gets_its_own_longest_n_and_the_n_just_above_it():
    rows, _ = _searched()

    def fits(r):
        return r.status == "ok" and r.peak_memory_bytes <= BUDGET

    for variant, longest, above in [("dense", 4608, 5120), ("chunked", 1536, 1664)]:
        train = [r for r in rows.values() if r.variant == variant and r.mode == "train"]
        assert max(r.seq_len for r in train if fits(r)) == longest  # at exactly the budget: it fits
        assert min(r.seq_len for r in train if r.seq_len > longest) == above and above - longest <= longest // 8
    assert _train_lengths(rows, "dense") == [256, 512, 1024, 2048, 4096, 4608, 5120, 6144, 8192]
    assert _train_lengths(rows, "chunked", "oom") == [1664, 1792, 2048]


def test_only_train_series_are_searched_one_n_per_series_per_round():
    rows, rounds = _searched()
    assert {r.seq_len for r in rows.values() if r.mode == "forward"} == {256, 512, 1024}  # as planned, no more
    assert [len(cells) for cells in rounds] == [2, 2, 2, 2, 1, 1]  # chunked's search ends after four rounds
    assert all(cell.mode == "train" for cells in rounds for cell in cells)
    assert [cell.variant for cell in rounds[0]] == ["dense", "chunked"]
    assert len(searched_series(_spec())) == 2


def test_a_resumed_search_measures_nothing_again():
    rows, _ = _searched()
    again = []
    search_memory_budget(_spec(), BUDGET, dict(rows), again.append)
    assert again == []
