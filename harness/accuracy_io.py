"""Where `model-eval` and `tasks` write: a new results/<id>/ folder or an existing run folder, as CSV, JSON, Markdown, PNG.

Both commands write ``<stem>.csv`` (one row per variant and setting, numbers raw),
``<stem>.json`` ({"meta": ..., "rows": [...]}), ``<stem>.md`` (a summary table the report can
include as is) and ``<stem>.png`` (a figure).
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import math
import time
from pathlib import Path
from typing import Any, Iterable


def add_output_arguments(parser: argparse.ArgumentParser, stem: str) -> None:
    """--out DIR / --run RUN_DIR, shared by the accuracy commands."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", metavar="DIR", help=f"folder for {stem}.csv/.json/.md/.png (default: a new results/<id>/)")
    where.add_argument("--run", metavar="RUN_DIR", help=f"an existing run folder (e.g. from `sweep`) to add {stem}.* to")


def output_dir(args: argparse.Namespace, kind: str) -> Path:
    """The folder to write into: --run (must exist), --out (created), or results/<UTC time>-<kind>/.

    Raises UsageError when --run names no folder.
    """
    from harness.cli import UsageError

    if getattr(args, "run", None):
        path = Path(args.run)
        if not path.is_dir():
            raise UsageError(f"--run {args.run!r} is not an existing folder; pass a run folder (e.g. results/<run-id>) or use --out DIR")
        return path
    path = Path(args.out) if getattr(args, "out", None) else Path("results") / f"{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{kind}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def parse_overrides(items: Iterable[str]) -> dict[str, dict[str, Any]]:
    """`--set variant.field=value` items -> {variant: {field: value}}; values parsed as JSON when they can be.

    Raises UsageError for an item without the variant.field=value form.
    """
    from harness.cli import UsageError

    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        variant, dot, field = key.partition(".")
        if not (sep and dot and variant and field):
            raise UsageError(f"--set {item!r}: expected VARIANT.FIELD=VALUE, e.g. --set sliding_window.window=32")
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out.setdefault(variant, {})[field] = value
    return out


def write_table(folder: Path, stem: str, rows: list[dict[str, Any]], meta: dict[str, Any]) -> list[Path]:
    """Write <stem>.csv and <stem>.json (rows plus meta); returns the paths."""
    import pandas as pd

    frame = pd.DataFrame(rows)
    for column in frame.columns:  # dicts (configs, calibration reports) as JSON text in the CSV
        if frame[column].map(lambda x: isinstance(x, (dict, list))).any():
            frame[column] = frame[column].map(lambda x: json.dumps(x, sort_keys=True) if isinstance(x, (dict, list)) else x)
    csv_path, json_path = folder / f"{stem}.csv", folder / f"{stem}.json"
    frame.to_csv(csv_path, index=False)
    json_path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=_jsonable) + "\n")
    return [csv_path, json_path]


def markdown_table(header: list[str], body: list[list[Any]]) -> str:
    """A GitHub Markdown table; floats shown with 4 significant digits, None as '-'."""
    def cell(x: Any) -> str:
        if x is None or (isinstance(x, float) and math.isnan(x)):
            return "-"
        if isinstance(x, float):
            return f"{x:.4g}"
        return str(x).replace("|", "\\|")

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def short_reason(reason: str | None, limit: int = 90) -> str:
    """A reason cut to one table cell."""
    if not reason:
        return ""
    return reason if len(reason) <= limit else reason[: limit - 3] + "..."


def _jsonable(x: Any) -> Any:
    if hasattr(x, "to_dict"):
        return x.to_dict()
    if isinstance(x, Path):
        return str(x)
    return str(x)


def select_variants(patterns: str) -> list[str]:
    """Registered variants matching comma-separated globs, dense first; UsageError when one matches nothing."""
    from harness.cli import UsageError
    from variants import list_variants
    from variants._checks import did_you_mean

    names = list_variants()
    chosen: list[str] = []
    for pattern in (p.strip() for p in patterns.split(",") if p.strip()):
        matched = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not matched:
            raise UsageError(f"no registered variant matches {pattern!r}. Available: {', '.join(names)}{did_you_mean(pattern, names)}")
        chosen += [n for n in matched if n not in chosen]
    return sorted(chosen, key=lambda n: (n != "dense", n))


def variant_fields(name: str, N: int, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Config fields for `name` at length N: max_seq_len = N where its config has that field, then user overrides."""
    import dataclasses

    from variants import get_variant

    fields = {f.name for f in dataclasses.fields(get_variant(name).config)}
    out: dict[str, Any] = {"max_seq_len": N} if "max_seq_len" in fields else {}
    out.update(overrides or {})
    return out


def check_overrides(overrides: dict[str, dict[str, Any]], variants: list[str], N: int) -> None:
    """Raise UsageError unless every --set names a variant of this run and a valid config field and value."""
    from harness.cli import UsageError
    from variants import build_config

    for name, fields in overrides.items():
        if name not in variants:
            raise UsageError(f"--set names variant {name!r}, which is not in this run ({', '.join(variants)})")
        try:
            build_config(name, **variant_fields(name, N, fields))
        except (TypeError, ValueError) as exc:
            raise UsageError(f"--set for {name}: {exc}") from None
