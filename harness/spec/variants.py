"""Variant expansion: names and globs with overrides -> VariantEntry, configs built (so validated) by the registry."""

from __future__ import annotations

import json
from typing import Any

from harness.entries import coerce, parse_entry, split_entries
from harness.spec.convert import SpecError, as_list
from harness.spec.sweep_spec import VariantEntry
from variants import build_config, get_variant, list_variants
from variants._checks import did_you_mean


def variant_config_layers(defaults: dict, given: Any, where) -> dict[str, dict[str, Any]]:
    """Per-variant config overrides: the embedded defaults' (for registered variants), then the user's."""
    if not isinstance(given, dict):
        raise SpecError(f"{where('variant_config')}: expected a table of variant -> {{field = value}}, got {given!r}")
    registered = set(list_variants())
    out = {name: dict(fields) for name, fields in defaults.items() if name in registered}
    for name, fields in given.items():
        if name not in registered:
            raise SpecError(
                f"{where('variant_config')}: unknown variant {name!r}; available: {', '.join(sorted(registered))}{did_you_mean(name, registered)}"
            )
        if not isinstance(fields, dict):
            raise SpecError(f"{where('variant_config')}.{name}: expected a table of field = value, got {fields!r}")
        out.setdefault(name, {}).update(fields)
    return out


def expand_variants(value: Any, variant_config: dict[str, dict[str, Any]], where: str) -> tuple[VariantEntry, ...]:
    """Expand names and globs, apply variant_config then the entry's own fields, build each config."""
    try:
        if isinstance(value, str):
            items: list[Any] = split_entries(value)
        else:
            items = []
            for item in as_list(value):
                items.extend(split_entries(item) if isinstance(item, str) else [item])
    except ValueError as exc:  # an empty item
        raise SpecError(f"{where}: {exc}") from None
    if not items:
        raise SpecError(f"{where}: needs at least one variant (a name, a glob like 'sliding_*', or '*')")
    entries: list[VariantEntry] = []
    for item in items:
        if isinstance(item, dict):  # TOML inline table: {name = "sliding_window", window = 512}
            item = dict(item)
            pattern = item.pop("name", None)
            if not isinstance(pattern, str):
                raise SpecError(f'{where}: a variant table needs name = "...", got {item!r}')
            typed, raw = item, {}
        else:
            try:
                pattern, raw = parse_entry(str(item))
            except ValueError as exc:
                raise SpecError(f"{where}: {exc}") from None
            typed = {}
        names = list_variants(pattern) if any(c in pattern for c in "*?[") else [pattern]
        if not names:
            raise SpecError(
                f"{where}: no registered variant matches {pattern!r}; available: {', '.join(list_variants())}"
            )
        for name in names:
            try:
                spec = get_variant(name)
            except ValueError as exc:
                raise SpecError(f"{where}: {exc}") from None
            fields = {f.name: f for f in spec.fields}
            overrides = dict(variant_config.get(name, {}))
            overrides.update(typed)
            for key, text in raw.items():
                if key in fields:
                    try:
                        overrides[key] = coerce(text, fields[key].type, fields[key].default)
                    except ValueError as exc:
                        raise SpecError(f"{where}: {name}:{key}={text}: {exc}") from None
                else:
                    overrides[key] = text  # build_config names the unknown field below
            entries.append(_entry(name, overrides, where))
    unique: dict[str, VariantEntry] = {}
    for entry in entries:
        unique.setdefault(json.dumps([entry.name, entry.config], sort_keys=True, default=str), entry)
    return tuple(unique.values())


def _entry(name: str, overrides: dict[str, Any], where: str) -> VariantEntry:
    try:
        config = build_config(name, **overrides)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"{where}: {name}: {exc}") from None
    return VariantEntry(name=name, overrides=overrides, config=config.to_dict())
