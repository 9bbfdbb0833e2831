"""Run folders: the writer (append, fsync), the one tolerant reader, and the folder's files.

``results/<run-id>/`` holds rows.jsonl (one JSON object per cell, harness.row.Row), env.json,
spec.toml and, at the end, rows.csv (rows.parquet with pyarrow), the figures and the report.
"""

from harness.store.columns import COL, SERIES
from harness.store.lock import LOCK_FILE, lock_run_dir
from harness.store.reader import (
    Run,
    completed_cell_ids,
    config_key,
    load_rows,
    load_run,
    read_row_lines,
    read_rows,
    resolve_run_dir,
    rows_frame,
    series_labels,
    typed_row,
    warn_note,
)
from harness.store.run_dir import (
    CSV_FILE,
    ENV_FILE,
    PARQUET_FILE,
    ROWS_FILE,
    SPEC_FILE,
    check_run_id,
    create_run_dir,
    new_run_id,
)
from harness.safe_files import check_plain, check_run_folder, open_plain, write_plain
from harness.store.writer import RowWriter, inert_csv_frame, repair_tail, rows_dataframe, write_json, write_tables

__all__ = [
    "COL",
    "CSV_FILE",
    "ENV_FILE",
    "LOCK_FILE",
    "PARQUET_FILE",
    "ROWS_FILE",
    "SPEC_FILE",
    "Run",
    "RowWriter",
    "SERIES",
    "check_plain",
    "check_run_folder",
    "check_run_id",
    "completed_cell_ids",
    "config_key",
    "create_run_dir",
    "inert_csv_frame",
    "load_rows",
    "load_run",
    "lock_run_dir",
    "new_run_id",
    "open_plain",
    "read_row_lines",
    "read_rows",
    "repair_tail",
    "resolve_run_dir",
    "rows_dataframe",
    "rows_frame",
    "series_labels",
    "typed_row",
    "warn_note",
    "write_json",
    "write_plain",
    "write_tables",
]
