"""spec -> cells: the list of measurements a sweep makes, in order. Pure: no device (the registry only for length fields).

Order: for each input distribution, dtype, head dim, causal setting, mode, phase, scope, kv heads
and padding, lengths ascending, and at each length every variant. Decode cells are planned for
mode forward only (decoding is inference) and are always causal (one per causal setting collapses
into one cell). So consecutive cells share their q, k, v (generated once),
and a variant meets its lengths in ascending order (an OOM at N marks longer N as OOM untried).
"""
from __future__ import annotations

import itertools
from typing import Any, Iterator

from harness.schema import Cell
from harness.spec.model import SweepSpec

def plan(spec: SweepSpec) -> list[Cell]:
    """Every cell of the spec, in measuring order, without duplicates.

    A variant's length fields (AttentionVariant.length_fields, e.g. Linformer's max_seq_len) follow
    each cell's N unless the user set them, so no default is sized for another length. With error
    budgets, a variant with a quality knob gets one cell per budget (matched_budget; see _budgets).
    """
    from variants import get_variant

    cells: dict[str, Cell] = {}
    classes = {entry.name: get_variant(entry.name).cls for entry in spec.variants}
    for setting in _settings(spec):
        for seq_len in sorted(spec.seq_lens):
            for entry in spec.variants:
                config = classes[entry.name].config_for_length(dict(entry.config), seq_len, fixed=entry.overrides)
                for budget in _budgets(spec, classes[entry.name], entry):
                    matched = dict(matched_budget=budget, error_metric=spec.error_metric) if budget is not None else {}
                    cell = Cell(variant=entry.name, config=config, seq_len=seq_len, kv_len=seq_len,
                                batch=spec.batch, heads=spec.heads, device=spec.device_type, seed=spec.seed, **setting, **matched)
                    cells.setdefault(cell.cell_id, cell)
    return list(cells.values())


def _budgets(spec: SweepSpec, cls: Any, entry: Any) -> tuple[float | None, ...]:
    """The budgets a variant is matched to: each of spec.error_budgets when it declares a quality knob the user
    left free (its config as given is then not measured: the search chooses it); else (None,), the config as given."""
    knob = cls.quality_knob
    if not spec.error_budgets or knob is None or knob.field in entry.overrides:
        return (None,)
    return spec.error_budgets


def _settings(spec: SweepSpec) -> Iterator[dict[str, Any]]:
    """The cell fields that make a series' setting, in planning order (decode: forward and causal only)."""
    for inputs, dtype, head_dim, causal, mode, phase, scope, kv_heads, padding in itertools.product(
        spec.inputs, spec.dtypes, spec.head_dims, spec.causal, spec.modes, spec.phases, spec.scope,
        spec.kv_heads or (spec.heads,), spec.padding,
    ):
        if phase == "decode" and mode != "forward":
            continue
        yield dict(inputs=inputs, dtype=dtype, head_dim=head_dim, causal=causal or phase == "decode", mode=mode,
                   phase=phase, scope=scope, kv_heads=kv_heads, padding=padding)
