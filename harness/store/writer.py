"""Writing a run folder: rows.jsonl appended, flushed and fsynced per cell; env.json; rows.csv/Parquet.

A run folder ``results/<run-id>/`` holds ``rows.jsonl`` (one JSON object per cell, docs/DESIGN.md
"Row schema"), ``env.json``, ``spec.toml`` and, at the end, ``rows.csv`` (and ``rows.parquet``
when pyarrow is installed). A run killed mid-write leaves at most one partial last line; resuming
repairs it (repair_tail) before counting and appending, so every line stays one complete row.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
from pandas.api.types import is_numeric_dtype

from harness.row import ROW_FIELDS, Row, row_record
from harness.store.reader import Run, read_rows, warn_note
from harness.store.run_dir import CSV_FILE, PARQUET_FILE, ROWS_FILE
from harness.safe_files import check_plain, open_plain, write_plain


class RowWriter:
    """Appends rows to rows.jsonl, one line each, flushed and fsynced as each cell finishes."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / ROWS_FILE
        repair_tail(self.path)
        self._file = open_plain(self.path, "a")  # never through a symbolic link, never into a FIFO

    def append(self, row: Row | dict[str, Any]) -> None:
        """Write one row (a Row, or its dict: unknown fields are refused) as one complete line, durably."""
        record = row.to_dict() if isinstance(row, Row) else row_record(row)
        line = json.dumps(record, allow_nan=False, default=str)
        self._file.write(line + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "RowWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def repair_tail(path: Path) -> None:
    """Make the file end on a line break, so the next append starts a fresh line, before anyone counts its rows.

    A last line without its newline that is a complete JSON object (killed between the row and its
    newline) is kept and gets the newline; one that does not parse (killed mid-write) is cut, with a warning.
    """
    check_plain(path)
    if not path.exists() or path.stat().st_size == 0:
        return
    with open_plain(path, "r+", binary=True) as f:
        start, data = _last_line(f)
        if data.endswith(b"\n"):
            return
        try:
            complete = isinstance(json.loads(data), dict)
        except (ValueError, RecursionError):  # JSONDecodeError, undecodable bytes, nested too deep
            complete = False
        if complete:
            f.write(b"\n")
        else:
            f.truncate(start)
        f.flush()
        os.fsync(f.fileno())
    if not complete:
        warn_note(
            None,
            f"{path}: cut a partial last line ({len(data)} bytes, not valid JSON); probably a run killed mid-write",
        )


def _last_line(f: Any, block: int = 1 << 16) -> tuple[int, bytes]:
    """(offset, bytes) of the file's last line, newline included if it has one: read backwards, not the whole file."""
    end = f.seek(0, os.SEEK_END)
    f.seek(end - 1)
    if f.read(1) == b"\n":
        return end - 1, b"\n"
    position = end
    while position > 0:
        position = max(0, position - block)
        f.seek(position)
        chunk = f.read(end - position)
        cut = chunk.rfind(b"\n")
        if cut >= 0:
            return position + cut + 1, chunk[cut + 1 :]
    f.seek(0)
    return 0, f.read(end)


def write_json(path: Path, data: dict[str, Any]) -> None:
    write_plain(path, json.dumps(data, indent=2, default=str) + "\n")


# A spreadsheet runs a cell that starts with one of these as a formula (OWASP "CSV injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def inert_csv_frame(frame):
    """The frame with every text cell that a spreadsheet would run as a formula prefixed with "'" (numbers such as
    -1.5 stay numbers: only strings are touched, and a string that reads as a number is left alone)."""
    return frame.apply(lambda column: column if is_numeric_dtype(column) else column.map(_inert))


def _inert(value: Any) -> Any:
    if not isinstance(value, str) or not value.startswith(FORMULA_STARTS):
        return value
    try:
        float(value)
        return value  # '-1.5' in a text column is a number, not a formula
    except ValueError:
        return "'" + value


def rows_dataframe(rows: list[dict[str, Any]]):
    """Rows as a pandas DataFrame with every schema column; dict fields kept as dicts."""
    return pd.DataFrame(rows, columns=list(ROW_FIELDS))


def write_tables(run: "str | Path | Run") -> list[Path]:
    """rows.csv (dict fields as JSON text) and rows.parquet when pyarrow is installed, from a run folder (read here) or
    a Run already loaded (its rows as written); returns the paths."""
    if isinstance(run, Run):
        run_dir, rows = run.path, run.records
    else:
        run_dir = Path(run)
        rows = read_rows(run_dir)
    frame = rows_dataframe(rows)
    for column in ("config", "calibration"):
        frame[column] = [None if v is None else json.dumps(v, sort_keys=True) for v in frame[column]]
    written = [run_dir / CSV_FILE]
    text = io.StringIO()
    inert_csv_frame(frame).to_csv(text, index=False)  # full float precision: pandas writes repr()
    write_plain(written[0], text.getvalue())
    if importlib.util.find_spec("pyarrow") is not None:
        data = io.BytesIO()
        frame.to_parquet(data, index=False)
        write_plain(run_dir / PARQUET_FILE, data.getvalue())
        written.append(run_dir / PARQUET_FILE)
    return written
