"""Read a run folder (rows.jsonl, env.json, spec.toml, distributions/): the one tolerant reader the sweep, report and compare share.

Tolerant by design: a truncated line (a killed run) is skipped with a warning, never fatal;
fields an older writer did not record become missing values; a folder that is not a run is a
``UsageError`` with one line saying what to pass instead. rows.jsonl's lines are read by harness.store.row_lines.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import pandas as pd

from harness.errors import UsageError
from harness.entries import length_fields, searched_fields
from harness.row import NUMERIC_FIELDS, ROW_FIELDS, Row
from harness.schema import CELL_FIELDS, SCHEMA_VERSION, DECLARED, canonical, legacy_value, series_suffix
from harness.store.columns import COL, SERIES
from harness.store.distributions import read_distributions
from harness.store.row_lines import read_row_lines, regular_file, warn_note
from harness.store.row_types import MAX_LINE_CHARS, row_problem, shown, too_deep
from harness.store.run_dir import ENV_FILE, ROWS_FILE, SPEC_FILE

REQUIRED_FIELDS = ("variant", "seq_len", "status")  # without these a row cannot be placed in any table


@dataclass
class Run:
    """A loaded run folder: its rows as a DataFrame plus the environment and spec it recorded."""

    path: Path  # the run folder
    rows: pd.DataFrame  # one row per cell, every schema field present (None where not recorded), plus "series"
    env: dict[str, Any]  # env.json ({} when absent)
    spec_text: str | None  # spec.toml verbatim (None when absent)
    notes: list[str] = field(default_factory=list)  # what was skipped or filled in while reading, for the report
    records: list[dict[str, Any]] = field(default_factory=list)  # the rows as written (JSON objects), for rows.csv
    # the inputs' attention distributions (RUN_DIR/distributions/, harness.store.distributions)
    distributions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.name


def resolve_run_dir(run_dir: str | Path) -> Path:
    """The run folder for a path given by the user (a rows.jsonl path is taken as its folder).

    Raises UsageError when the path does not exist or holds no rows.jsonl.
    """
    path = Path(run_dir)
    if path.is_file() and path.name == ROWS_FILE:
        path = path.parent
    if not path.exists():
        raise UsageError(
            f"run folder '{run_dir}' does not exist; pass a folder made by `python -m harness sweep` (e.g. results/<run-id>)"
        )
    if not path.is_dir():
        raise UsageError(f"'{run_dir}' is a file, not a run folder; pass the folder that holds rows.jsonl")
    regular_file(path / ROWS_FILE)
    if not (path / ROWS_FILE).is_file():
        raise UsageError(
            f"'{run_dir}' is not a run folder: it has no rows.jsonl (a run folder holds rows.jsonl, env.json, "
            "spec.toml; make one with `python -m harness sweep`)"
        )
    return path


def rows_frame(rows: list[dict[str, Any]], notes: list[str] | None = None, source: str = "rows") -> pd.DataFrame:
    """Rows as a DataFrame with every schema field present and a "series" label per (variant, config).

    Rows lacking a required field (variant, seq_len, status) or with a field not of its declared type
    (harness.store.row_types) are dropped with a note; if every row lacks one, the file is not a rows file this reader understands and UsageError is raised.
    """
    kept, refused = [], 0
    for number, row in enumerate(rows, start=1):
        if any(row.get(f) is None for f in REQUIRED_FIELDS):
            continue
        problem = row_problem(row)  # rows from read_row_lines passed it already; rows given in memory have not
        if problem is not None:
            refused += 1
            warn_note(notes, f"{source}: row {number}: {problem}; row skipped")
            continue
        lengths = {f: None if row.get(f) is None else int(row[f]) for f in ("seq_len", "kv_len")}  # 16.0 -> 16
        kept.append({**row, **lengths})
    if rows and not kept and not refused:
        found = ", ".join(sorted(rows[0])[:12])
        raise UsageError(
            f"{source}: no row has the fields {', '.join(REQUIRED_FIELDS)} (first row has: {found}); "
            f"not an attnsuite rows file of schema {SCHEMA_VERSION} or older"
        )
    if len(kept) + refused < len(rows):
        warn_note(
            notes, f"{source}: skipped {len(rows) - len(kept) - refused} row(s) without {'/'.join(REQUIRED_FIELDS)}"
        )
    versions = {r.get("schema_version") for r in kept}
    if any(isinstance(v, int) and v > SCHEMA_VERSION for v in versions):
        warn_note(
            notes,
            f"{source}: rows from a newer schema ({sorted(v for v in versions if isinstance(v, int))}); fields unknown here are ignored",
        )
    absent = [f for f in ROW_FIELDS if kept and all(f not in r for r in kept)]
    if kept and (None in versions or absent):
        important = [
            f for f in absent if f in ("latency_s", "peak_memory_bytes", "rel_l2_error", "mode", "inputs", "dtype")
        ]
        if important:
            warn_note(notes, f"{source}: older row format, missing {', '.join(important)}; shown as '-'")
    frame = pd.DataFrame(kept, columns=list(dict.fromkeys(list(ROW_FIELDS) + [k for r in kept for k in r])))
    _fill_defaults(frame)
    frame[SERIES] = series_labels(frame)
    return frame


def load_run(run_dir: str | Path) -> Run:
    """Load a run folder: rows (tolerant, see read_row_lines), env.json and spec.toml.

    Raises UsageError for a path that is not a run folder.
    """
    path = resolve_run_dir(run_dir)
    notes: list[str] = []
    rows = read_row_lines(path / ROWS_FILE, notes)
    frame = rows_frame(rows, notes, source=str(path / ROWS_FILE))
    spec_text = (path / SPEC_FILE).read_text(encoding="utf-8") if (path / SPEC_FILE).is_file() else None
    return Run(
        path=path,
        rows=frame,
        env=read_env(path / ENV_FILE, notes),
        spec_text=spec_text,
        notes=notes,
        records=[row for row in rows if row.get("cell_id")],
        distributions=read_distributions(path, notes),
    )


# env.json's entries that are tables (harness.env.collect_env, the sweep's seeds and settings); every other is a scalar
ENV_TABLES = ("process_env", "heap", "packages", "seeds", "measure_settings", "limits")


def read_env(path: Path, notes: list[str] | None = None) -> dict[str, Any]:
    """env.json as a table ({} when absent or unreadable, with a note); an entry of the wrong shape (a table where
    text belongs, text where a table belongs) is left out with a note."""
    if not path.is_file() or path.stat().st_size > MAX_LINE_CHARS:
        return {}
    try:
        env = json.loads(path.read_text(encoding="utf-8", errors="replace"))
    except (json.JSONDecodeError, RecursionError) as exc:
        warn_note(notes, f"{path}: not valid JSON ({getattr(exc, 'msg', 'nested too deep')}); environment unknown")
        return {}
    if not isinstance(env, dict):
        warn_note(notes, f"{path}: a JSON {type(env).__name__} where a table was expected; environment unknown")
        return {}
    kept = {}
    for key, value in env.items():
        table = key in ENV_TABLES
        if (isinstance(value, dict) if table else not isinstance(value, (dict, list))) and not too_deep(value, 4):
            kept[key] = value
        elif value is not None:
            expected = "a table" if table else "text or a number"
            warn_note(notes, f"{path}: entry {key} is {shown(value)}, expected {expected}; left out")
    return kept


def config_key(config: Any) -> str:
    """A canonical string of a config dict (sorted keys), so equal configs compare equal."""
    return canonical(config if isinstance(config, dict) else {})


def series_labels(frame: pd.DataFrame) -> list[str]:
    """One label per row naming its (variant, config): the variant, plus the config fields that vary within it.

    "dense" when a variant ran with one config; "sliding_window(window=128)" when several windows ran.
    A variant's length fields (they follow N: Linformer's max_seq_len) never split a series. Rows
    matched to an error budget form one series per budget, "sliding_window@0.05" (the knob's value
    varies with N; the row's config says which), "sliding_window@cos0.05" for a cosine budget, and
    "sliding_window(sinks=4)@0.05" when another field varies among the variant's matched rows. A series field away
    from its default is appended: "dense[kv=int8]" (harness.schema.series_suffix).
    """
    if not len(frame):
        return []
    keys = [config_key(c) for c in frame["config"]]
    budgets = (
        frame["matched_budget"] if "matched_budget" in frame else pd.Series([None] * len(frame), index=frame.index)
    )
    metrics = frame["error_metric"] if "error_metric" in frame else pd.Series([None] * len(frame), index=frame.index)
    matched = [b is not None and not (isinstance(b, float) and math.isnan(b)) for b in budgets]
    configs: dict[tuple[str, bool], dict[str, dict]] = {}  # (variant, matched) -> config key -> config
    for variant, key, is_matched in zip(frame["variant"], keys, matched):
        configs.setdefault((variant, is_matched), {})[key] = json.loads(key)
    varying: dict[tuple[str, bool], list[str]] = {}
    for (variant, is_matched), found in configs.items():
        # the search sets the knob (and what is searched with it, sliding_window's sinks)
        left_out = set(length_fields(variant)) | (set(searched_fields(variant)) if is_matched else set())
        fields = sorted({f for c in found.values() for f in c} - left_out)
        varying[(variant, is_matched)] = [
            f for f in fields if len({json.dumps(c.get(f), sort_keys=True, default=str) for c in found.values()}) > 1
        ]
    labels = []
    suffixes = [series_suffix(r) for r in frame.to_dict("records")]  # '[kv=int8]': a series of its own
    for variant, key, is_matched, budget, metric, suffix in zip(
        frame["variant"], keys, matched, budgets, metrics, suffixes
    ):
        fields, config = varying[(variant, is_matched)], json.loads(key)
        label = f"{variant}(" + ",".join(f"{f}={config.get(f)}" for f in fields) + ")" if fields else str(variant)
        label += suffix
        labels.append(f"{label}@{'cos' if metric == 'cosine' else ''}{float(budget):g}" if is_matched else label)
    return labels


def _fill_defaults(frame: pd.DataFrame) -> None:
    """Each cell field an older writer left out takes what such a row means (cell_values), so grouping never sees
    None; measurements are floats (NaN where missing)."""
    for column in frame.columns:
        if column not in NUMERIC_FIELDS:
            frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
    for column in NUMERIC_FIELDS:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(float)
    if not len(frame):
        return
    filled = [cell_values(r) for r in frame[list(CELL_FIELDS)].to_dict("records")]
    for name in CELL_FIELDS:
        frame[name] = [values[name] for values in filled]


def cell_values(record: Mapping[str, Any]) -> dict[str, Any]:
    """A row's cell fields, each an older writer left out (or a config that is not a table) as what such a row means
    (harness.schema.legacy_value), typed as the field declares (CellField.cast)."""
    out = {}
    for name in CELL_FIELDS:
        value = record.get(name)
        if value is None or (name == "config" and not isinstance(value, dict)):
            value = legacy_value(name, record)
        cast = DECLARED[name].cast
        out[name] = value if value is None or cast is None else cast(value)
    return out


def typed_row(record: Mapping[str, Any]) -> Row:
    """A Row from a JSON object of rows.jsonl (one that read_row_lines kept): keys a newer writer added are left out,
    cell fields an older one did not record filled in (cell_values); the cell_id stays as written, so a resume
    matches the cells it has."""
    known = {name: value for name, value in record.items() if name in ROW_FIELDS}
    return Row.from_dict({**known, **cell_values(known)})


def read_rows(run_dir: str | Path) -> list[dict[str, Any]]:
    """The complete rows (those with a cell_id) of a run folder as written (JSON objects); [] when it has no
    rows.jsonl. load_rows gives them typed.

    Reads through read_row_lines, so a partial or unparsable line is skipped with a warning.
    """
    path = Path(run_dir) / ROWS_FILE
    if not path.exists():
        return []
    return [row for row in read_row_lines(path) if row.get(COL.cell_id)]


def load_rows(run_dir: str | Path) -> list[Row]:
    """The complete rows of a run folder as Rows (typed_row): what a resume counts and walks."""
    return [typed_row(record) for record in read_rows(run_dir)]


def completed_cell_ids(rows: Iterable[Row]) -> set[str]:
    """Cells that already have a row (any status: a recorded failure is a result, not a gap)."""
    return {row.cell_id for row in rows}
