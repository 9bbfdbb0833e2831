"""The sweep spec: embedded defaults < a TOML file < command-line flags, validated before any cell runs.

``build_spec(toml_path=..., cli={...})`` returns a ``SweepSpec`` or raises ``UsageError`` with one
line naming where the bad value came from (``--seq-lens``, ``sweep.toml: seq_lens``) and how to
fix it. ``spec_to_toml(spec)`` writes the effective spec (``spec.toml`` in a run folder), which
``build_spec(toml_path=...)`` reads back to the same spec, so ``--resume`` replays it exactly.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness._named import coerce, format_entry, parse_entry, split_entries
from harness.executors import REMOTE as _REMOTE

DTYPES = ("float32", "bfloat16", "float16")
DTYPE_ALIASES = {"fp32": "float32", "f32": "float32", "bf16": "bfloat16", "fp16": "float16", "f16": "float16", "half": "float16"}
MODES = ("forward", "train")
MODE_ALIASES = {"fwd": "forward", "training": "train", "backward": "train", "bwd": "train"}
ACCURACY_REFERENCES = ("full", "pattern")

# The embedded defaults, one per device type: the file format users write, so they read as an example.
CPU_DEFAULT = """\
# CPU default: ~2.5 minutes on 2 cores; N from 256 to 8192 shows where the linear-time variants overtake dense.
variants = ["*"]                 # every registered variant (built-ins and plugins), default configs
seq_lens = [256, 512, 1024, 2048, 4096, 8192]
batch = 1
heads = 8
head_dims = [64]
dtypes = ["float32"]
causal = [false]
modes = ["forward"]
inputs = ["gaussian", "local"]   # iid (diffuse attention) and positional (attention near the diagonal)
seed = 0
time_budget_s = 0.25             # seconds of timing per cell (torch.utils.benchmark blocked_autorange)
repeats = 2                      # at least this many timed calls per cell
cell_timeout_s = 120.0           # a cell still running after this becomes a `timeout` row
error_rows = 256                 # query rows sampled for the float64 accuracy check (first and last included)
calibration_steps = 50           # Adam steps for learnable variants (a third of variants.calibrate's default, for CPU time)
calibration_batches = 4          # distinct calibration batches, from seeds other than the evaluation's
calibration_max_seq_len = 256    # calibrate at min(N, this): one fit per series on CPU (variants.calibrate's default length)
accuracy_reference = "full"      # full: error vs exact softmax attention | pattern: vs the variant's own sparsity pattern

[variant_config.linformer]
max_seq_len = 8192               # Linformer's projections must cover the longest N
"""

GPU_DEFAULT = """\
# GPU default: N from 1K to 64K in bf16, head dims 64 and 128, causal and not, forward and training.
variants = ["*"]
seq_lens = [1024, 2048, 4096, 8192, 16384, 32768, 65536]
batch = 1
heads = 16
head_dims = [64, 128]
dtypes = ["bfloat16"]
causal = [false, true]
modes = ["forward", "train"]
inputs = ["gaussian"]
seed = 0
time_budget_s = 0.1              # triton.testing.do_bench's rep (L2 flushed between calls)
repeats = 10
cell_timeout_s = 300.0
error_rows = 256
calibration_steps = 150
calibration_batches = 4
calibration_max_seq_len = 4096
accuracy_reference = "full"

