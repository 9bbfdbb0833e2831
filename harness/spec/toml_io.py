"""The spec as TOML: reading a file (errors with file, line and column) and writing the effective spec."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10: the tomli backport, a dependency only there
    import tomli as tomllib

from harness.errors import UsageError
from harness.knobs import knobs
from harness.spec.sweep_spec import RENAMED_KEYS, SweepSpec


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file; a syntax error becomes UsageError with the file, line and column."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--config {path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"--config {path}: not a TOML text file (byte {exc.object[exc.start]:#04x} at offset {exc.start} "
            "is not UTF-8); pass a sweep spec .toml (see docs/sweep.md)"
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: malformed TOML: {exc}") from None


def stored_spec_values(text: str | None) -> tuple[dict[str, Any], str | None]:
    """A run folder's spec.toml text as values (renamed keys under their new names), and what was wrong with it
    (None when it read cleanly or there is none: an older run; {} and the problem when it is malformed): a report
    reads what it can."""
    if text is None:
        return {}, None
    try:
        values = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return {}, f"its spec.toml is malformed ({exc}); the run's settings are taken as the defaults"
    return {RENAMED_KEYS.get(k, k): v for k, v in values.items()}, None


def spec_to_toml(spec: SweepSpec) -> str:
    """The effective spec as TOML (variants expanded, plugins as absolute paths where they are files)."""
    values: dict[str, Any] = {}
    for k in knobs(type(spec)):
        value = getattr(spec, k.key)
        if k.key == "variants":
            value = [entry.label for entry in value]
        elif k.key == "plugins":
            value = [str(Path(p).resolve()) if Path(p).is_file() else p for p in value]
        values[k.key] = value
    values.update(spec.executor_options)  # flat keys, as the executor declared them
    lines = ["# The effective sweep spec of this run (defaults < TOML < CLI); `--config` or `--resume` reads it back."]
    for key, value in values.items():
        if value is None and key in (
            "cell_timeout_s",
            "fit_timeout_s",
        ):  # "no limit" must read back as none, not as the default limit
            value = 0
        if value is None:
            lines.append(f"# {key} = (none)")
            continue
        lines.append(f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string uses JSON's escapes
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def parse_toml(text: str) -> dict[str, Any]:
    """TOML text as values (tomllib, or tomli on Python 3.10); tomllib.TOMLDecodeError for bad text."""
    return tomllib.loads(text)
