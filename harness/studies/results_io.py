"""Where a study writes and in what form: <stem>.csv, <stem>.json, <stem>.md and <stem>.png in one folder.

``<stem>.csv`` has one row per variant and setting, numbers raw; ``<stem>.json`` is
{"meta": ..., "rows": [...]} (what the report reads, harness.report.study_results); ``<stem>.md``
a summary for people; ``<stem>.png`` a figure. The folder is a new results/<id>/ or an existing run folder.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from harness.errors import UsageError
from harness.report.render import Block, render_markdown
from harness.safe_files import check_run_folder, write_plain
from harness.store import inert_csv_frame


def output_dir(kind: str, *, run: str | None = None, out: str | None = None) -> Path:
    """The folder to write into: `run` (an existing run folder), `out` (created), else results/<UTC time>-<kind>/.

    Raises UsageError when `run` names no folder or a symbolic link (harness.safe_files.check_run_folder).
    """
    if run:
        path = Path(run)
        if not path.is_dir():
            raise UsageError(
                f"--run {run!r} is not an existing folder; pass a run folder (e.g. results/<run-id>) or use --out DIR"
            )
        return check_run_folder(path)
    path = Path(out) if out else Path("results") / f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{kind}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_results(
    folder: Path,
    stem: str,
    rows: list[dict[str, Any]],
    meta: dict[str, Any],
    *,
    summary: Sequence[Block],
    plot: Callable[[list[dict[str, Any]], Path], Path],
) -> list[Path]:
    """All four files of a study: <stem>.csv and .json (write_table), .md (the `summary` blocks), .png (`plot`), each
    written whole without following a link (harness.safe_files)."""
    paths = write_table(folder, stem, rows, meta)
    md_path = folder / f"{stem}.md"
    write_plain(md_path, render_markdown(summary))
    return paths + [md_path, plot(rows, folder / f"{stem}.png")]


def write_table(folder: Path, stem: str, rows: list[dict[str, Any]], meta: dict[str, Any]) -> list[Path]:
    """Write <stem>.csv (no cell a spreadsheet would run as a formula: harness.store.inert_csv_frame, as rows.csv) and
    <stem>.json (rows plus meta), each without following a link; returns the paths."""
    frame = pd.DataFrame(rows)
    for column in frame.columns:  # dicts (configs, calibration reports) as JSON text in the CSV
        if frame[column].map(lambda x: isinstance(x, (dict, list))).any():
            frame[column] = frame[column].map(
                lambda x: json.dumps(x, sort_keys=True) if isinstance(x, (dict, list)) else x
            )
    csv_path, json_path = folder / f"{stem}.csv", folder / f"{stem}.json"
    text = io.StringIO()
    inert_csv_frame(frame).to_csv(text, index=False)
    write_plain(csv_path, text.getvalue())
    write_plain(json_path, json.dumps({"meta": meta, "rows": rows}, indent=1, default=_jsonable) + "\n")
    return [csv_path, json_path]


def _jsonable(x: Any) -> Any:
    return x.to_dict() if hasattr(x, "to_dict") else str(x)