[variant_config.linformer]
max_seq_len = 65536
"""

KEYS = (
    "device", "variants", "variant_config", "seq_lens", "batch", "heads", "head_dims", "dtypes", "causal", "modes",
    "inputs", "seed", "time_budget_s", "repeats", "cell_timeout_s", "error_rows", "calibration_steps",
    "calibration_batches", "calibration_max_seq_len", "accuracy_reference", "plugins",
) + ("executor", "ray_address", "cpus_per_cell", "max_parallel", "slurm_cluster", "slurm_partition", "slurm_time_min",
     "slurm_gpus_per_task", "slurm_extra")
# Keys that say where cells run, not what they measure: --resume accepts these flags.
EXECUTOR_KEYS = KEYS[-9:]
# `sweep` flag dest -> spec key; flags default to None so the TOML and the defaults show through.
FLAG_DESTS = {
    "device": "device", "variants": "variants", "seq_lens": "seq_lens", "batch": "batch", "heads": "heads",
    "head_dim": "head_dims", "dtypes": "dtypes", "causal": "causal", "modes": "modes", "inputs": "inputs",
    "seed": "seed", "time_budget": "time_budget_s", "repeats": "repeats", "timeout": "cell_timeout_s",
    "error_rows": "error_rows", "calibration_steps": "calibration_steps", "plugin": "plugins",
    "executor": "executor", "ray_address": "ray_address", "cpus_per_cell": "cpus_per_cell", "max_parallel": "max_parallel",
    "slurm_cluster": "slurm_cluster", "slurm_partition": "slurm_partition", "slurm_time": "slurm_time_min",
    "slurm_gpus_per_task": "slurm_gpus_per_task", "slurm_extra": "slurm_extra",
}
CLI_FLAGS = {key: "--" + dest.replace("_", "-") for dest, key in FLAG_DESTS.items()}  # spec key -> its flag, for error messages


@dataclass(frozen=True)
class VariantEntry:
    """One variant to sweep: its registry name, the config fields set for it, and the full config."""

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)  # fields given by the user (or a default)
    config: dict[str, Any] = field(default_factory=dict)  # asdict of the validated config

    @property
    def label(self) -> str:
        """``name`` or ``name:field=value,...`` (the overrides), as written on the command line."""
        return format_entry(self.name, self.overrides)


@dataclass(frozen=True, kw_only=True)
class SweepSpec:
    """What a sweep measures; every field validated by build_spec."""

    device: str  # "cpu", "cuda" or "cuda:<index>"
    variants: tuple[VariantEntry, ...]  # expanded from names/globs, configs validated
    seq_lens: tuple[int, ...]  # N (= M: self-attention)
    batch: int  # B
    heads: int  # H
    head_dims: tuple[int, ...]  # D values
    dtypes: tuple[str, ...]  # "float32" | "bfloat16" | "float16"
    causal: tuple[bool, ...]  # causal settings to sweep
    modes: tuple[str, ...]  # "forward" (no grad) | "train" (forward + backward)
    inputs: tuple[str, ...]  # input distributions, "name" or "name:knob=value"
    seed: int  # evaluation seed; calibration uses seed + CALIBRATION_SEED_OFFSET + i
    time_budget_s: float  # seconds of timing per cell
    repeats: int  # minimum timed calls per cell
    cell_timeout_s: float | None  # per-cell limit (None: none)
    error_rows: int  # query rows sampled for accuracy
    calibration_steps: int  # optimizer steps for learnable variants
    calibration_batches: int  # calibration batches (other seeds)
    calibration_max_seq_len: int  # calibration length is min(N, this)
    accuracy_reference: str  # "full" | "pattern"
    plugins: tuple[str, ...] = ()  # modules or .py files imported first
    # Where cells run (harness.executors); none of these changes a cell or its id.
    executor: str = "local"  # "local" | "subprocess" | "ray" | "slurm"
    ray_address: str | None = None  # ray: a running cluster to join ("auto", "ray://host:10001"); None: start a local instance
    cpus_per_cell: int = 1  # ray, slurm: CPUs reserved per cell (and torch threads of a CPU cell)
    max_parallel: int | None = None  # ray, slurm: most cells running at once (None: ray, every slot; slurm, submitit's 256)
    slurm_cluster: str = "slurm"  # "slurm", or "local": submitit's local processes, to try a setup on one machine
    slurm_partition: str | None = None  # Slurm partition (None: the cluster's default)
    slurm_time_min: int | None = None  # Slurm time limit per task, minutes (None: from cell_timeout_s)
    slurm_gpus_per_task: int | None = None  # GPUs per task (None: 1 for a CUDA sweep, 0 for CPU)
    slurm_extra: tuple[str, ...] = ()  # more sbatch options as "key=value" (account=..., qos=..., constraint=a100)

    @property
    def device_type(self) -> str:
        return self.device.split(":")[0]


def default_device() -> str:
    """"cuda" when a CUDA device is present, else "cpu"."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file; a syntax error becomes UsageError with the file, line and column."""
    from harness.cli import UsageError

    tomllib = _tomllib()
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--config {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: malformed TOML: {exc}") from None


def build_spec(
    *, toml_path: str | Path | None = None, toml: dict[str, Any] | None = None, cli: dict[str, Any] | None = None, plan_only: bool = False
) -> SweepSpec:
    """Merge defaults < TOML < CLI (CLI values are the flags' raw strings) and validate everything.

    Loads plugins first (their variants may be named). `plan_only` (--dry-run) accepts a CUDA
    device that is not present, so a GPU sweep can be planned anywhere. Raises UsageError with one line.
    """
    from harness.cli import UsageError

    cli = {k: v for k, v in (cli or {}).items() if v is not None}
    source = str(toml_path) if toml_path is not None else "spec"
    file_values = dict(toml or {})
    if toml_path is not None:
        file_values = {**load_toml(toml_path), **file_values}
    unknown = [k for k in file_values if k not in KEYS]
    if unknown:
        from variants._checks import did_you_mean

        raise UsageError(f"{source}: unknown key {unknown[0]!r}; known keys: {', '.join(KEYS)}{did_you_mean(unknown[0], KEYS)}")
    origin: dict[str, str] = {}
    executor = _raw_executor(cli, file_values, source, plan_only)
    device = _raw_device(cli, file_values, source, executor)
    defaults = _tomllib().loads(GPU_DEFAULT if device.startswith("cuda") else CPU_DEFAULT)
    merged: dict[str, Any] = {}
    for label, layer in (("default spec", defaults), (source, file_values), ("cli", cli)):
        for key, value in layer.items():
            if key == "variant_config" and label == "default spec":
                continue  # applied below, only to the variants it names that are selected
            merged[key] = value
            origin[key] = CLI_FLAGS.get(key, key) if label == "cli" else f"{label}: {key}"
    merged["device"] = device

    def where(key: str) -> str:
        return origin.get(key, f"default spec: {key}")

    try:
        _load_plugins(merged.get("plugins", ()))
        variant_config = _variant_config_layers(defaults.get("variant_config", {}), merged.get("variant_config", {}), where)
        return SweepSpec(
            device=_device(device, where("device"), present=not plan_only and executor not in _REMOTE, executor=executor),
            variants=_variants(merged["variants"], variant_config, where("variants")),
            seq_lens=tuple(_positive_ints(merged["seq_lens"], where("seq_lens"), lengths=True)),
            batch=_positive_int(merged["batch"], where("batch")),
            heads=_positive_int(merged["heads"], where("heads")),
            head_dims=tuple(_positive_ints(merged["head_dims"], where("head_dims"))),
            dtypes=_dtypes(merged["dtypes"], device, where("dtypes")),
            causal=_causal(merged["causal"], where("causal")),
            modes=_choices(merged["modes"], MODES, MODE_ALIASES, where("modes")),
            inputs=_inputs(merged["inputs"], where("inputs")),
            seed=_int(merged["seed"], where("seed"), minimum=0),
            time_budget_s=_number(merged["time_budget_s"], where("time_budget_s"), positive=True),
            repeats=_positive_int(merged["repeats"], where("repeats")),
            cell_timeout_s=_timeout(merged.get("cell_timeout_s"), where("cell_timeout_s")),
            error_rows=_int(merged["error_rows"], where("error_rows"), minimum=2),
            calibration_steps=_int(merged["calibration_steps"], where("calibration_steps"), minimum=0),
            calibration_batches=_positive_int(merged["calibration_batches"], where("calibration_batches")),
            calibration_max_seq_len=_positive_int(merged["calibration_max_seq_len"], where("calibration_max_seq_len")),
            accuracy_reference=_choices(merged["accuracy_reference"], ACCURACY_REFERENCES, {}, where("accuracy_reference"))[0],
            plugins=tuple(_as_list(merged.get("plugins", ()))),
            **_executor_fields(executor, merged, where, device, plan_only),
        )
    except _SpecError as exc:
        raise UsageError(str(exc)) from None


def spec_to_toml(spec: SweepSpec) -> str:
    """The effective spec as TOML (variants expanded, plugins as absolute paths where they are files)."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        if f.name == "variants":
            value = [entry.label for entry in value]
        elif f.name == "plugins":
            value = [str(Path(p).resolve()) if Path(p).is_file() else p for p in value]
        values[f.name] = value
    lines = ["# The effective sweep spec of this run (defaults < TOML < CLI); `--config` or `--resume` reads it back."]
    for key, value in values.items():
        if value is None:
            lines.append(f"# {key} = (none)")
            continue
        lines.append(f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def describe(spec: SweepSpec) -> str:
    """One line: the sweep's dimensions."""
    return (
        f"{len(spec.variants)} variants x {len(spec.seq_lens)} lengths x {len(spec.head_dims)} head dims x "
        f"{len(spec.dtypes)} dtypes x {len(spec.causal)} causal x {len(spec.modes)} modes x {len(spec.inputs)} inputs "
        f"on {spec.device} (B={spec.batch}, H={spec.heads})"
    )


# ---- validation helpers: each raises _SpecError("<where>: <what>; <fix>") -----------------------------
class _SpecError(ValueError):
    pass


def _as_list(value: Any) -> list:
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [value]


def _raw_device(cli: dict, file_values: dict, source: str, executor: str = "local") -> str:
    from harness.cli import UsageError

    device = cli.get("device", file_values.get("device", "auto"))
    if not isinstance(device, str):
        raise UsageError(f"{source}: device must be a string like 'cpu' or 'cuda', got {device!r}")
    device = device.strip().lower()
    if device in ("auto", "") and executor == "slurm":
        raise UsageError("--executor slurm: say which device the tasks use, --device cuda or --device cpu "
                         "(this machine's own device says nothing about the compute nodes)")
    return default_device() if device in ("auto", "") else device


def device_problem(device: str, *, present: bool = True) -> str | None:
    """Why `device` is not 'cpu', 'cuda' or 'cuda:<index>' (and, if `present`, a CUDA device this machine has), or None."""
    import torch

    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and (kind == "cpu" or not index.isdigit())):
        return f"device must be 'cpu', 'cuda' or 'cuda:<index>', got {device!r}"
    if kind == "cuda" and present:
        if not torch.cuda.is_available():
            return f"CUDA is not available here (torch {torch.__version__}); use --device cpu"
        if index and int(index) >= torch.cuda.device_count():
            return f"{device!r} does not exist; this machine has {torch.cuda.device_count()} CUDA device(s)"
    return None


