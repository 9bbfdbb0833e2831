"""The variant registry: register, build, list, get, and plugin loading.

Built-ins, entry-point plugins (group ``attnsuite.variants``) and modules named in the
``ATTNSUITE_PLUGINS`` environment variable are loaded once, lazily, on the first query.
A plugin that fails to import becomes a warning naming it; the built-ins keep working.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib
import importlib.util
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from variants._checks import did_you_mean
from variants.base import AttentionVariant, Capabilities, QualityKnob, VariantConfig

ENTRY_POINT_GROUP = "attnsuite.variants"
PLUGINS_ENV_VAR = "ATTNSUITE_PLUGINS"  # comma-separated module names or .py file paths
_BUILTIN_MODULES = (
    "variants.dense",
    "variants.sliding_window",
    "variants.chunked",
    "variants.linformer",
    "variants.distilled",
    "variants.window_linear",
)

_REGISTRY: dict[str, "VariantSpec"] = {}
_loaded = False


@dataclass(frozen=True)
class ConfigField:
    """One config field as the CLI and `harness list` show it."""

    name: str
    type: str
    default: Any


@dataclass(frozen=True)
class VariantSpec:
    """Everything the registry knows about a variant."""

    name: str
    cls: type[AttentionVariant]
    config: type[VariantConfig]
    capabilities: Capabilities
    backends: tuple[str, ...]
    description: str  # first line of the class docstring
    module: str

    @property
    def quality_knob(self) -> QualityKnob | None:
        """The config field that trades speed for accuracy, with its range (None: nothing to trade)."""
        return self.cls.quality_knob

    @property
    def fields(self) -> tuple[ConfigField, ...]:
        out = []
        for f in dataclasses.fields(self.config):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            out.append(ConfigField(f.name, f.type if isinstance(f.type, str) else f.type.__name__, default))
        return tuple(out)


def register_variant(name: str, *, config: type[VariantConfig] | None = None) -> Callable[[type], type]:
    """Class decorator: add an AttentionVariant subclass to the registry under `name`.

    Args:
        name: registry key, a Python identifier (e.g. "sliding_window").
        config: its frozen config dataclass (a VariantConfig subclass); default: no fields.
    Raises:
        ValueError: the name is taken by another class or is not an identifier.
        TypeError: the class is not an AttentionVariant, or config is not a VariantConfig dataclass.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"variant name must be a Python identifier like 'my_attn', got {name!r}")
    config_class = VariantConfig if config is None else config
    _check_config_class(name, config_class)

    def decorate(cls: type) -> type:
        _check_variant_class(name, cls, config_class)
        cls.variant_name = name
        cls.config_class = config_class
        doc = (cls.__doc__ or "").strip().splitlines()
        _REGISTRY[name] = VariantSpec(
            name=name,
            cls=cls,
            config=config_class,
            capabilities=cls.capabilities,
            backends=tuple(cls.backends),
            description=doc[0] if doc else "",
            module=cls.__module__,
        )
        return cls

    return decorate


def _check_config_class(name: str, config_class: Any) -> None:
    """TypeError unless `config_class` is a frozen VariantConfig dataclass (decorated itself, not only its base)."""
    if not (isinstance(config_class, type) and issubclass(config_class, VariantConfig)):
        raise TypeError(
            f"config for variant {name!r} must be a VariantConfig subclass "
            f"(a frozen, keyword-only dataclass), got {config_class!r}"
        )
    # The class itself must be decorated: a plain subclass inherits the base's (empty) field list.
    if "__dataclass_fields__" not in vars(config_class) or not config_class.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(
            f"config {config_class.__name__} for variant {name!r} must be decorated with "
            "@dataclass(frozen=True, kw_only=True)"
        )


