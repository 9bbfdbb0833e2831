"""The error-budget search by value: with errors made up per knob value (a fake scorer), the value chosen is the cheapest
within the budget; what reaches the scorer (the batches it builds) carries the cell's K/V heads, its padding and the
scoring seeds, never the evaluation seed; a value's score is the worst over those batches; a budget no value meets is
unreachable with the closest error; the search's cache key tells apart what changes the errors."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from harness.measure import accuracy, tuning
from harness.inputs import make_inputs
from harness.inputs.padding import padding_mask
from harness.measure import MeasureSettings
from harness.measure.context import MeasureContext
from harness.schema import Cell
from variants import build_config

SETTINGS = MeasureSettings(error_rows=8, calibration_batches=3)
CPU = torch.device("cpu")
OFFSET = 1_000_003  # harness.measure.settings.CALIBRATION_SEED_OFFSET, written out


def cell(budget=0.25, **fields) -> Cell:
    base = dict(
        variant="sliding_window",
        config=build_config("sliding_window").to_dict(),
        seq_len=256,
        kv_len=256,
        batch=4,
        heads=4,
        kv_heads=1,
        head_dim=16,
        dtype="float32",
        device="cpu",
        causal=True,
        mode="forward",
        inputs="gaussian",
        seed=5,
        padding=0.5,
        matched_budget=budget,
    )
    base.update(fields)
    return Cell(**base)


def fake_scorer(monkeypatch, error):
    """score_value replaced by error(sinks, window); every call's cell, value and batches recorded."""
    calls = []

    def score(c, field, value, batches, *args, **kwargs):
        assert field == "window"
        calls.append(SimpleNamespace(cell=c, value=value, batches=batches))
        return error(c.config["sinks"], value)

    monkeypatch.setattr(tuning, "score_value", score)
    return calls


def search(c: Cell) -> tuning.Tuned:
    return tuning.tune(c, SETTINGS, MeasureContext(), CPU, ("gaussian", {}))


def test_the_window_chosen_is_the_smallest_whose_made_up_error_meets_the_budget(monkeypatch):
    fake_scorer(monkeypatch, lambda sinks, w: 8 / w)  # sinks change nothing: the tie goes to no sinks (fewer FLOPs)
    tuned = search(cell(budget=0.25))
    assert tuned.reason is None and tuned.cell is not None
    low, high = tuned.fields["tuning"]["low"], tuned.fields["tuning"]["high"]
    cheapest = min(w for w in range(low, high + 1) if 8 / w <= 0.25)  # brute force over the range
    assert cheapest == 32 and tuned.cell.config["window"] == 32 and tuned.cell.config["sinks"] == 0
    assert tuned.fields["config"]["window"] == 32
    tried = {int(w): e for w, e in tuned.fields["tuning"]["tried"].items()}
    assert all(e > 0.25 for w, e in tried.items() if w < 32)


def test_with_sinks_halving_the_error_the_cheaper_config_with_sinks_wins(monkeypatch):
    fake_scorer(monkeypatch, lambda sinks, w: (4 if sinks else 8) / w)  # sinks=4 meets 0.25 at window 16, 0 at 32
    tuned = search(cell(budget=0.25))
    assert (tuned.cell.config["sinks"], tuned.cell.config["window"]) == (4, 16)
    assert {o["sinks"]: o["value"] for o in tuned.fields["tuning"]["options"]} == {0: 32, 4: 16}


def test_the_scorer_gets_the_cells_kv_heads_and_padding_on_the_scoring_seeds(monkeypatch):
    calls = fake_scorer(monkeypatch, lambda sinks, w: 8 / w)
    c = cell()
    search(c)
    seeds = [5 + OFFSET + 3 + i for i in range(4)]  # after the 3 calibration batches' seeds 5 + OFFSET + 0..2
    assert accuracy.scoring_seeds(5, 3) == seeds and 5 not in seeds
    made = {id(call.batches): call.batches for call in calls}  # once per combination of sinks searched
    assert len(made) == 2 and all([b[4] for b in batches] == seeds for batches in made.values())
    eval_mask = padding_mask(4, 256, 0.5, seed=5)
    assert any(not torch.equal(padding_mask(4, 256, 0.5, seed=s), eval_mask) for s in seeds)  # the premise
    for q, k, v, kv_mask, seed in calls[0].batches:
        assert q.shape == (4, 4, 256, 16) and k.shape == v.shape == (4, 1, 256, 16)  # H_kv = 1 reaches the batches
        want = make_inputs("gaussian", {}, B=4, H=4, N=256, M=256, D=16, dtype=torch.float32, seed=seed, H_kv=1)
        assert all(torch.equal(a, b) for a, b in zip((q, k, v), want))
        assert torch.equal(kv_mask, padding_mask(4, 256, 0.5, seed=seed))  # padded like the cell, on this seed
    assert all(call.cell.kv_heads == 1 and call.cell.padding == 0.5 for call in calls)