def _device(device: str, where: str, *, present: bool = True, executor: str = "local") -> str:
    problem = device_problem(device, present=False)
    if problem is None and device.partition(":")[2] and executor in _REMOTE:
        problem = f"{device!r} with --executor {executor}: {executor} gives each cell its own GPU; use --device cuda"
    problem = problem or device_problem(device, present=present)
    if problem:
        raise _SpecError(f"{where}: {problem}")
    return device


def _raw_executor(cli: dict, file_values: dict, source: str, plan_only: bool) -> str:
    """The executor named by --executor or the TOML (default local); its package must be installed unless planning."""
    from harness.cli import UsageError
    from harness.executors import EXECUTORS, missing_package
    from variants._checks import did_you_mean

    raw = cli.get("executor", file_values.get("executor", "local"))
    where = "--executor" if "executor" in cli else f"{source}: executor"
    name = str(raw).strip().lower()
    if name not in EXECUTORS:
        raise UsageError(f"{where}: unknown executor {raw!r}; expected one of {', '.join(EXECUTORS)}{did_you_mean(name, EXECUTORS)}")
    missing = missing_package(name)
    if missing and not plan_only:
        raise UsageError(missing)
    return name


def _executor_fields(executor: str, merged: dict, where, device: str, plan_only: bool) -> dict[str, Any]:
    """Validate the executor's own settings; a setting for another executor is refused (it would be silently ignored)."""
    import shutil

    from harness.executors.slurm import CLUSTERS

    def optional_int(key: str, minimum: int) -> int | None:
        value = merged.get(key)
        if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
            return None
        return _int(value, where(key), minimum=minimum)

    fields: dict[str, Any] = {"executor": executor}
    address = merged.get("ray_address")
    fields["ray_address"] = None if address in (None, "") else str(address).strip()
    fields["cpus_per_cell"] = _int(merged.get("cpus_per_cell", 1), where("cpus_per_cell"), minimum=1)
    fields["max_parallel"] = optional_int("max_parallel", 1)
    fields["slurm_cluster"] = _choices(merged.get("slurm_cluster", "slurm"), CLUSTERS, {}, where("slurm_cluster"))[0]
    partition = merged.get("slurm_partition")
    fields["slurm_partition"] = None if partition in (None, "") else str(partition).strip()
    fields["slurm_time_min"] = optional_int("slurm_time_min", 1)
    fields["slurm_gpus_per_task"] = optional_int("slurm_gpus_per_task", 0)
    extra = []
    items = [part for item in _as_list(merged.get("slurm_extra", ())) for part in _as_list(str(item))]  # repeated flags too
    for item in items:
        key, eq, value = str(item).partition("=")
        if not eq or not key.strip() or not value.strip():
            raise _SpecError(f"{where('slurm_extra')}: {item!r} is not key=value; write e.g. account=myproject,qos=high")
        extra.append(f"{key.strip()}={value.strip()}")
    fields["slurm_extra"] = tuple(extra)
    defaults = {"ray_address": None, "cpus_per_cell": 1, "max_parallel": None, "slurm_cluster": "slurm", "slurm_partition": None,
                "slurm_time_min": None, "slurm_gpus_per_task": None, "slurm_extra": ()}
    for key, default in defaults.items():
        users = ("ray",) if key == "ray_address" else ("slurm",) if key.startswith("slurm_") else ("ray", "slurm")
        if fields[key] != default and executor not in users:
            named = " or ".join(f"--executor {u}" for u in users)
            raise _SpecError(f"{where(key)}: only applies to {named}, not --executor {executor}; drop it or choose that executor")
    if executor == "slurm":
        if device.startswith("cuda") and fields["slurm_gpus_per_task"] == 0:
            raise _SpecError(f"{where('slurm_gpus_per_task')}: a CUDA sweep needs a GPU per task, got 0; use 1 or --device cpu")
        if fields["slurm_cluster"] == "slurm" and not plan_only and shutil.which("sbatch") is None:
            raise _SpecError("--executor slurm: no sbatch on PATH; run the sweep on a Slurm login node "
                             "(or try the setup here with --slurm-cluster local)")
    return fields


