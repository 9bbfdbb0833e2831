"""spec -> cells: the list of measurements a sweep makes, in order. Pure: no device (the registry only for length fields).

Order: for each value of the Cell fields that are axes (harness.schema: inputs, dtype, head dim, causal, mode,
phase, scope, kv heads, padding, recompute, precision, outermost first), lengths ascending, and at each length every
variant. Decode cells are planned for mode forward only (decoding is inference) and are always causal (one per causal
setting collapses into one cell); the memory tricks (recompute, precision) are planned for train cells only
(tricks_reason). So consecutive cells share their q, k, v (generated once),
and a variant meets its lengths in ascending order (an OOM at N marks longer N as OOM untried).
"""

from __future__ import annotations

import itertools
from typing import Any, Iterator, Mapping

from harness.schema import SETTINGS, Cell
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
                    cell = Cell(
                        variant=entry.name,
                        config=config,
                        seq_len=seq_len,
                        kv_len=seq_len,
                        batch=spec.batch,
                        heads=spec.heads,
                        device=spec.device_type,
                        seed=spec.seed,
                        **setting,
                        **matched,
                    )
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
    """The product of the spec's lists of every Cell field that declares one (Setting.axis), in Cell field order (an
    empty list: the field's default); decode is planned for forward and causal only."""
    names = [name for name, setting in SETTINGS.items() if setting.axis]
    lists = [getattr(spec, SETTINGS[name].axis) or (None,) for name in names]
    for values in itertools.product(*lists):
        setting = {name: value for name, value in zip(names, values) if value is not None}
        if setting.get("phase") == "decode":
            if setting.get("mode") != "forward":
                continue
            setting["causal"] = True  # decoding is causal: the causal settings collapse into one cell
        if tricks_reason(setting) is not None:
            continue
        yield setting


def tricks_reason(values: Mapping[str, Any]) -> str | None:
    """Why a cell's recompute and precision are not worth measuring (planning skips it, measuring refuses it), or None.

    The tricks trade memory of the backward pass (recompute) and of training activations and weights (autocast), so a
    forward cell keeps the defaults; checkpointing a block needs a block; autocast runs float32 inputs and weights.
    """
    recompute, precision = values.get("recompute") or "none", values.get("precision") or "fp32"
    if values.get("mode") != "train" and (recompute, precision) != ("none", "fp32"):
        return f"recompute {recompute} and precision {precision} are measured for train cells only (--modes train)"
    if recompute == "layer" and values.get("scope") != "layer":
        return "recompute layer checkpoints a transformer block: it needs --scopes layer (at the attention scope: recompute attention)"
    if precision != "fp32" and values.get("dtype") != "float32":
        return (
            f"precision {precision} autocasts float32 inputs and weights; dtype {values.get('dtype')} is cast already"
        )
    return None