def test_an_unpadded_cell_is_scored_without_a_mask(monkeypatch):
    calls = fake_scorer(monkeypatch, lambda sinks, w: 8 / w)
    search(cell(padding=0.0))
    assert all(b[3] is None for b in calls[0].batches)


def test_a_values_score_is_the_worst_over_the_scoring_batches(monkeypatch):
    made_up = {11: 0.02, 12: 0.07, 13: 0.03}  # seed -> error

    def by_seed(attn, q, k, v, *, seed, kv_mask, **kw):
        assert kv_mask is given[seed]  # each batch's own mask
        return SimpleNamespace(nonfinite=None, fields={"rel_l2_error": made_up[seed]})

    monkeypatch.setattr(accuracy, "weights_accuracy", by_seed)
    c = cell()
    batches = accuracy.scoring_batches(c, list(made_up), ("gaussian", {}), CPU)
    given = {b[4]: b[3] for b in batches}
    assert accuracy.score_value(c, "window", 16, batches, SETTINGS, MeasureContext(), CPU, ("gaussian", {})) == 0.07


def test_no_value_within_budget_is_unreachable_with_the_closest_error_at_the_top(monkeypatch):
    calls = fake_scorer(monkeypatch, lambda sinks, w: 0.4 if sinks else 0.6)  # flat: the top misses in both
    tuned = search(cell(budget=0.25))
    assert tuned.cell is None and [call.value for call in calls] == [74, 70]  # one evaluation per option: its top
    assert tuned.fields["config"]["sinks"] == 4 and tuned.fields["config"]["window"] == 70
    assert tuned.reason.startswith("relative L2 error 0.4 at window 70, ")
    assert tuned.reason.endswith("is above the budget 0.25")


def test_the_search_key_parts_with_what_changes_the_errors_only():
    c = cell()
    key = tuning.search_key(c)
    same = [dict(mode="train"), dict(scope="layer"), dict(matched_budget=0.5), dict(config={**c.config, "window": 9})]
    for change in same:
        assert tuning.search_key(dataclasses.replace(c, **change)) == key, change
    differ = [
        dict(kv_heads=2),
        dict(padding=0.25),
        dict(seed=6),
        dict(causal=False),
        dict(inputs="local"),
        dict(dtype="bfloat16"),
        dict(config={**c.config, "sinks": 4}),
    ]
    for change in differ:
        assert tuning.search_key(dataclasses.replace(c, **change)) != key, change


@pytest.mark.parametrize("padding", [0.0, 0.5])
def test_a_second_budget_on_the_same_setting_reuses_the_errors_but_another_padding_does_not(monkeypatch, padding):
    calls = fake_scorer(monkeypatch, lambda sinks, w: 8 / w)
    context = MeasureContext()
    tuning.tune(cell(budget=0.25), SETTINGS, context, CPU, ("gaussian", {}))
    first = len(calls)
    tuning.tune(cell(budget=0.5, padding=padding), SETTINGS, context, CPU, ("gaussian", {}))
    fresh = {call.value for call in calls[first:]}
    if padding == 0.5:  # the same setting: 0.5 is met at 16, already scored
        assert fresh == set()
    else:
        assert {74, 70, 16} <= fresh


def test_the_run_records_the_seeds_its_searches_and_fits_use(monkeypatch):
    from harness.measure.calibration import calibration_seeds
    from harness.runner import sweep_into
    from harness.spec import build_spec

    monkeypatch.setattr(sweep_into, "collect_env", lambda device: {})  # no probing of the machine
    monkeypatch.setattr(sweep_into, "run_limits", lambda *a, **kw: {})
    spec = build_spec(cli={"device": "cpu", "variants": "sliding_window", "seed": "5", "calibration_batches": "3"})
    settings = MeasureSettings.from_spec(spec)
    seeds = sweep_into._run_env(spec, settings, None, False)["seeds"]
    c = cell(seed=5)
    assert seeds == {
        "evaluation": 5,
        "calibration": calibration_seeds(c, settings),
        "tuning": accuracy.scoring_seeds(c.seed, settings.calibration_batches),
    }
    assert seeds["calibration"] == [5 + OFFSET + i for i in range(3)]
    assert seeds["tuning"] == [5 + OFFSET + 3 + i for i in range(4)]