def _int(value: Any, where: str, *, minimum: int | None = None) -> int:
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise _SpecError(f"{where}: expected an integer, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _SpecError(f"{where}: expected an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise _SpecError(f"{where}: must be >= {minimum}, got {value}")
    return value


def _positive_int(value: Any, where: str) -> int:
    return _int(value, where, minimum=1)


def _number(value: Any, where: str, *, positive: bool = False) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise _SpecError(f"{where}: expected a number, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _SpecError(f"{where}: expected a number, got {value!r}")
    if positive and not value > 0:
        raise _SpecError(f"{where}: must be > 0, got {value}")
    return float(value)


def _timeout(value: Any, where: str) -> float | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "0", "off")) or value == 0:
        return None
    return _number(value, where, positive=True)


def _length(item: Any, where: str) -> list[int]:
    """One seq-len item: 4096, "4k", or a doubling range "256..8192"."""
    if isinstance(item, str):
        text = item.strip().lower()
        if ".." in text:
            lo, _, hi = text.partition("..")
            start, stop = _length(lo, where)[0], _length(hi, where)[0]
            if stop < start:
                raise _SpecError(f"{where}: range {item!r} runs backwards; write low..high, e.g. 256..8192")
            out = [start]
            while out[-1] * 2 <= stop:
                out.append(out[-1] * 2)
            return out
        scale = 1024 if text.endswith("k") else 1
        try:
            return [int(text[:-1] if scale > 1 else text) * scale]
        except ValueError:
            raise _SpecError(f"{where}: {item!r} is not a length; write e.g. 1024, 4k or 256..8192") from None
    if isinstance(item, bool) or not isinstance(item, int):
        raise _SpecError(f"{where}: {item!r} is not a length; write e.g. 1024, 4k or 256..8192")
    return [item]


