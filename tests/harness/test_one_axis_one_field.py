"""A new axis is one field of Cell (plus its list in SweepSpec): planning, ids, old rows, labels, compare's key and
the report's setting keys and the row's columns all follow from that field. Proven on a copy of harness/schema.py (and
of harness/row.py over it) with a throwaway axis."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from types import SimpleNamespace

import pytest

import harness.schema as real
from tests.helpers import REPO

THROWAWAY = """    # a throwaway axis, added by the test: one line
    flavour: str = _field(
        "plain", role="setting", axis="flavours", text=lambda v, _: f"flavour={v}", added=True, caches=("inputs",)
    )
"""


@pytest.fixture
def schema(monkeypatch):
    """harness.schema with one more Cell field, loaded as its own module, and the modules that derive from it using it."""
    source = (REPO / "harness" / "schema.py").read_text()
    anchor = "    seed: int = _field("
    assert anchor in source
    spec = importlib.util.spec_from_loader("schema_with_flavour", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules["schema_with_flavour"] = module  # dataclasses resolve their module's annotations through sys.modules
    exec(compile(source.replace(anchor, THROWAWAY + anchor, 1), "schema_with_flavour", "exec"), module.__dict__)
    rows = importlib.util.module_from_spec(importlib.util.spec_from_loader("row_with_flavour", loader=None))
    sys.modules["row_with_flavour"] = rows  # harness/row.py over the copy: its columns follow the cell's
    row_source = (
        (REPO / "harness" / "row.py")
        .read_text()
        .replace("from harness.schema import", "from schema_with_flavour import")
    )
    exec(compile(row_source, "row_with_flavour", "exec"), rows.__dict__)
    module.ROW_FIELDS = rows.ROW_FIELDS
    import harness.plan
    import harness.store.reader as reader

    monkeypatch.setattr(harness.plan, "DECLARED", module.DECLARED)
    monkeypatch.setattr(harness.plan, "Cell", module.Cell)
    for name in ("CELL_FIELDS", "ROW_FIELDS", "DECLARED", "legacy_value"):
        monkeypatch.setattr(reader, name, getattr(module, name))
    yield module
    del sys.modules["schema_with_flavour"], sys.modules["row_with_flavour"]


def _values(**fields):
    return dict(
        variant="dense",
        config={"backend": "auto"},
        seq_len=64,
        kv_len=64,
        batch=1,
        heads=8,
        head_dim=16,
        dtype="float32",
        device="cpu",
        causal=False,
        mode="forward",
        inputs="gaussian",
        seed=0,
        **fields,
    )


def test_a_throwaway_axis_is_planned_identified_read_labelled_and_matched(schema):
    from harness.plan import _settings
    from harness.store import rows_frame

    # The report's setting keys and the row's columns include it.
    assert "flavour" in schema.fields_of("setting") and "flavour" in schema.ROW_FIELDS
    # Ids: at its default the id is the one the real schema gives (old runs resume); set, it is another cell.
    assert schema.Cell(**_values()).cell_id == real.Cell(**_values()).cell_id
    assert schema.Cell(**_values(flavour="spicy")).cell_id != real.Cell(**_values()).cell_id
    # Planning: the product runs over the spec's list of it.
    spec = SimpleNamespace(**{**vars(_spec_lists()), "flavours": ("plain", "spicy")})
    assert sorted({s["flavour"] for s in _settings(spec)}) == ["plain", "spicy"]
    # Labels name it where it is not the default; compare's key tells the two apart.
    assert "flavour=spicy" in schema.Cell(**_values(flavour="spicy")).label
    assert "flavour" not in schema.Cell(**_values()).label
    assert schema.match_key(_values(flavour="spicy")) != schema.match_key(_values())
    # A row written before the axis existed reads back at its default.
    frame = rows_frame([{**_values(), "cell_id": "old", "status": "ok"}])
    assert list(frame["flavour"]) == ["plain"]
    # The caches it declares key on it (new inputs for a spicy cell), the others do not (one fit, one baseline).
    plain, spicy = schema.Cell(**_values()), schema.Cell(**_values(flavour="spicy"))
    assert plain.cache_key("inputs") != spicy.cache_key("inputs") and ("flavour", "spicy") in spicy.cache_key("inputs")
    assert plain.cache_key("fit") == spicy.cache_key("fit") and plain.cache_key("baseline") == spicy.cache_key(
        "baseline"
    )


def _spec_lists():
    return SimpleNamespace(
        inputs=("gaussian",),
        dtypes=("float32",),
        head_dims=(16,),
        causals=(False,),
        modes=("forward",),
        phases=("prefill",),
        scopes=("attention",),
        kv_heads=(),
        paddings=(0.0,),
        recomputes=("none",),
        precisions=("fp32",),
        kv_dtypes=("none",),
        scores_dtypes=("none",),
        device_type="cpu",  # not an axis: the device the rule (harness.cell_rules) judges a combination on
    )


def test_the_caches_key_on_what_changes_their_contents():
    """Two cells that differ in a field share an entry of a cache exactly when the field does not key it: a cell in
    train mode reuses the forward cell's inputs and fit, not its baseline timing; another dtype reuses the fit (made
    in float32) but not the inputs; another variant reuses the inputs and the baseline but not the fit."""
    base = real.Cell(**_values())

    def shared(**changed) -> set[str]:
        other = dataclasses.replace(base, **changed)
        return {c for c in ("inputs", "fit", "baseline") if base.cache_key(c) == other.cache_key(c)}

    assert shared(mode="train") == {"inputs", "fit"}
    assert shared(dtype="bfloat16") == {"fit"}
    assert shared(variant="chunked", config={"backend": "auto"}) == {"inputs", "baseline"}
    assert shared(padding=0.25) == {"inputs", "fit"} and shared(causal=True) == {"inputs"}
    assert shared(seed=1) == set() and shared(layer_depth=2) == {"inputs", "fit", "baseline"}
    assert dict(base.cache_key("inputs", seq_len=80))["seq_len"] == 80  # a decode cell's longer inputs


def test_every_field_of_the_real_cell_declares_its_role():
    for f in dataclasses.fields(real.Cell):
        declared = f.metadata["cell_field"]
        assert declared.role in real.ROLES, f.name
        # an axis is a setting, the inputs, or a series field (kv_dtype: 'dense[kv=int8]' is a series of its own)
        assert declared.axis is None or declared.role in ("setting", "inputs", "variant"), f.name
