"""What a row read from disk must hold: each field's type as the schema declares it (harness.schema.Cell and
harness.row.Row annotations, never a second list), sizes within what any machine holds, finite numbers, a known
status, bounded nesting. A row that fails is skipped by the reader with one line naming the field and the value.
"""

from __future__ import annotations

import math
import types
import typing
from functools import lru_cache
from typing import Any, Mapping

from harness.row import NUMERIC_FIELDS, ROW_FIELDS, Row
from harness.schema import CELL_FIELDS, DECLARED, STATUSES, Cell

MAX_SIZE = 2**40  # a cell's size (N, M, B, H, H_kv, D): beyond what any machine holds
MAX_INT = 2**63  # any other integer (seed, repeats, flops, bytes): beyond int64 a DataFrame cannot hold it
MAX_DEPTH = 32  # nesting of a row's tables and lists (config, calibration, tuning hold 3 or 4)
MAX_LINE_CHARS = 4_000_000  # one row's line; longer is not a row this writer made
# what a declared type is called in a message
_WORDS = {int: "an integer", float: "a finite number", bool: "true or false", str: "text", dict: "a table"}


@lru_cache(maxsize=1)
def declared_types() -> dict[str, frozenset[type]]:
    """Row field -> the types its annotation allows (None is always allowed: a field an older writer left out)."""
    hints = {**typing.get_type_hints(Cell), **typing.get_type_hints(Row)}
    out = {}
    for name in ROW_FIELDS:
        args = typing.get_args(hints[name]) if typing.get_origin(hints[name]) in (typing.Union, _union()) else ()
        kinds = [a for a in (args or (hints[name],)) if a is not type(None)]
        out[name] = frozenset(typing.get_origin(k) or k for k in kinds)
    return out


@lru_cache(maxsize=1)
def size_fields() -> frozenset[str]:
    """The cell's integer fields that are sizes (every one but the seed): positive and at most MAX_SIZE."""
    types = declared_types()
    return frozenset(n for n in CELL_FIELDS if int in types[n] and DECLARED[n].role != "seed")


def row_problem(row: Mapping[str, Any]) -> str | None:
    """Why `row` (a JSON object from rows.jsonl) cannot be read, in one phrase ("field kv_heads is 'abc', expected an
    integer"), or None. Keys outside the schema are not checked (a newer writer's); None is a missing value."""
    if too_deep(row, MAX_DEPTH):
        return f"nested more than {MAX_DEPTH} levels deep"
    types = declared_types()
    for name, kinds in types.items():
        value = row.get(name)
        if value is None:
            continue
        expected = _expected(name, value, kinds)
        if expected is not None:
            return f"field {name} is {shown(value)}, expected {expected}"

    status = row.get("status")
    if status is not None and status not in STATUSES:
        return f"field status is {shown(status)}, expected one of {', '.join(STATUSES)}"
    return None


def _expected(name: str, value: Any, kinds: frozenset[type]) -> str | None:
    """What `value` should have been, or None when it is one of `kinds` (within bounds)."""
    if isinstance(value, bool):  # a bool is an int to Python; only a bool field takes it
        return None if bool in kinds else _words(kinds)
    if isinstance(value, float) and not math.isfinite(value):
        return _words(kinds)
    if int in kinds and isinstance(value, (int, float)):
        if isinstance(value, float) and not value.is_integer() and name not in _measured():
            return _words(kinds)  # a measured count (flops, bytes) is held as a float by readers: any finite number
        if name in size_fields() and not 1 <= value <= MAX_SIZE:
            return f"a positive integer of at most 2**{MAX_SIZE.bit_length() - 1}"
        return None if abs(value) < MAX_INT else f"an integer below 2**{MAX_INT.bit_length() - 1}"
    if float in kinds and isinstance(value, (int, float)):
        return None if abs(value) < MAX_INT else f"a number below 2**{MAX_INT.bit_length() - 1}"
    return None if any(isinstance(value, k) for k in kinds) else _words(kinds)


@lru_cache(maxsize=1)
def _measured() -> frozenset[str]:
    return frozenset(NUMERIC_FIELDS)


def _words(kinds: frozenset[type]) -> str:
    return " or ".join(sorted(_WORDS.get(k, k.__name__) for k in kinds))


def shown(value: Any) -> str:
    """A short text of a read value for a message: a scalar as written (cut at 40 characters), a container by its type."""
    if isinstance(value, (dict, list)):
        return f"a {'table' if isinstance(value, dict) else 'list'}"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def too_deep(value: Any, limit: int) -> bool:
    """True when `value` nests tables or lists more than `limit` levels deep (iterative: no recursion to exhaust)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth >= limit:
                return True
            stack.extend((x, depth + 1) for x in (item.values() if isinstance(item, dict) else item))
    return False


def _union() -> Any:
    return types.UnionType
