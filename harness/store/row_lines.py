"""rows.jsonl line by line, tolerantly: a torn, overlong, too deep or mistyped line is skipped with a warning.

The lines under harness.store.reader (the one tolerant reader): never a line held whole past MAX_LINE_CHARS, never a
FIFO or directory opened, each skipped line described as a UserWarning and in the reader's notes.
"""

from __future__ import annotations

import json
import stat
import warnings
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.store.row_types import MAX_LINE_CHARS, row_problem


def read_row_lines(path: str | Path, notes: list[str] | None = None) -> list[dict[str, Any]]:
    """The JSON objects of a rows.jsonl file, tolerantly: an unreadable line or row is skipped with a warning.

    A line that is not valid JSON (typically the last one of a run killed mid-write), nested too deep, longer than
    MAX_LINE_CHARS or not a JSON object is skipped; so is a row with a field that is not of its declared type
    (harness.store.row_types): each is described as a ``UserWarning`` and in `notes` (if given). Blank lines are
    ignored. UsageError when `path` is not a regular file (a directory, a FIFO that would block).
    """
    path = Path(path)
    regular_file(path)
    rows: list[dict[str, Any]] = []
    lines = _bounded_lines(path)
    for number, line in enumerate(lines, start=1):
        if line is None:
            warn_note(notes, f"{path}: skipped line {number}, longer than {MAX_LINE_CHARS} characters; not a row")
            continue
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            where = "last line" if number == len(lines) else f"line {number}"
            warn_note(notes, f"{path}: skipped {where}, not valid JSON ({exc.msg}); probably a run killed mid-write")
            continue
        except RecursionError:
            warn_note(notes, f"{path}: skipped line {number}, nested deeper than any row; not a row")
            continue
        if not isinstance(row, dict):
            warn_note(
                notes, f"{path}: skipped line {number}, a JSON {type(row).__name__} where a row object was expected"
            )
            continue
        problem = row_problem(row)
        if problem is not None:
            warn_note(notes, f"{path}: row {number}: {problem}; row skipped")
            continue
        rows.append(row)
    return rows


def regular_file(path: Path) -> None:
    """UsageError (one line) when `path` exists but is not a regular file: reading a FIFO blocks, a directory fails."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        kind = "a symbolic link" if stat.S_ISLNK(mode) else kind
        raise UsageError(f"{path} is {kind}; a run folder's {path.name} must be a regular file (move it away)")


def _bounded_lines(path: Path) -> list[str | None]:
    """The file's lines without their line breaks; None for a line longer than MAX_LINE_CHARS (never held whole)."""
    out: list[str | None] = []
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
        while True:
            line = f.readline(MAX_LINE_CHARS + 1)
            if not line:
                return out
            if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
                while line and not line.endswith("\n"):  # the rest of the long line, in bounded pieces
                    line = f.readline(MAX_LINE_CHARS)
                out.append(None)
                continue
            out.append(line.rstrip("\r\n"))


def warn_note(notes: list[str] | None, message: str) -> None:
    """Warn with `message` (UserWarning) and append it to `notes` when given (the report lists them)."""
    warnings.warn(message, stacklevel=3)
    if notes is not None:
        notes.append(message)
