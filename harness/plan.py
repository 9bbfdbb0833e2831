"""spec -> cells: the list of measurements a sweep makes, in order. Pure: no device (the registry only for length fields).

Order: for each input distribution, dtype, head dim, causal setting and mode, lengths ascending,
and at each length every variant. So consecutive cells share their q, k, v (generated once),
and a variant meets its lengths in ascending order (an OOM at N marks longer N as OOM untried).
"""
from __future__ import annotations

from harness.schema import Cell
from harness.spec.model import SweepSpec

def plan(spec: SweepSpec) -> list[Cell]:
    """Every cell of the spec, in measuring order, without duplicates.

    A variant's length fields (AttentionVariant.length_fields, e.g. Linformer's max_seq_len) follow
    each cell's N unless the user set them, so no default is sized for another length.
    """
    from variants import get_variant

    cells: dict[str, Cell] = {}
    device = spec.device_type
    classes = {entry.name: get_variant(entry.name).cls for entry in spec.variants}
    for inputs in spec.inputs:
        for dtype in spec.dtypes:
            for head_dim in spec.head_dims:
                for causal in spec.causal:
                    for mode in spec.modes:
                        for seq_len in sorted(spec.seq_lens):
                            for entry in spec.variants:
                                config = classes[entry.name].config_for_length(dict(entry.config), seq_len, fixed=entry.overrides)
                                cell = Cell(
                                    variant=entry.name, config=config, seq_len=seq_len, kv_len=seq_len,
                                    batch=spec.batch, heads=spec.heads, head_dim=head_dim, dtype=dtype, device=device,
                                    causal=causal, mode=mode, inputs=inputs, seed=spec.seed,
                                )
                                cells.setdefault(cell.cell_id, cell)
    return list(cells.values())