def _positive_ints(value: Any, where: str, *, lengths: bool = False) -> list[int]:
    items = _as_list(value)
    if not items:
        raise _SpecError(f"{where}: needs at least one value")
    out: list[int] = []
    for item in items:
        numbers = _length(item, where) if lengths else [_int(item, where)]
        for n in numbers:
            if n < 1:
                what = "sequence lengths" if lengths else "values"
                raise _SpecError(f"{where}: {what} must be positive integers, got {n}")
            if n not in out:
                out.append(n)
    return out


def _choices(value: Any, choices: tuple[str, ...], aliases: dict[str, str], where: str) -> tuple[str, ...]:
    from variants._checks import did_you_mean

    out: list[str] = []
    items = _as_list(value)
    if not items:
        raise _SpecError(f"{where}: needs at least one of {', '.join(choices)}")
    for item in items:
        name = aliases.get(str(item).strip().lower(), str(item).strip().lower())
        if name not in choices:
            raise _SpecError(f"{where}: unknown value {item!r}; expected one of {', '.join(choices)}{did_you_mean(item, choices)}")
        if name not in out:
            out.append(name)
    return tuple(out)


def dtype_reason(dtype: str, device: str) -> str | None:
    """Why `dtype` cannot be swept on `device` here, or None."""
    import torch

    if device.startswith("cuda"):
        if dtype == "bfloat16" and torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
            return "this GPU has no bfloat16 support (compute capability 8.0+); use float16 or float32"
        return None
    if dtype == "float16":
        return "the CPU has no fast float16 matmul, so timings would measure a slow fallback; use float32 or bfloat16 on cpu"
    return None


