"""The range an error-budget search moves a quality knob over, the FLOPs that bound it, and the search over it.

The knob's declared range at the cell's key length, its top lowered to the largest value doing at most
MAX_FLOPS_FRACTION of dense attention's analytic FLOPs (more is dense attention done the slow way, not worth finding).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

from harness.schema import Cell
from variants import build_config, build_variant, count_flops, dense_flops, get_variant

# The top of a searched range: values doing at most this fraction of dense attention's analytic FLOPs. The
# structured variants run at a lower FLOP rate than a fused dense kernel (a window covering 55% of the pairs
# measured 0.91x dense on CPU), so a config doing more than half the work cannot be what a budget is met with.
MAX_FLOPS_FRACTION = 0.5
TOLERANCE = 1.25  # bisection stops when the passing value is within 25% of the largest value known to miss


def knob_range(cell: Cell) -> tuple[str, int, int | None, str]:
    """(the knob's field, low, high, what bounds high) searched for the cell: the knob's declared range at the cell's M,
    with high lowered to the largest value whose useful FLOPs (variants.count_flops; K/V heads and the config's other
    fields, sinks, counted) are at most MAX_FLOPS_FRACTION of dense attention's analytic FLOPs (None: even low does
    more, nothing is worth searching). A variant whose FLOPs do not change with the knob (the base class counts dense
    FLOPs) keeps its declared range."""
    return knob_range_at(cell.variant, cell.config, _shape(cell), kv_heads=cell.kv_heads)


def knob_range_at(
    name: str, config: dict[str, Any], shape: tuple[int, int, int, int, int, bool], *, kv_heads: int | None = None
) -> tuple[str, int, int | None, str]:
    """knob_range for variant `name` with `config` (its other fields) on shape (B, H, N, M, D, causal) and kv_heads:
    what model-eval's search, which has no sweep cell, asks."""
    knob = get_variant(name).cls.quality_knob
    low, high = knob.range_for(shape[3])

    def flops(value: int) -> int:
        return config_flops_at(name, {**config, knob.field: value}, shape, kv_heads=kv_heads)

    limit = MAX_FLOPS_FRACTION * dense_flops(*shape)
    at_low, at_high = flops(low), flops(high)
    if at_high <= limit or at_low == at_high:
        return knob.field, low, high, "the largest declared"
    if at_low > limit:
        return knob.field, low, None, f"the smallest declared, already does over {MAX_FLOPS_FRACTION:g}x dense's FLOPs"
    cheap, costly = low, high  # flops(cheap) <= limit < flops(costly)
    while costly - cheap > 1:
        middle = (cheap + costly) // 2
        cheap, costly = (middle, costly) if flops(middle) <= limit else (cheap, middle)
    return knob.field, low, cheap, f"the largest doing at most {MAX_FLOPS_FRACTION:g}x dense's FLOPs"


def config_flops(cell: Cell, config: dict[str, Any]) -> int:
    """The useful FLOPs (variants.count_flops) of the cell's variant with `config` at the cell's shape and K/V heads."""
    return config_flops_at(cell.variant, config, _shape(cell), kv_heads=cell.kv_heads)


def config_flops_at(
    name: str, config: dict[str, Any], shape: tuple[int, int, int, int, int, bool], *, kv_heads: int | None
) -> int:
    """The useful FLOPs of variant `name` with `config` on shape (B, H, N, M, D, causal) and kv_heads."""
    cls = get_variant(name).cls
    try:  # the analytic count reads the config only: no parameters allocated (Linformer's E, F are k x M)
        variant = cls.__new__(cls)  # not __init__: nn.Module's set-up and the parameters are not needed
        object.__setattr__(variant, "config", build_config(name, **config))
        return count_flops(variant, *shape, H_kv=kv_heads)
    except AttributeError:  # a plugin's count that reads more of the built variant
        return count_flops(build_variant(name, **config), *shape, H_kv=kv_heads)


def _shape(cell: Cell) -> tuple[int, int, int, int, int, bool]:
    return (cell.batch, cell.heads, cell.seq_len, cell.kv_len, cell.head_dim, cell.causal)


def unreachable_carries_over(cell: Cell, unreachable_at: int) -> str | None:
    """Why the cell need not be searched, its budget being unreachable at the shorter N `unreachable_at` over the same
    knob range (at a fixed knob value a longer sequence is no easier to approximate); None when its range is wider."""
    shorter = dataclasses.replace(
        cell,
        seq_len=unreachable_at,
        kv_len=unreachable_at,
        config=get_variant(cell.variant).cls.config_for_length(dict(cell.config), unreachable_at),
    )
    field_name, low, high, _ = knob_range(cell)
    if (low, high) != knob_range(shorter)[1:3]:
        return None
    return (
        f"unreachable at N={unreachable_at} over the same {field_name} range {low}-{high}, "
        "and a longer N at a fixed value is no easier"
    )


def search_knob(
    evaluate: Callable[[int], float],
    budget: float,
    low: int,
    high: int,
    *,
    tried: dict[int, float] | None = None,
    tolerance: float = TOLERANCE,
) -> int | None:
    """The smallest value in [low, high] found to meet `budget` (evaluate(value) <= budget), or None when high misses.

    `tried` holds errors already known (value -> error) and receives the new ones; a NaN error misses.
    """
    tried = {} if tried is None else tried

    def meets(value: int) -> bool:
        if value not in tried:
            tried[value] = float(evaluate(value))
        return tried[value] <= budget

    if not meets(high):
        return None
    value = low
    while not meets(value):
        value = min(2 * value, high)
    misses = [v for v, e in tried.items() if v < value and not e <= budget]
    miss = max(misses) if misses else None
    while miss is not None and value > miss * tolerance and value - miss > 1:
        middle = min(max(round(math.sqrt(miss * value)), miss + 1), value - 1)
        if meets(middle):
            value = middle
        else:
            miss = middle
    return value
