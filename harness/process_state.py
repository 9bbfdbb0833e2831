"""What a plugin could change in this process by being imported, so that built-in cells measure otherwise: a snapshot.

Three parts, compared by `changes(before, after)`: torch's global settings (default dtype and device, thread counts,
grad, anomaly and autocast modes, deterministic algorithms, matmul precision and every `torch.backends` flag); the
attributes of the modules a built-in cell runs (torch, torch.nn, torch.nn.functional and its neighbours, every loaded
module of `variants` and `harness`, torch.Tensor, torch.nn.Module and the classes those packages define), compared by
identity, and Python's builtins; and the entries of those packages' module-level dicts (the variant and input registries among them), so an
entry replaced behind `register_*` shows too. harness.plugins refuses a plugin whose import changed any of them.
"""

from __future__ import annotations

import builtins
import os
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

import torch
import torch.backends

TORCH_MODULES = (
    "torch",
    "torch.nn",
    "torch.nn.functional",
    "torch.nn.attention",
    "torch.nn.init",
    "torch.linalg",
    "torch.special",
)  # torch's modules whose functions a cell calls; torch.backends' flags are settings (below)
PACKAGES = ("variants", "harness")  # every loaded module of these, and the classes they define
TORCH_CLASSES = (torch.Tensor, torch.nn.Module)  # their methods (Tensor.softmax, Module.__call__) run in every cell
_IGNORED = frozenset({"__warningregistry__"})  # written by Python's warnings machinery, not by the plugin


@dataclass(frozen=True)
class ProcessState:
    """A snapshot: the objects themselves are kept, so an identity compared later is never a reused id."""

    settings: dict[str, Any]  # what it is ("torch.get_default_dtype()") -> its value
    attributes: dict[str, Any]  # "module.name" or "module.Class.name" -> the object
    entries: dict[str, Any]  # "module.dict[key]" -> the object


def settings() -> dict[str, Callable[[], Any]]:
    """Each global setting of torch a cell's numbers depend on, by the expression that reads it."""
    b = torch.backends
    probes: dict[str, Callable[[], Any]] = {
        "torch.get_default_dtype()": torch.get_default_dtype,
        "torch.get_default_device()": torch.get_default_device,
        "torch.get_num_threads()": torch.get_num_threads,
        "torch.get_num_interop_threads()": torch.get_num_interop_threads,
        "torch.is_grad_enabled()": torch.is_grad_enabled,
        "torch.is_anomaly_enabled()": torch.is_anomaly_enabled,
        "torch.is_autocast_enabled('cpu')": lambda: torch.is_autocast_enabled("cpu"),
        "torch.is_autocast_enabled('cuda')": lambda: torch.is_autocast_enabled("cuda"),
        "torch.are_deterministic_algorithms_enabled()": torch.are_deterministic_algorithms_enabled,
        "torch.is_deterministic_algorithms_warn_only_enabled()": torch.is_deterministic_algorithms_warn_only_enabled,
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision,
        "torch.backends.cuda.flash_sdp_enabled()": b.cuda.flash_sdp_enabled,
        "torch.backends.cuda.mem_efficient_sdp_enabled()": b.cuda.mem_efficient_sdp_enabled,
        "torch.backends.cuda.math_sdp_enabled()": b.cuda.math_sdp_enabled,
        "torch.backends.cuda.cudnn_sdp_enabled()": b.cuda.cudnn_sdp_enabled,
        "torch.backends.mha.get_fastpath_enabled()": b.mha.get_fastpath_enabled,
        "torch.backends.opt_einsum.enabled": lambda: b.opt_einsum.enabled,
        "torch.backends.opt_einsum.strategy": lambda: b.opt_einsum.strategy,
    }
    for flag in ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
        probes[f"torch.backends.cuda.matmul.{flag}"] = lambda flag=flag: getattr(b.cuda.matmul, flag)
    for name in ("cudnn", "mkldnn"):  # flags declared on their module's class: enabled, benchmark, allow_tf32, ...
        module = getattr(b, name)
        for attr, value in vars(type(module)).items():
            if isinstance(value, b.ContextProp):
                probes[f"torch.backends.{name}.{attr}"] = lambda m=module, a=attr: getattr(m, a)
            elif hasattr(value, "fp32_precision"):  # a per-operation precision (mkldnn.matmul, cudnn.conv)
                probes[f"torch.backends.{name}.{attr}.fp32_precision"] = lambda v=value: v.fp32_precision
    return probes


