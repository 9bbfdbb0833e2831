"""Which variants a study runs, and with which config fields (globs over the registry, --set overrides)."""

from __future__ import annotations

import dataclasses
import fnmatch
from typing import Any

from harness.errors import UsageError
from variants import build_config, get_variant, list_variants
from variants._checks import did_you_mean


def select_variants(patterns: str) -> list[str]:
    """Registered variants matching comma-separated globs, dense first; UsageError when one matches nothing."""
    names = list_variants()
    chosen: list[str] = []
    for pattern in (p.strip() for p in patterns.split(",") if p.strip()):
        matched = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not matched:
            raise UsageError(
                f"no registered variant matches {pattern!r}. Available: {', '.join(names)}{did_you_mean(pattern, names)}"
            )
        chosen += [n for n in matched if n not in chosen]
    return sorted(chosen, key=lambda n: (n != "dense", n))


def variant_fields(name: str, N: int, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Config fields for `name` at length N: max_seq_len = N where its config has that field, then user overrides."""
    fields = {f.name for f in dataclasses.fields(get_variant(name).config)}
    out: dict[str, Any] = {"max_seq_len": N} if "max_seq_len" in fields else {}
    out.update(overrides or {})
    return out


def check_overrides(overrides: dict[str, dict[str, Any]], variants: list[str], N: int) -> None:
    """Raise UsageError unless every --set names a variant of this run and a valid config field and value."""
    for name, fields in overrides.items():
        if name not in variants:
            raise UsageError(f"--set names variant {name!r}, which is not in this run ({', '.join(variants)})")
        try:
            build_config(name, **variant_fields(name, N, fields))
        except (TypeError, ValueError) as exc:
            raise UsageError(f"--set for {name}: {exc}") from None
