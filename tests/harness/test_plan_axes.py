"""The GQA, decode, padding and scope axes: spec values, the cells planned, and ids that older runs still match."""

from __future__ import annotations

from harness.plan import plan
from harness.runner import sweep_spec as build_spec
from harness.schema import Cell
from harness.store import read_rows

from tests.helpers import REPO


def _spec(**cli):
    return build_spec(
        cli={"device": "cpu", "variants": "dense", "seq_lens": "64,128", "inputs": "gaussian", "heads": "4", **cli}
    )


def test_defaults_plan_one_prefill_attention_cell_per_length_with_kv_heads_equal_to_heads():
    cells = plan(_spec())
    assert len(cells) == 2
    assert {(c.kv_heads, c.phase, c.scope, c.padding) for c in cells} == {(4, "prefill", "attention", 0.0)}


def test_every_axis_multiplies_the_cells():
    cells = plan(_spec(kv_heads="4,2,1", padding="0,0.25", batch="2", scope="attention,layer"))
    assert len(cells) == 2 * 3 * 2 * 2
    assert len({c.cell_id for c in cells}) == len(cells)
    assert sorted({c.kv_heads for c in cells}) == [1, 2, 4]


def test_decode_cells_are_causal_and_forward_only():
    cells = plan(_spec(phases="prefill,decode", causal="both", modes="forward,train"))
    decode = [c for c in cells if c.phase == "decode"]
    prefill = [c for c in cells if c.phase == "prefill"]
    assert len(prefill) == 2 * 2 * 2  # lengths x causal x modes
    assert len(decode) == 2 and all(c.causal and c.mode == "forward" for c in decode)  # both causal values collapse


def test_decode_steps_reach_the_measure_settings():
    from harness.measure import MeasureSettings

    assert MeasureSettings.from_spec(_spec(decode_steps="5")).decode_steps == 5
    assert _spec().decode_steps == 32


def test_new_fields_at_their_defaults_keep_the_old_cell_id():
    base = dict(
        variant="dense",
        config={},
        seq_len=64,
        kv_len=64,
        batch=1,
        heads=4,
        head_dim=16,
        dtype="float32",
        device="cpu",
        causal=False,
        mode="forward",
        inputs="gaussian",
        seed=0,
    )
    old = Cell(**base)
    assert Cell(**base, kv_heads=4, phase="prefill", scope="attention", padding=0.0).cell_id == old.cell_id
    for change in ({"kv_heads": 2}, {"phase": "decode"}, {"scope": "layer"}, {"padding": 0.25}):
        assert Cell(**base, **change).cell_id != old.cell_id


def test_the_committed_reference_run_still_resumes_as_done():
    import json

    from harness.spec.toml_io import load_toml

    run = REPO / "results" / "cpu-reference"
    rows = read_rows(run)
    assert rows and all(Cell.from_dict(r).cell_id == r["cell_id"] for r in rows)  # rows without the new fields
    cells = plan(build_spec(toml=load_toml(run / "spec.toml"), cli={"device": "cpu"}))
    recorded = {(r["variant"], json.dumps(r["config"], sort_keys=True)) for r in rows}
    # Cells whose variant config is unchanged since the run (a variant that gained a config field has new ids).
    same_config = [c for c in cells if (c.variant, json.dumps(c.config, sort_keys=True)) in recorded]
    assert (
        len(same_config) >= 24
    )  # at least dense and chunked: 6 lengths x 2 inputs (matched cells record the knob found)
    assert {c.cell_id for c in same_config} <= {r["cell_id"] for r in rows}


def test_gpu_default_has_gqa_and_decode_and_cpu_default_has_neither():
    from harness.spec.build import build_spec as build_any_device  # the spec alone: no executor asks for CUDA here

    gpu = plan(build_any_device(cli={"device": "cuda", "variants": "dense"}))
    assert {c.kv_heads for c in gpu} == {16, 4} and {c.phase for c in gpu} == {"prefill", "decode"}
    assert all(c.mode == "forward" and c.causal for c in gpu if c.phase == "decode")
    assert build_any_device(cli={"device": "cuda"}).memory_budget == "device"  # the longest N in the GPU's memory
    assert build_spec(cli={"device": "cpu"}).memory_budget is None  # CPU: only when asked (docs/sweep.md: its time)
    cpu = plan(build_spec(cli={"device": "cpu", "variants": "dense"}))
    assert {(c.kv_heads, c.phase, c.scope, c.padding) for c in cpu} == {(8, "prefill", "attention", 0.0)}
    assert len(cpu) == 6 * 2  # lengths x inputs, as before the new axes


def test_the_gpu_defaults_kv_heads_follow_a_users_heads_but_a_users_kv_heads_must_divide():
    import pytest

    from harness.errors import UsageError
    from harness.spec.build import build_spec as build_any_device

    assert build_any_device(cli={"device": "cuda", "variants": "dense", "heads": "1"}).kv_heads == (1,)
    assert build_any_device(cli={"device": "cuda", "variants": "dense", "heads": "8"}).kv_heads == (8, 4)
    with pytest.raises(UsageError, match="--kv-heads: 4 key/value heads do not divide --heads = 2"):
        build_any_device(cli={"device": "cuda", "variants": "dense", "heads": "2", "kv_heads": "4"})
