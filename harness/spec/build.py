"""build_spec: embedded defaults < a TOML file < command-line flags, validated before any cell runs.

``build_spec(toml_path=..., cli={...})`` returns a ``SweepSpec`` or raises ``UsageError`` with one
line naming where the bad value came from (``--seq-lens``, ``sweep.toml: seq_lens``) and how to fix
it. Keys an executor declares (``executor_flags``: key -> flag) are carried raw in
``spec.executor_options``; harness.executors validates them, the spec does not know them.
"""

from __future__ import annotations

import math
import sys
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping

from harness.devices import default_device, device_problem, dtype_reason
from harness.entries import format_entry, split_entries
from harness.errors import UsageError
from harness.inputs import parse_inputs
from harness.knobs import knobs
from harness.plugins import load_plugins
from harness.schema import DECLARED
from harness.spec.convert import SpecError, as_list, choices
from harness.spec.presets import preset_values
from harness.spec.sweep_spec import DTYPE_ALIASES, DTYPES, RENAMED_KEYS, VARIANT_CONFIG_KEY, SweepSpec
from harness.spec.toml_io import load_toml, parse_toml
from harness.spec.variants import expand_variants, variant_config_layers
from variants._checks import did_you_mean

# what a spec file may hold (besides executor keys)
KEYS = tuple(k.key for k in knobs(SweepSpec)) + (VARIANT_CONFIG_KEY,)
FLAGS = {k.key: k.flag for k in knobs(SweepSpec) if k.flag}  # spec key -> its flag, for messages


def default_text(device: str) -> str:
    """The embedded default spec for a device type (harness/spec/cpu.toml or gpu.toml), as TOML text."""
    name = "gpu.toml" if device.startswith("cuda") else "cpu.toml"
    return resources.files("harness.spec").joinpath(name).read_text(encoding="utf-8")


def build_spec(
    *,
    toml_path: str | Path | None = None,
    toml: dict[str, Any] | None = None,
    cli: dict[str, Any] | None = None,
    plan_only: bool = False,
    executor_flags: Mapping[str, str] | None = None,
    guarded: Mapping[str, tuple[Any, ...]] | None = None,
    trust_config: bool = False,
    preset: str | None = None,
) -> SweepSpec:
    """Merge defaults < a preset (harness.spec.presets) < TOML < CLI (CLI values are the flags' raw strings) and
    validate every measurement key.

    Loads plugins first (their variants may be named). The device is checked for its form here;
    whether it exists is the executor's question (harness.executors.resolve_spec), so a GPU sweep
    can be planned anywhere (`plan_only` is kept for callers; it changes nothing here).

    Plugins a spec *file* names are code from whoever wrote the file: they are imported only when
    also given on the command line (cli "plugins") or with `trust_config`; so are the `guarded` keys
    (key -> the values a file may hold freely: a remote executor, its address, its job options), which
    a file sets only when the command line gives them too or with `trust_config`. Otherwise UsageError
    names them and how to allow them.
    """
    executor_flags = dict(executor_flags or {})
    source = str(toml_path) if toml_path is not None else "spec"
    file_values, cli = _layers(toml_path, toml, cli, source, KEYS + tuple(executor_flags))
    if not trust_config:
        _check_file_trust(source, file_values, cli, guarded or {})
    device, was_auto = _raw_device(cli, file_values, source)
    defaults = parse_toml(default_text(device))
    presets = [(f"preset {preset}", preset_values(preset))] if preset is not None else []
    layers = [("default spec", defaults), *presets, (source, file_values), ("cli", cli)]
    merged, origin = _merged(layers, {**FLAGS, **executor_flags})
    merged["device"] = device

    def where(key: str) -> str:
        return origin.get(key, f"default spec: {key}")

    try:
        load_plugins(as_list(merged.get("plugins", ())))
        return _validated(merged, defaults, where, device=device, was_auto=was_auto, executor_keys=executor_flags)
    except SpecError as exc:
        raise UsageError(str(exc)) from None


def _validated(
    merged: dict[str, Any], defaults: dict[str, Any], where, *, device: str, was_auto: bool, executor_keys
) -> SweepSpec:
    """The SweepSpec of the merged layers, every value parsed and checked (SpecError names where a bad one came from)."""
    values = _parsed_values(merged, where)
    variant_config = variant_config_layers(
        defaults.get(VARIANT_CONFIG_KEY, {}), merged.get(VARIANT_CONFIG_KEY, {}), where
    )
    problem = device_problem(device, present=False)
    if problem:
        raise SpecError(f"{where('device')}: {problem}")
    return SweepSpec(
        **values,
        device=device,
        variants=expand_variants(merged["variants"], variant_config, where("variants")),
        dtypes=_dtypes(merged["dtypes"], device, where("dtypes")),
        inputs=_inputs(merged["inputs"], where("inputs")),
        executor_options={key: merged[key] for key in executor_keys if key in merged},
        device_was_auto=was_auto,
        sources={key: where(key) for key in merged},
    )