def _dtypes(value: Any, device: str, where: str) -> tuple[str, ...]:
    dtypes = _choices(value, DTYPES, DTYPE_ALIASES, where)
    for dtype in dtypes:
        reason = dtype_reason(dtype, device)
        if reason:
            raise _SpecError(f"{where}: {dtype} on {device}: {reason}")
    return dtypes


def _causal(value: Any, where: str) -> tuple[bool, ...]:
    if isinstance(value, str) and value.strip().lower() == "both":
        return (False, True)
    out: list[bool] = []
    for item in _as_list(value):
        if isinstance(item, str):
            low = item.strip().lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise _SpecError(f"{where}: expected true, false or both, got {item!r}")
            item = low in ("true", "1", "yes")
        if not isinstance(item, bool):
            raise _SpecError(f"{where}: expected true, false or both, got {item!r}")
        if item not in out:
            out.append(item)
    if not out:
        raise _SpecError(f"{where}: needs true, false or both")
    return tuple(out)


def _inputs(value: Any, where: str) -> tuple[str, ...]:
    from harness.inputs import parse_inputs

    entries = split_entries(value) if isinstance(value, str) else [str(v) for v in _as_list(value)]
    out: list[str] = []
    for text in entries:
        try:
            name, knobs = parse_inputs(text)
        except ValueError as exc:
            raise _SpecError(f"{where}: {exc}") from None
        label = format_entry(name, knobs)
        if label not in out:
            out.append(label)
    if not out:
        raise _SpecError(f"{where}: needs at least one input distribution")
    return tuple(out)


