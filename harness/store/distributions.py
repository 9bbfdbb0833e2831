"""A run's attention distributions (RUN_DIR/distributions/*.json, harness.executors.distributions), read tolerantly:
a file that is not a plain file, too large, not JSON or not shaped as written is skipped with a note, never fatal."""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path
from typing import Any

from harness.executors.distributions import DISTRIBUTIONS_DIR
from harness.measure.distribution import DISTRIBUTION_FIELDS, KINDS, METRICS
from harness.store.row_lines import warn_note

MAX_FILE_BYTES = 16 << 20  # far above a record of 1024 heads (~300 kB)


def read_distributions(run_dir: Path, notes: list[str] | None = None) -> list[dict[str, Any]]:
    """The distribution records of the run folder, sorted by inputs, then the setting, then N (numbers as numbers);
    [] without any."""
    folder = Path(run_dir) / DISTRIBUTIONS_DIR
    if not folder.is_dir() or folder.is_symlink():
        return []
    records = []
    for path in sorted(folder.glob("*.json")):
        record, problem = _read(path)
        if problem is not None:
            warn_note(notes, f"{path}: {problem}; its attention distribution is not shown")
            continue
        records.append(record)
    return sorted(records, key=_order)


def _order(record: dict[str, Any]) -> list[tuple[bool, Any]]:
    """The sort key: inputs, the other fields, the lengths last; a number by its value (256 before 1024)."""
    names = sorted(DISTRIBUTION_FIELDS, key=lambda name: (name != "inputs", name in ("seq_len", "kv_len")))
    values = [record["key"][name] for name in names]
    return [(isinstance(v, str), v if isinstance(v, str) else float(v)) for v in values]


def _read(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(the record, None) or (None, what is wrong with the file)."""
    info = path.lstat()
    if not stat.S_ISREG(info.st_mode):
        return None, "not a regular file"
    if info.st_size > MAX_FILE_BYTES:
        return None, f"{info.st_size} bytes, above the {MAX_FILE_BYTES} a distribution may have"
    try:
        with open(path, encoding="utf-8") as f:
            record = json.loads(f.read(MAX_FILE_BYTES + 1))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return None, f"unreadable ({type(exc).__name__})"
    return (record, None) if _shaped(record) else (None, "not a distribution record as the sweep writes it")


def _shaped(record: Any) -> bool:
    """Whether `record` has a key with every DISTRIBUTION_FIELDS, and heads each with finite METRICS and a known kind."""
    if not isinstance(record, dict) or not isinstance(record.get("key"), dict):
        return False
    if any(name not in record["key"] for name in DISTRIBUTION_FIELDS):
        return False
    heads = record.get("heads")
    if not isinstance(heads, list) or not heads:
        return False
    return all(
        isinstance(h, dict)
        and h.get("kind") in KINDS
        and all(isinstance(h.get(m), (int, float)) and math.isfinite(h[m]) for m in METRICS)
        for h in heads
    )
