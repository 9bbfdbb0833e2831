"""The attention distribution of each inputs key of a run, stored once in RUN_DIR/distributions/ by whichever worker
first measures a cell with those inputs (harness.measure.distribution computes it from the cell's cached inputs).

One file per key (<16 hex of the key>.json, written whole through harness.safe_files), as RUN_DIR/fitted/ holds one
per fit: workers of a parallel executor write without a shared lock, and a file that exists is never computed again
(a resumed run or a second process skips it). The report reads them (harness.store.distributions).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from harness.measure import MeasureContext, MeasureSettings
from harness.measure.distribution import distribution_key, inputs_distribution
from harness.safe_files import write_plain
from harness.schema import Cell, canonical, json_safe

DISTRIBUTIONS_DIR = "distributions"  # RUN_DIR/distributions/<key hash>.json: one inputs key's distribution each


def distribution_path(run_dir: Path, key: dict) -> Path:
    """RUN_DIR/distributions/<16 hex of the key's canonical JSON>.json."""
    name = hashlib.sha256(canonical(key).encode()).hexdigest()[:16] + ".json"
    return Path(run_dir) / DISTRIBUTIONS_DIR / name


def store_distribution(cell: Cell, settings: MeasureSettings, context: MeasureContext, run_dir: Path) -> Path | None:
    """Compute and write the distribution of the cell's inputs unless the folder has it (or the cell has none: a
    decode or layer cell); the path written, else None."""
    key = distribution_key(cell)
    if key is None:
        return None
    path = distribution_path(run_dir, key)
    if path.exists():
        return None
    record = inputs_distribution(cell, settings, context, torch.device(settings.device))
    if record is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    write_plain(path, json.dumps(json_safe(record)))
    return path
