"""Parse and print ``name:field=value,field=value`` strings (variants and inputs with their settings), and config labels."""

from __future__ import annotations

import ast
import dataclasses
from typing import Any, Iterable


def split_entries(text: str) -> list[str]:
    """Split a comma list of entries where an entry's own settings also use commas.

    ``"dense,sliding_window:window=512,backend=banded,chunked"`` ->
    ``["dense", "sliding_window:window=512,backend=banded", "chunked"]``: a piece with "=" but
    no ":" continues the previous entry.
    Raises ValueError for an empty item ('dense,,chunked', a trailing comma).
    """
    entries: list[str] = []
    pieces = [p.strip() for p in text.split(",")]
    if len(pieces) > 1 and not all(pieces):
        raise ValueError(f"{text!r} has an empty item between commas; write e.g. dense,chunked")
    for piece in pieces:
        if not piece:
            continue
        if "=" in piece and ":" not in piece and entries and ":" in entries[-1]:
            entries[-1] += "," + piece
        else:
            entries.append(piece)
    return entries


def parse_entry(text: str) -> tuple[str, dict[str, str]]:
    """``"name:a=1,b=x"`` -> ("name", {"a": "1", "b": "x"}); raises ValueError naming the bad part (an item that is not
    field=value, a field given twice)."""
    name, _, rest = text.strip().partition(":")
    name = name.strip()
    if not name:
        raise ValueError(f"{text!r} has no name before ':'; write it as name or name:field=value,...")
    settings: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        field, eq, value = item.partition("=")
        if not eq or not field.strip():
            raise ValueError(f"{text!r}: {item!r} is not field=value; write e.g. {name}:window=512")
        if field.strip() in settings:
            raise ValueError(f"{text!r} sets {field.strip()!r} twice; give each field once")
        settings[field.strip()] = value.strip()
    return name, settings


def coerce(text: str, annotation: Any, default: Any = None) -> Any:
    """Convert a string to a field's type (from its annotation string/type, else its default's type).

    Raises ValueError naming the expected type.
    """
    kind = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    kinds = [k.strip() for k in kind.replace("Optional[", "").replace("]", "").split("|")]
    if text.lower() in ("none", "null") and ("None" in kinds or default is None):
        return None
    if default is not None and not any(k in ("bool", "int", "float", "str") for k in kinds):
        kinds = [type(default).__name__]
    for k in kinds:
        if k == "bool":
            low = text.lower()
            if low in ("true", "yes", "on", "1"):
                return True
            if low in ("false", "no", "off", "0"):
                return False
        elif k == "int":
            try:
                return int(text)
            except ValueError:
                pass
        elif k == "float":
            try:
                return float(text)
            except ValueError:
                pass
        elif k == "str":
            return text
    if any(k in ("bool", "int", "float") for k in kinds):
        raise ValueError(f"expected {' or '.join(kinds)}, got {text!r}")
    try:  # tuples, lists and other literals
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def format_entry(name: str, settings: dict[str, Any]) -> str:
    """The inverse of parse_entry for typed values: ("gaussian", {"scale": 4.0}) -> "gaussian:scale=4.0"."""
    if not settings:
        return name
    return name + ":" + ",".join(f"{k}={_text(v)}" for k, v in sorted(settings.items()))


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    return str(value)


def config_label(variant: str, config: dict[str, Any] | None, *, show: Iterable[str] = ()) -> str:
    """'variant' or 'variant(field=value,...)' naming only the fields that differ from the variant's defaults
    and those in `show` (a searched quality knob is named even at its default).

    Length fields (they follow N, e.g. Linformer's max_seq_len) are left out: they say nothing a reader needs.
    """
    defaults, length_fields = _defaults(variant)[:2]
    show = set(show)
    changed = ",".join(
        f"{k}={v}"
        for k, v in sorted((config or {}).items())
        if k not in length_fields and (k in show or defaults.get(k, object()) != v)
    )
    return f"{variant}({changed})" if changed else variant


def length_fields(variant: str) -> tuple[str, ...]:
    """The variant's config fields that follow the key length (AttentionVariant.length_fields); () if unknown here."""
    return _defaults(variant)[1]


def knob_field(variant: str) -> str | None:
    """The variant's quality knob field (AttentionVariant.quality_knob), None for exact variants or if unknown here."""
    fields = _defaults(variant)[2]
    return fields[0] if fields else None


def searched_fields(variant: str) -> tuple[str, ...]:
    """The config fields an error-budget search chooses (QualityKnob.fields: the knob's and those searched with it,
    sliding_window's window and sinks); () for exact variants or if unknown here."""
    return _defaults(variant)[2]


def added_fields(variant: str) -> dict[str, Any]:
    """The config fields declared added after runs were recorded (field metadata {"added": True}), with their
    defaults: at their default they stay out of a cell's id (harness.schema.identity); {} if unknown here."""
    return _defaults(variant)[3]


def _defaults(variant: str) -> tuple[dict[str, Any], tuple[str, ...], tuple[str, ...], dict[str, Any]]:
    """The variant's default config, length fields, searched fields and added fields; ({}, (), (), {}) for a name
    the registry does not know (a missing plugin).

    Known names are cached (labels and series keys ask for every cell); an unknown one is asked again,
    since a plugin may register it later.
    """
    from variants import get_variant  # torch: parsing an entry stays torch-free until a default is asked for

    if variant not in _DEFAULTS:
        try:
            spec = get_variant(variant)
        except (ValueError, TypeError):
            return {}, (), (), {}
        knob, config = spec.cls.quality_knob, spec.config().to_dict()
        added = {f.name: config[f.name] for f in dataclasses.fields(spec.config) if f.metadata.get("added")}
        _DEFAULTS[variant] = (config, tuple(spec.cls.length_fields), knob.fields if knob else (), added)
    return _DEFAULTS[variant]


_DEFAULTS: dict[str, tuple[dict[str, Any], tuple[str, ...], tuple[str, ...], dict[str, Any]]] = {}
