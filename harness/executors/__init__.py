"""Executors: where a sweep's cells run. They only move cells out and rows back; measuring is one function.

- ``local`` (default): in the driver, one cell after another (concurrent cells on one device would
  spoil each other's timings).
- ``subprocess``: each cell in a fresh child process on this machine (a segfault becomes a row).
- ``ray``: Ray core tasks, one whole GPU per cell (``num_gpus=1``), or ``cpus_per_cell`` CPUs on CPU sweeps.
- ``slurm``: submitit job arrays on a Slurm cluster (or submitit's local mode).

Every executor runs :func:`harness.executors.worker.run_cell` for a cell; the driver loop
(:func:`harness.executors.drive.run_cells`) pulls cells lazily in plan order, keeps at most
``executor.slots`` in flight, hands each finished row to the sweep (the only writer of rows.jsonl)
and asks the sweep's `skip` for each queued cell, which drops longer cells of a series after an OOM,
a timeout or an unreachable error budget (harness.runner.blocked.BLOCKING). A lost task (a killed
worker, a node gone, a cell past its hard limit) comes back as a row too.

Each executor owns its options (a dataclass of knob fields, ``Executor.options``) and checks them
with the spec in :func:`resolve_spec`; the spec carries them raw and knows none of them.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from typing import Any

from harness.errors import UsageError
from harness.executors.base import Executor, ParallelOptions, SequentialExecutor, hard_limit_s
from harness.executors.drive import run_cells
from harness.executors.worker import CellJob
from harness.knobs import Knob, knobs
from harness.spec.convert import SpecError
from harness.spec.inputs_fit import check_inputs_fit
from variants._checks import did_you_mean

# name -> (module, class name, one line for --help)
EXECUTORS: dict[str, tuple[str, str, str]] = {
    "local": ("harness.executors.local", "LocalExecutor", "in this process, one cell after another (default)"),
    "subprocess": ("harness.executors.isolated", "SubprocessExecutor", "each cell in its own process on this machine"),
    "ray": ("harness.executors.ray_executor", "RayExecutor", "Ray tasks: one GPU (or --cpus-per-cell CPUs) per cell"),
    "slurm": ("harness.executors.slurm_executor", "SlurmExecutor", "submitit job arrays on a Slurm cluster"),
}

__all__ = [
    "CellJob",
    "EXECUTORS",
    "Executor",
    "SequentialExecutor",
    "executor_class",
    "guarded_keys",
    "hard_limit_s",
    "make_executor",
    "missing_package",
    "option_knobs",
    "resolve_spec",
    "run_cells",
]


def executor_class(name: str) -> type[Executor]:
    """The class of a registered executor (its module is imported; engines themselves are imported only when used)."""
    module_name, class_name, _ = EXECUTORS[name]
    return getattr(importlib.import_module(module_name), class_name)


def option_knobs() -> dict[str, tuple[Knob, tuple[str, ...]]]:
    """Every executor option: key -> (its knob, the executors that take it), in declaration order."""
    out: dict[str, tuple[Knob, tuple[str, ...]]] = {}
    for name in EXECUTORS:
        for k in knobs(executor_class(name).options):
            users = out[k.key][1] if k.key in out else ()
            out[k.key] = (k, users + (name,))
    return out


def guarded_keys() -> dict[str, tuple[Any, ...]]:
    """Settings that run or connect to something -> the values a spec file may hold without --trust-config.

    The executor (a remote one reaches other machines) and a remote executor's own options (ray_address, every
    slurm_* key: they reach a cluster or a job script); the parallel options (cpus_per_cell, max_parallel) only
    size what an executor does and are free.
    """
    guarded: dict[str, tuple[Any, ...]] = {"executor": tuple(n for n in EXECUTORS if not executor_class(n).remote)}
    shared = {f.name for f in dataclasses.fields(ParallelOptions)}
    for key, (k, users) in option_knobs().items():
        if key not in shared and any(executor_class(u).remote for u in users):
            guarded[key] = (_default(k, users),)
    return guarded


def missing_package(executor: str) -> str | None:
    """One line naming the install command when `executor` needs a package that is not installed, else None."""
    package = executor_class(executor).package if executor in EXECUTORS else None
    if package is None or importlib.util.find_spec(package[0]) is not None:
        return None
    return f"--executor {executor} needs the {package[0]!r} package, which is not installed here; {package[1]}"


def resolve_spec(spec: Any, *, plan_only: bool = False) -> Any:
    """The spec with its executor checked and its options typed (spec.executor_options: this executor's own).

    An option of another executor that is set to a non-default value is refused (it would be
    silently ignored); so are a missing engine package (unless only planning) and what the
    executor cannot do with the spec's device. Raises UsageError with one line.
    """
    name = spec.executor
    where = spec.where("executor")
    if name not in EXECUTORS:
        raise UsageError(
            f"{where}: unknown executor {name!r}; expected one of {', '.join(EXECUTORS)}{did_you_mean(name, EXECUTORS)}"
        )
    missing = missing_package(name)
    if missing and not plan_only:
        raise UsageError(missing)
    cls = executor_class(name)
    own = {k.key for k in knobs(cls.options)}
    try:
        typed: dict[str, Any] = {}
        for key, (k, users) in option_knobs().items():
            if key not in spec.executor_options:
                continue
            value = k.parse(spec.executor_options[key], spec.where(key)) if k.parse else spec.executor_options[key]
            if key in own:
                typed[key] = value
            elif value != _default(k, users):
                named = " or ".join(f"--executor {u}" for u in users)
                raise SpecError(
                    f"{spec.where(key)}: only applies to {named}, not --executor {name}; drop it or choose that executor"
                )
        options = cls.options(**typed)
        cls.check(spec, options, plan_only=plan_only)
        if not cls.remote:  # cells run on this machine: an input it cannot make for any cell is refused now; a remote
            check_inputs_fit(spec)  # executor's workers may hold the model folder or extra that this machine lacks
    except SpecError as exc:
        raise UsageError(str(exc)) from None
    return dataclasses.replace(spec, executor_options=dataclasses.asdict(options))


def make_executor(spec: Any, job: CellJob) -> Executor:
    """The executor the spec names, configured from its typed options (call resolve_spec first)."""
    cls = executor_class(spec.executor)
    return cls.from_spec(spec, cls.options(**spec.executor_options), job)


def _default(k: Knob, users: tuple[str, ...]) -> Any:
    field = {f.name: f for f in dataclasses.fields(executor_class(users[0]).options)}[k.key]
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
