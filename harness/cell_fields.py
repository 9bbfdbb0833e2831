"""What a Cell field is (CellField): its role, axis, label and history, declared on the field (harness.schema.Cell).

A leaf beside harness.schema: it imports nothing of ours.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field
from typing import Any, Callable, Mapping

ROLES = ("variant", "length", "setting", "inputs", "seed", "budget")


@dataclass(frozen=True)
class CellField:
    """What a Cell field is, declared on the field itself (``dataclasses.field(metadata={"cell_field": ...})``).

    Planning, cell ids, the reader's fill-in of old rows, the report's setting keys, every label and compare's
    matching derive from these, so a new axis is one field of Cell (plus its list in SweepSpec).
    """

    role: str  # ROLES: "setting" fields are what variants compete in (one report table each, with "inputs" apart)
    axis: str | None = None  # the SweepSpec list of this field's values (the planning product runs over these)
    # (value, the cell's values) -> a short label for people
    text: Callable[[Any, Mapping[str, Any]], str] | None = None
    follows: str | None = None  # a field whose value this one takes when unset (kv_heads: heads; kv_len: seq_len)
    legacy: Any = None  # what a row written without this field means (None: the field's own default, see legacy_value)
    added: bool = False  # added after schema_version 1's first ids: left out of the id at its default, so old ids hold
    matched: bool = True  # compare matches two runs' cells on it (not the seed, not the device: those are the point)
    cast: Callable[[Any], Any] | None = None  # the type a reader coerces a stored value to
    # the per-process caches whose keys this field enters (harness.schema.Cell.cache_key): "inputs" (the q, k, v made
    # for a cell), "fit" (a learnable variant's calibration, also RUN_DIR/fitted/), "baseline" (the paired baseline's
    # warm call on those inputs); a field that changes none of them (the mode for the inputs) leaves it out
    caches: tuple[str, ...] = ()


def cell_field(default: Any = MISSING, *, role: str, compare: bool = True, **meta: Any) -> Any:
    """A dataclass field of Cell with its CellField in the metadata."""
    return field(default=default, compare=compare, metadata={"cell_field": CellField(role=role, **meta)})


def eq_text(short: str) -> Callable[[Any, Mapping[str, Any]], str]:
    """A CellField.text of the form 'H=8' ('pad=0.25' for a float)."""
    return lambda v, _: f"{short}={v:g}" if isinstance(v, float) else f"{short}={v}"
