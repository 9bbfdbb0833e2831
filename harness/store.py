"""Run folders: rows.jsonl appended and flushed per cell, resume, env.json, spec.toml, rows.csv/Parquet.

A run folder ``results/<run-id>/`` holds ``rows.jsonl`` (one JSON object per cell, docs/DESIGN.md
"Row schema"), ``env.json``, ``spec.toml`` and, at the end, ``rows.csv`` (and ``rows.parquet``
when pyarrow is installed). A run killed mid-write leaves at most one partial last line; resuming
cuts it off before appending, so every line stays one complete row.
"""
from __future__ import annotations

import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any, Iterable

SCHEMA_VERSION = 1
# Every field of schema 1, in order (docs/DESIGN.md "Row schema").
ROW_FIELDS = (
    "run_id", "cell_id", "variant", "config", "backend", "seq_len", "kv_len", "batch", "heads", "head_dim",
    "dtype", "device", "device_name", "host", "causal", "mode", "inputs", "seed", "threads",
    "status", "reason",
    "latency_s", "latency_p20_s", "latency_p80_s", "repeats", "peak_memory_bytes", "memory_method", "flops",
    "tflops", "rel_l2_error", "max_abs_error", "cosine", "error_rows", "grad_rel_l2_q", "grad_rel_l2_k",
    "grad_rel_l2_v", "grad_check_seq_len", "setup_s", "calibration_s", "calibration", "started_at", "wall_s",
    "schema_version",
)
STATUSES = ("ok", "oom", "unsupported", "error", "nonfinite", "timeout")
ROWS_FILE, ENV_FILE, SPEC_FILE, CSV_FILE, PARQUET_FILE = "rows.jsonl", "env.json", "spec.toml", "rows.csv", "rows.parquet"


def new_run_id(device: str) -> str:
    """A run id from the time and device: '20260509-143012-cpu'."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + device.split(":")[0]


def create_run_dir(out: str | Path, run_id: str, *, exact: bool = False) -> Path:
    """Make results/<run-id> and return it.

    With exact=False (a generated id) an existing folder gets a suffix (-2, -3, ...); with
    exact=True (an id the user chose) a folder that already holds rows is refused: resume it instead.
    """
    from harness.cli import UsageError

    run_dir = Path(out) / run_id
    if exact and (run_dir / ROWS_FILE).exists():
        raise UsageError(f"run folder {run_dir} already holds rows; continue it with --resume {run_dir} or pick another --run-id")
    suffix = 2
    while not exact and run_dir.exists():
        run_dir, suffix = Path(out) / f"{run_id}-{suffix}", suffix + 1
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot create the run folder {run_dir} ({exc.strerror or exc})") from None
    return run_dir


def empty_row() -> dict[str, Any]:
    """A row with every schema field None (schema_version set)."""
    row = dict.fromkeys(ROW_FIELDS)
    row["schema_version"] = SCHEMA_VERSION
    return row


class RowWriter:
    """Appends rows to rows.jsonl, one line each, flushed and fsynced as each cell finishes."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / ROWS_FILE
        repair_tail(self.path)
        self._file = open(self.path, "a", encoding="utf-8")

    def append(self, row: dict[str, Any]) -> None:
        unknown = set(row) - set(ROW_FIELDS)
        if unknown:
            raise ValueError(f"row has fields outside schema {SCHEMA_VERSION}: {sorted(unknown)}")
        line = json.dumps({k: json_safe(row.get(k)) for k in ROW_FIELDS}, allow_nan=False, default=str)
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
    """Cut a partial last line (a run killed mid-write) so the next append starts a fresh line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        data = f.read()
        if data.endswith(b"\n"):
            return
        f.truncate(data.rfind(b"\n") + 1)


def read_row_lines(path: str | Path, notes: list[str] | None = None) -> list[dict[str, Any]]:
    """The JSON objects of a rows.jsonl file, tolerantly: an unreadable line is skipped with a warning.

    A line that is not valid JSON (typically the last one of a run killed mid-write) or not a JSON
    object is skipped and described as a ``UserWarning`` and in `notes` (if given). Blank lines are ignored.
    """
    path = Path(path)
    rows: list[dict[str, Any]] = []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            where = "last line" if number == len(lines) else f"line {number}"
            warn_note(notes, f"{path}: skipped {where}, not valid JSON ({exc.msg}); probably a run killed mid-write")
            continue
        if not isinstance(row, dict):
            warn_note(notes, f"{path}: skipped line {number}, a JSON {type(row).__name__} where a row object was expected")
            continue
        rows.append(row)
    return rows


def read_rows(run_dir: str | Path) -> list[dict[str, Any]]:
    """The complete rows (those with a cell_id) of a run folder; [] when it has no rows.jsonl.

    Reads through read_row_lines, so a partial or unparsable line is skipped with a warning.
    """
    path = Path(run_dir) / ROWS_FILE
    if not path.exists():
        return []
    return [row for row in read_row_lines(path) if row.get("cell_id")]


def warn_note(notes: list[str] | None, message: str) -> None:
    """Warn with `message` (UserWarning) and append it to `notes` when given (the report lists them)."""
    warnings.warn(message, stacklevel=3)
    if notes is not None:
        notes.append(message)


def completed_cell_ids(rows: Iterable[dict[str, Any]]) -> set[str]:
    """Cells that already have a row (any status: a recorded failure is a result, not a gap)."""
    return {row["cell_id"] for row in rows}


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def rows_dataframe(rows: list[dict[str, Any]]):
    """Rows as a pandas DataFrame with every schema column; dict fields kept as dicts."""
    import pandas as pd

    return pd.DataFrame(rows, columns=list(ROW_FIELDS))


def write_tables(run_dir: str | Path) -> list[Path]:
    """rows.csv (dict fields as JSON text) and rows.parquet when pyarrow is installed; returns the paths."""
    import importlib.util

    run_dir = Path(run_dir)
    frame = rows_dataframe(read_rows(run_dir))
    for column in ("config", "calibration"):
        frame[column] = [None if v is None else json.dumps(v, sort_keys=True) for v in frame[column]]
    written = [run_dir / CSV_FILE]
    frame.to_csv(written[0], index=False)  # full float precision: pandas writes repr()
    if importlib.util.find_spec("pyarrow") is not None:
        frame.to_parquet(run_dir / PARQUET_FILE, index=False)
        written.append(run_dir / PARQUET_FILE)
    return written


def json_safe(value: Any) -> Any:
    """JSON-safe raw values: non-finite floats become None (the row's status says why)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return json_safe(value.item())
    return value