def _layers(
    toml_path: str | Path | None, toml: dict[str, Any] | None, cli: dict[str, Any] | None, source: str, known: tuple
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The file's values (a file's, then `toml`'s on top) and the flags' (None dropped), renamed keys under their new
    names; UsageError for a key neither knows."""
    cli = {k: v for k, v in (cli or {}).items() if v is not None}
    file_values = dict(toml or {})
    if toml_path is not None:
        file_values = {**load_toml(toml_path), **file_values}
    file_values, cli = _renamed(file_values, source), _renamed(cli, "cli")
    for where, keys in ((source, file_values), ("cli", cli)):
        unknown = [k for k in keys if k not in known]
        if unknown:
            raise UsageError(
                f"{where}: unknown key {unknown[0]!r}; known keys: {', '.join(known)}{did_you_mean(unknown[0], known)}"
            )
    return file_values, cli


def _merged(
    layers: list[tuple[str, dict[str, Any]]], flags: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The (label, values) layers merged, later over earlier (defaults < preset < file < flags), and where each key's
    value came from (a flag's name, or "<label>: <key>")."""
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for label, layer in layers:
        for key, value in layer.items():
            if key == VARIANT_CONFIG_KEY and label == "default spec":
                continue  # applied below, only to the variants it names that are selected
            merged[key] = value
            origin[key] = flags.get(key, key) if label == "cli" else f"{label}: {key}"
    return merged, origin


def _parsed_values(merged: dict[str, Any], where: Callable[[str], str]) -> dict[str, Any]:
    """Every knob's value parsed by its knob, then the checks across knobs (SpecError naming where a value came from)."""
    values: dict[str, Any] = {}
    for k in knobs(SweepSpec):
        if k.parse is not None and k.key in merged:
            values[k.key] = k.parse(merged[k.key], where(k.key))
    budget, limit = values.get("time_budget_s"), values.get("cell_timeout_s")
    if budget and limit and budget >= limit:
        raise SpecError(
            f"{where('time_budget_s')} = {budget:g} s: the timing budget must be below the per-cell limit "
            f"({where('cell_timeout_s')} = {limit:g} s), which must also cover set-up, the accuracy check "
            "and the memory probe; lower the budget or raise the limit well above it"
        )
    _check_heads_and_padding(values, where)
    _check_decode(values, where)
    return values


def _renamed(values: dict[str, Any], source: str) -> dict[str, Any]:
    """The values with renamed keys (RENAMED_KEYS) under their new names, and one line on stderr naming them."""
    old = [key for key in values if key in RENAMED_KEYS]
    for key in old:
        if RENAMED_KEYS[key] in values:
            raise UsageError(
                f"{source}: both '{key}' and '{RENAMED_KEYS[key]}' are given; '{key}' is the old name of "
                f"'{RENAMED_KEYS[key]}': keep one"
            )
    if old:
        renames = ", ".join(f"'{key}' as '{RENAMED_KEYS[key]}'" for key in old)
        print(
            f"note: {source}: read the older key names {renames} (every list of a cell axis is plural now)",
            file=sys.stderr,
        )
    return {RENAMED_KEYS.get(key, key): value for key, value in values.items()}


def _check_file_trust(source: str, file_values: dict, cli: dict, guarded: Mapping[str, tuple[Any, ...]]) -> None:
    """Refuse what a spec file (not the user) asks to run or connect to: plugins the command line does not name,
    and guarded keys at other values than their harmless ones that the command line does not set itself."""

    def key(target: Any) -> str:
        path = Path(str(target))
        return str(path.resolve()) if path.suffix == ".py" else str(target)

    given = {key(g) for g in as_list(cli.get("plugins", ()))}
    plugins = [str(p) for p in as_list(file_values.get("plugins", ())) if key(p) not in given]
    settings = [
        f"{k} = {file_values[k]!r}"
        for k in guarded
        if k in file_values and k not in cli and file_values[k] not in (None, "", [], ()) + tuple(guarded[k])
    ]
    if plugins:
        flags = " ".join(f"--plugin {p}" for p in plugins)
        raise UsageError(
            f"{source} names plugins {', '.join(plugins)}: importing them runs their code; "
            f"to allow it pass {flags} (or --trust-config)"
        )
    if settings:
        raise UsageError(
            f"{source} sets {', '.join(settings)}: these run or connect to something; to take them from the file "
            "pass --trust-config, or give them on the command line"
        )


def _check_heads_and_padding(values: dict[str, Any], where: Any) -> None:
    """kv_heads must divide heads; padding > 0 needs a batch of at least 2 (the lengths are ragged over it)."""
    heads, batch = values.get("heads"), values.get("batch")
    if heads is not None and where("kv_heads").startswith("default spec"):
        # The embedded default's GQA values follow the heads a user chose: one that does not divide them becomes heads (MHA).
        values["kv_heads"] = tuple(dict.fromkeys(kv if heads % kv == 0 else heads for kv in values.get("kv_heads", ())))
    for kv in values.get("kv_heads", ()):
        if heads is not None and heads % kv:
            raise SpecError(
                f"{where('kv_heads')}: {kv} key/value heads do not divide {where('heads')} = {heads} query heads; "
                f"use a divisor of {heads}: {', '.join(str(d) for d in range(1, heads + 1) if heads % d == 0)}"
            )
    padded = [p for p in values.get("paddings", ()) if p > 0]
    if padded and batch is not None and batch < 2:
        raise SpecError(
            f"{where('paddings')} = {padded[0]:g} needs {where('batch')} >= 2 (each batch row keeps a different "
            f"length), got {batch}; raise the batch or use padding 0"
        )


def _check_decode(values: dict[str, Any], where: Any) -> None:
    """Decode is forward and causal: a spec that asks for decode with neither forward nor (when the user chose the
    causals) causal cells contradicts itself."""
    if "decode" not in values.get("phases", ()):
        return
    if "forward" not in values.get("modes", ("forward",)):
        raise SpecError(
            f"{where('phases')} has decode, which is forward only, but {where('modes')} has no forward; "
            "add forward to the modes or drop decode"
        )
    causals = values.get("causals", (True,))
    if True not in causals and not where("causals").startswith("default spec"):
        raise SpecError(
            f"{where('phases')} has decode, which is causal, but {where('causals')} = false; "
            "use causals true (or both) or drop decode"
        )


def _raw_device(cli: dict, file_values: dict, source: str) -> tuple[str, bool]:
    """The device asked for ('auto' resolved to this machine's) and whether it was 'auto'."""
    device = cli.get("device", file_values.get("device", "auto"))
    if not isinstance(device, str):
        raise UsageError(f"{source}: device must be a string like 'cpu' or 'cuda', got {device!r}")
    device = device.strip().lower()
    if device in ("auto", ""):
        return default_device(), True
    return device, False


def _dtypes(value: Any, device: str, where: str) -> tuple[str, ...]:
    dtypes = choices(DTYPES, DTYPE_ALIASES)(value, where)
    for dtype in dtypes:
        reason = dtype_reason(dtype, device)
        if reason:
            raise SpecError(f"{where}: {dtype} on {device}: {reason}")
    return dtypes


def _inputs(value: Any, where: str) -> tuple[str, ...]:
    try:
        entries = split_entries(value) if isinstance(value, str) else [str(v) for v in as_list(value, where)]
    except ValueError as exc:  # an empty item
        raise SpecError(f"{where}: {exc}") from None
    out: list[str] = []
    for text in entries:
        try:
            name, settings = parse_inputs(text)
        except ValueError as exc:
            raise SpecError(f"{where}: {exc}") from None
        for knob, value in settings.items():  # a scale of nan, 0 or -1 gives inputs no variant can be scored on
            if isinstance(value, float) and not (math.isfinite(value) and value > 0):
                raise SpecError(f"{where}: {text!r}: {knob} must be a finite number > 0, got {value!r}")
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:  # a count or an index (layer=0)
                raise SpecError(f"{where}: {text!r}: {knob} must be >= 0, got {value!r}")
        label = format_entry(name, settings)
        if label not in out:
            out.append(label)
    if not out:
        raise SpecError(f"{where}: needs at least one input distribution")
    return tuple(out)


def describe(spec: SweepSpec) -> str:
    """One line: the sweep's dimensions, one factor per Cell axis (those added later only when they vary)."""
    factors = [f"{len(spec.variants)} variants", f"{len(spec.seq_lens)} lengths"]
    for declared in DECLARED.values():
        values = getattr(spec, declared.axis) if declared.axis else None
        if values is not None and (not declared.added or len(values) > 1):
            factors.append(f"{len(values) or 1} {declared.axis.replace('_', ' ')}")
    return " x ".join(factors) + f" on {spec.device} (B={spec.batch}, H={spec.heads})"