def snapshot() -> ProcessState:
    """The state of this process now (the environment variables, which its children inherit, among the settings)."""
    values = {what: read() for what, read in settings().items()}
    values.update({f"os.environ[{key!r}]": value for key, value in os.environ.items()})
    attributes: dict[str, Any] = {}
    entries: dict[str, Any] = {}
    for name, module in _modules():
        for attr, value in _public(vars(module)):
            attributes[f"{name}.{attr}"] = value
            if isinstance(value, type) and value.__module__ == name:
                attributes.update({f"{name}.{attr}.{a}": v for a, v in _public(vars(value))})
        if not name.startswith("torch"):  # the registries (private dicts such as _REGISTRY, _INPUTS) among them
            for attr, value in list(vars(module).items()):
                if isinstance(value, dict) and not attr.startswith("__"):
                    entries.update({f"{name}.{attr}[{k!r}]": v for k, v in list(value.items()) if isinstance(k, str)})
    for cls in TORCH_CLASSES:
        attributes.update({f"torch.{cls.__name__}.{a}": v for a, v in _public(vars(cls))})
    attributes.update({f"builtins.{a}": v for a, v in _public(vars(builtins))})  # every module's max, sum, print
    return ProcessState(values, attributes, entries)


def changes(before: ProcessState, after: ProcessState, module: str) -> list[str]:
    """What differs from `before` in `after`, one phrase each: a setting's two values, an attribute or a registry
    entry replaced or removed, and a new attribute holding an object that `module` (the plugin) defined."""
    found = [
        f"{what} from {before.settings[what]!r} to {after.settings.get(what, '(unset)')!r}"
        for what in before.settings
        if after.settings.get(what) != before.settings[what]
    ]
    found += [f"{what} set to {value!r}" for what, value in after.settings.items() if what not in before.settings]
    for kind, old, new in (("", before.attributes, after.attributes), ("entry ", before.entries, after.entries)):
        for what, value in old.items():
            if what not in new:
                found.append(f"removed {kind}{what}")
            elif new[what] is not value:
                found.append(f"replaced {kind}{what}")
        found += [f"added {kind}{what} (the plugin's)" for what, v in new.items() if what not in old and _of(v, module)]
    return found


def _modules() -> list[tuple[str, ModuleType]]:
    """The loaded modules in scope, by name."""
    found = []
    for name, module in list(sys.modules.items()):
        if isinstance(module, ModuleType) and (
            name in TORCH_MODULES or any(name == p or name.startswith(p + ".") for p in PACKAGES)
        ):
            found.append((name, module))
    return found


def _public(namespace: Any) -> list[tuple[str, Any]]:
    """A namespace's items a cell's numbers can depend on: all but private values that are not code (lazy flags such
    as `_loaded`, caches), which the harness itself rebinds."""
    return [
        (name, value)
        for name, value in list(namespace.items())
        if name not in _IGNORED and (not name.startswith("_") or callable(value) or isinstance(value, ModuleType))
    ]


def _of(value: Any, module: str) -> bool:
    """Whether `value` was defined in `module` (a function, a class, or an instance of one of its classes)."""
    owner = getattr(value, "__module__", None) if callable(value) else type(value).__module__
    return isinstance(owner, str) and (owner == module or owner.startswith(module + "."))
