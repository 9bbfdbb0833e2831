"""The rows frame's column names as attributes (COL.status is "status"), derived from Row's fields and the series label.

A column is named at its use by attribute, never by a string typed there: ``frame[COL.status] == "ok"``. A misspelt
one is an AttributeError at the access that names it and the nearest column, not a KeyError (or a silent miss in
``row.get``) somewhere later.
"""

from __future__ import annotations

from difflib import get_close_matches
from typing import Any, Iterator

from harness.row import ROW_FIELDS

SERIES = "series"  # the reader's label of a row's (variant, config): harness.store.reader.series_labels


class Columns:
    """Column names as read-only attributes, each its own name plus `suffix` (a merged frame's side, "_a");
    iterating gives them in column order."""

    def __init__(self, names: tuple[str, ...], suffix: str = ""):
        self.__dict__.update({name: name + suffix for name in names})
        self.__dict__["_names"] = names
        self.__dict__["_suffix"] = suffix

    def suffixed(self, suffix: str) -> "Columns":
        """The same columns with `suffix` appended to each name: one side of a merge (pandas' suffixes)."""
        return Columns(self._names, self._suffix + suffix)

    def __getattr__(self, name: str) -> Any:  # only reached for a name that is not a column
        close = get_close_matches(name, self._names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise AttributeError(f"the rows frame has no column {name!r}{hint} (its columns are Row's fields and series)")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"column names are declared by Row's fields; {name!r} cannot be set")

    def __iter__(self) -> Iterator[str]:
        return iter(name + self._suffix for name in self._names)


COL = Columns(ROW_FIELDS + (SERIES,))