def _variant_config_layers(defaults: dict, given: Any, where) -> dict[str, dict[str, Any]]:
    """Per-variant config overrides: the embedded defaults' (for registered variants), then the user's."""
    from variants import list_variants

    if not isinstance(given, dict):
        raise _SpecError(f"{where('variant_config')}: expected a table of variant -> {{field = value}}, got {given!r}")
    registered = set(list_variants())
    out = {name: dict(fields) for name, fields in defaults.items() if name in registered}
    for name, fields in given.items():
        if name not in registered:
            from variants._checks import did_you_mean

            raise _SpecError(f"{where('variant_config')}: unknown variant {name!r}; available: {', '.join(sorted(registered))}{did_you_mean(name, registered)}")
        if not isinstance(fields, dict):
            raise _SpecError(f"{where('variant_config')}.{name}: expected a table of field = value, got {fields!r}")
        out.setdefault(name, {}).update(fields)
    return out


def _variants(value: Any, variant_config: dict[str, dict[str, Any]], where: str) -> tuple[VariantEntry, ...]:
    """Expand names and globs, apply variant_config then the entry's own fields, build each config."""
    from variants import get_variant, list_variants

    if isinstance(value, str):
        items: list[Any] = split_entries(value)
    else:
        items = []
        for item in _as_list(value):
            items.extend(split_entries(item) if isinstance(item, str) else [item])
    if not items:
        raise _SpecError(f"{where}: needs at least one variant (a name, a glob like 'sliding_*', or '*')")
    entries: list[VariantEntry] = []
    for item in items:
        if isinstance(item, dict):  # TOML inline table: {name = "sliding_window", window = 512}
            item = dict(item)
            pattern = item.pop("name", None)
            if not isinstance(pattern, str):
                raise _SpecError(f"{where}: a variant table needs name = \"...\", got {item!r}")
            typed, raw = item, {}
        else:
            try:
                pattern, raw = parse_entry(str(item))
            except ValueError as exc:
                raise _SpecError(f"{where}: {exc}") from None
            typed = {}
        names = list_variants(pattern) if any(c in pattern for c in "*?[") else [pattern]
        if not names:
            raise _SpecError(f"{where}: no registered variant matches {pattern!r}; available: {', '.join(list_variants())}")
        for name in names:
            try:
                spec = get_variant(name)
            except ValueError as exc:
                raise _SpecError(f"{where}: {exc}") from None
            fields = {f.name: f for f in spec.fields}
            overrides = dict(variant_config.get(name, {}))
            overrides.update(typed)
            for key, text in raw.items():
                if key in fields:
                    try:
                        overrides[key] = coerce(text, fields[key].type, fields[key].default)
                    except ValueError as exc:
                        raise _SpecError(f"{where}: {name}:{key}={text}: {exc}") from None
                else:
                    overrides[key] = text  # build_config names the unknown field below
            entries.append(_entry(name, overrides, where))
    unique: dict[str, VariantEntry] = {}
    for entry in entries:
        unique.setdefault(json.dumps([entry.name, entry.config], sort_keys=True, default=str), entry)
    return tuple(unique.values())


def _entry(name: str, overrides: dict[str, Any], where: str) -> VariantEntry:
    from variants import build_config

    try:
        config = build_config(name, **overrides)
    except (TypeError, ValueError) as exc:
        raise _SpecError(f"{where}: {name}: {exc}") from None
    return VariantEntry(name=name, overrides=overrides, config=config.to_dict())


def _load_plugins(plugins: Any) -> None:
    from harness.cli import load_plugins  # raises UsageError naming the plugin, like every command

    load_plugins(_as_list(plugins))


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


def _tomllib():
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    return tomllib
