"""spec -> cells: counts, order, stable ids."""
from __future__ import annotations

from harness.plan import plan
from harness.schema import Cell
from harness.runner import sweep_spec as build_spec


def _spec(**cli):
    return build_spec(cli={"device": "cpu", "variants": "dense,dense:backend=reference", "seq_lens": "512,128,256", "inputs": "gaussian", **cli})


def test_one_cell_per_combination():
    spec = _spec(causal="both", modes="forward,train", head_dims="16,32", inputs="gaussian,local")
    cells = plan(spec)
    assert len(cells) == 2 * 3 * 2 * 2 * 2 * 2
    assert len({c.cell_id for c in cells}) == len(cells)


def test_lengths_ascend_within_a_series_and_variants_share_a_length():
    cells = plan(_spec(modes="forward,train"))
    assert [c.seq_len for c in cells[:6]] == [128, 128, 256, 256, 512, 512]
    series = {}
    for c in cells:
        series.setdefault(c.series_key, []).append(c.seq_len)
    assert all(lengths == sorted(lengths) for lengths in series.values())
    assert len(series) == 4  # 2 configs x 2 modes


def test_cell_id_is_stable_and_depends_on_every_field():
    cell = plan(_spec())[0]
    same = Cell.from_dict(cell.fields())
    assert same.cell_id == cell.cell_id
    for change in ({"seq_len": 999}, {"seed": 1}, {"config": {"backend": "sdpa"}}, {"inputs": "local"}, {"causal": True}):
        assert Cell.from_dict({**cell.fields(), **change}).cell_id != cell.cell_id


def test_duplicates_are_planned_once():
    cells = plan(build_spec(cli={"device": "cpu", "variants": "dense,dense:backend=auto", "seq_lens": "64,64", "inputs": "gaussian"}))
    assert len(cells) == 1


def test_label_shows_only_non_default_config():
    labels = [c.label for c in plan(_spec())[:2]]
    assert labels == ["dense N=128 forward float32 D=64 gaussian", "dense(backend=reference) N=128 forward float32 D=64 gaussian"]
