"""spec -> cells: the list of measurements a sweep makes, in order. Pure: no device, no registry.

Order: for each input distribution, dtype, head dim, causal setting and mode, lengths ascending,
and at each length every variant. So consecutive cells share their q, k, v (generated once),
and a variant meets its lengths in ascending order (an OOM at N marks longer N as OOM untried).
"""
from __future__ import annotations

from harness.schema import Cell
from harness.spec.model import SweepSpec

def plan(spec: SweepSpec) -> list[Cell]:
    """Every cell of the spec, in measuring order, without duplicates."""
    cells: dict[str, Cell] = {}
    device = spec.device_type
    for inputs in spec.inputs:
        for dtype in spec.dtypes:
            for head_dim in spec.head_dims:
                for causal in spec.causal:
                    for mode in spec.modes:
                        for seq_len in sorted(spec.seq_lens):
                            for entry in spec.variants:
                                cell = Cell(
                                    variant=entry.name, config=dict(entry.config), seq_len=seq_len, kv_len=seq_len,
                                    batch=spec.batch, heads=spec.heads, head_dim=head_dim, dtype=dtype, device=device,
                                    causal=causal, mode=mode, inputs=inputs, seed=spec.seed,
                                )
                                cells.setdefault(cell.cell_id, cell)
    return list(cells.values())
