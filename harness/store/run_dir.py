"""Run folders: their files and how a new one is made."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from harness.errors import UsageError
from harness.executors.isolated import CELL_TEMP_DIR
from harness.executors.distributions import DISTRIBUTIONS_DIR
from harness.executors.worker import FITTED_DIR
from harness.spec.sweep_spec import CLOCKS
from harness.inputs.model import CACHE_FOLDER as MODEL_INPUTS_DIR
from harness.store.lock import LOCK_FILE
from harness.safe_files import check_run_folder

ROWS_FILE, ENV_FILE, SPEC_FILE, CSV_FILE, PARQUET_FILE = (
    "rows.jsonl",
    "env.json",
    "spec.toml",
    "rows.csv",
    "rows.parquet",
)
# the files a sweep writes or appends (the report's figures are checked as they are written), and its folders
WRITTEN_FILES = (ROWS_FILE, ENV_FILE, SPEC_FILE, CSV_FILE, PARQUET_FILE, LOCK_FILE, "report.md", "report.html")
CLOCK_REPORT_DIR = "report-{clock}"  # `report --clock X` on a run answered on another clock: its own page and figures
WRITTEN_FOLDERS = (
    FITTED_DIR,
    DISTRIBUTIONS_DIR,
    CELL_TEMP_DIR,
    MODEL_INPUTS_DIR,
    "slurm",
    *(CLOCK_REPORT_DIR.format(clock=c) for c in CLOCKS),
)


_RUN_ID = re.compile(r"[A-Za-z0-9_.-]{1,200}")
RUN_ID_RULE = "one plain folder name of at most 200 characters: letters, digits, '-', '_', '.' (not '.' or '..')"


def check_run_id(run_id: str) -> str:
    """`run_id` when it is one plain path component; else UsageError, so a run folder never lands outside --out."""
    if not _RUN_ID.fullmatch(run_id) or run_id in (".", ".."):
        shown = run_id if len(run_id) <= 60 else run_id[:40] + f"... ({len(run_id)} characters)"
        raise UsageError(f"--run-id {shown!r}: a run id must be {RUN_ID_RULE}, e.g. 'baseline-cpu'")
    return run_id


def new_run_id(device: str) -> str:
    """A run id from the time and device: '20260509-143012-cpu'."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + device.split(":")[0]


def create_run_dir(out: str | Path, run_id: str, *, exact: bool = False) -> Path:
    """Make results/<run-id> and return it.

    With exact=False (a generated id) an existing folder gets a suffix (-2, -3, ...); with
    exact=True (an id the user chose) a folder that already holds rows is refused: resume it instead.
    A run id that is not one plain folder name (check_run_id) is a UsageError.
    """
    run_dir = Path(out) / check_run_id(run_id)
    if exact and os.path.lexists(run_dir):
        check_run_folder(
            run_dir, WRITTEN_FILES, WRITTEN_FOLDERS
        )  # a planted link is refused before anything is read or written
    if exact and (run_dir / ROWS_FILE).exists():
        raise UsageError(
            f"run folder {run_dir} already holds rows; continue it with --resume {run_dir} or pick another --run-id"
        )
    suffix = 2
    while not exact and os.path.lexists(run_dir):
        run_dir, suffix = Path(out) / f"{run_id}-{suffix}", suffix + 1
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot create the run folder {run_dir} ({exc.strerror or exc})") from None
    return check_run_folder(run_dir, WRITTEN_FILES, WRITTEN_FOLDERS)