def _check_variant_class(name: str, cls: Any, config_class: type[VariantConfig]) -> None:
    """The registration checks on the class: an AttentionVariant, a free name, and what it declares is in its config
    (a 'backend' field for its backends, an int field for its quality knob, its length fields)."""
    if not (isinstance(cls, type) and issubclass(cls, AttentionVariant)):
        raise TypeError(
            f"@register_variant({name!r}) needs a subclass of variants.AttentionVariant, "
            f"got {getattr(cls, '__qualname__', cls)!r}"
        )
    existing = _REGISTRY.get(name)
    if existing is not None and _qualname(existing.cls) != _qualname(cls):
        raise ValueError(
            f"variant name {name!r} is already registered by {_qualname(existing.cls)}; "
            f"pick another name for {_qualname(cls)}"
        )
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    if cls.backends and "backend" not in fields:
        raise TypeError(
            f"variant {name!r} declares backends {cls.backends} but its config "
            f"{config_class.__name__} has no 'backend' field"
        )
    knob = cls.quality_knob
    if knob is not None and (knob.field not in fields or fields[knob.field].type not in (int, "int")):
        raise TypeError(
            f"variant {name!r} declares quality_knob {knob.field!r}, which is not an int field of "
            f"{config_class.__name__}; name one of its int fields"
        )
    for length_field in cls.length_fields:
        if length_field not in fields:
            raise TypeError(
                f"variant {name!r} declares length_fields {length_field!r}, not a field of {config_class.__name__}"
            )


def list_variants(pattern: str = "*") -> list[str]:
    """Sorted names of registered variants matching a glob pattern (e.g. "sliding_*")."""
    _ensure_loaded()
    return sorted(n for n in _REGISTRY if fnmatch.fnmatchcase(n, pattern))


def get_variant(name: str) -> VariantSpec:
    """The spec of a registered variant; unknown names get the available list and a suggestion."""
    _ensure_loaded()
    try:
        return _REGISTRY[name]
    except KeyError:
        available = ", ".join(sorted(_REGISTRY)) or "(none)"
        raise ValueError(f"Unknown variant {name!r}. Available: {available}{did_you_mean(name, _REGISTRY)}") from None


def build_config(name: str, **fields: Any) -> VariantConfig:
    """The validated config of variant `name` with the given fields overriding defaults."""
    spec = get_variant(name)
    known = [f.name for f in dataclasses.fields(spec.config)]
    unknown = [k for k in fields if k not in known]
    if unknown:
        bad = unknown[0]
        raise TypeError(
            f"variant {name!r} has no config field {bad!r}; its fields are: "
            f"{', '.join(known) or '(none)'}{did_you_mean(bad, known)}"
        )
    return spec.config(**fields)


def build_variant(name: str, **fields: Any) -> AttentionVariant:
    """Build a registered variant as an nn.Module: build_variant("dense", backend="sdpa")."""
    return get_variant(name).cls(build_config(name, **fields))


def load_plugin(target: str) -> str:
    """Import a user's module by dotted name or a .py file by path, so its variants register.

    Returns the imported module's name. Raises ImportError with the target named. The built-ins are registered first,
    so a plugin that takes a built-in's name is the one refused.
    """
    _ensure_loaded()
    path = Path(target)
    if target.endswith(".py") or path.is_file():
        if not path.is_file():
            raise ImportError(f"plugin file {target!r} does not exist")
        module_name = f"attnsuite_plugin_{path.stem}"
        if module_name in sys.modules:
            return module_name
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot import plugin file {target!r}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[module_name]
            raise
        return module_name
    importlib.import_module(target)
    return target


def _ensure_loaded() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in _BUILTIN_MODULES:
        importlib.import_module(module)
    for label, load in _entry_point_loaders():
        _load_quietly(label, load)
    for target in filter(None, (t.strip() for t in os.environ.get(PLUGINS_ENV_VAR, "").split(","))):
        _load_quietly(target, lambda t=target: load_plugin(t))


def _entry_point_loaders() -> list[tuple[str, Callable[[], Any]]]:
    from importlib.metadata import entry_points

    return [(f"entry point {ep.name} ({ep.value})", ep.load) for ep in entry_points(group=ENTRY_POINT_GROUP)]


def _load_quietly(label: str, load: Callable[[], Any]) -> None:
    try:
        load()
    except Exception as exc:  # a broken plugin must never break the built-ins
        warnings.warn(f"attnsuite: skipped plugin {label}: {type(exc).__name__}: {exc}", stacklevel=3)


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
