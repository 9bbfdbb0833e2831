"""What every executor runs for one cell, in whatever process it lands: plugins, fitted state, measure_cell.

``run_cell(cell, job)`` is the single entry point: the local executor calls it in the driver,
the subprocess executor in a child, Ray in a task, submitit in a Slurm job. Measuring itself is
harness.measure.measure_cell; this module only prepares the process (plugins, thread
count, the row's host and device) and shares calibrated variants through ``RUN_DIR/fitted/``, so a
learnable variant is fitted once per (variant, config, calibration shape) for the whole run, not
once per process; after an ok cell it stores its inputs' attention distribution once per run
(harness.executors.distributions).
"""

from __future__ import annotations

import hashlib
import json
import socket
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from harness.env import cpu_name
from harness.executors.distributions import store_distribution
from harness.heap import keep_freed_memory
from harness.measure import MeasureContext, MeasureSettings, RunInfo, calibration_key, measure_cell
from harness.measure.retime import retime_cell
from harness.plugins import load_plugins
from harness.safe_files import write_plain, write_saved
from harness.schema import Cell, json_safe
from variants import build_variant, get_variant
from variants.checkpoint import load_variant, save_variant

FITTED_DIR = "fitted"  # RUN_DIR/fitted/<key hash>.pt (+ .json): calibrated variants shared by all workers

_PROCESS_CONTEXT: dict[str, Any] = {}  # one MeasureContext per worker process (Ray reuses its workers)


@dataclass(frozen=True)
class CellJob:
    """Everything a worker needs besides the cell; plain data, so it pickles and serialises to JSON."""

    settings: dict[str, Any]  # MeasureSettings.to_dict()
    run: dict[str, Any]  # asdict(RunInfo) of the driver (run_id; host and device are the worker's when remote)
    plugins: tuple[str, ...] = ()  # modules or absolute .py paths to import before measuring
    run_dir: str | None = None  # the run folder (shared filesystem for remote executors): fitted/ lives here
    remote: bool = False  # True: the row's host, device_name and threads describe the worker, not the driver
    threads: int | None = None  # torch threads in the worker (remote CPU cells: the CPUs the engine gave it)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "CellJob":
        data = dict(data)
        data["plugins"] = tuple(data.get("plugins", ()))
        return cls(**data)


def run_cell(cell: Any, job: CellJob | dict[str, Any], context: Any = None) -> dict[str, Any]:
    """Measure one cell (a Cell or its dict) and return its JSON-safe row; never raises for a variant's failure.

    `context` (a MeasureContext) carries inputs and fits between cells of one process; by default
    one per process is kept, so a reused worker behaves like the local executor.
    """
    job = job if isinstance(job, CellJob) else CellJob.from_dict(job)
    cell = cell if isinstance(cell, Cell) else Cell.from_dict(cell)
    settings = _process_ready(job)
    # the threads this cell runs with (a plugin may have called torch.set_num_threads since the run began)
    identity = _worker_identity(job.run, settings.device) if job.remote else job.run
    run = RunInfo(**{**identity, "threads": torch.get_num_threads()})
    if context is None:
        context = _PROCESS_CONTEXT.setdefault("context", MeasureContext())
    known = set(context.calibrated)
    shared = _load_stored_fit(context, cell, settings, job)
    row = measure_cell(cell, settings, run, context)
    if shared:
        for key in set(context.calibrated) - known:
            try:
                store_fitted(Path(job.run_dir), key, context.calibrated[key])
            except OSError:  # e.g. a read-only folder: other processes fit again
                pass
    if shared and row.status == "ok":  # the inputs' attention distribution, once per run (the report shows it)
        try:
            store_distribution(cell, settings, context, Path(job.run_dir))
        except Exception as exc:  # noqa: BLE001 - the cell's row is measured; the report then shows no distribution
            first_line = (str(exc).splitlines() or [""])[0]
            warnings.warn(
                f"attnsuite: no attention distribution for {cell.inputs} ({type(exc).__name__}: {first_line})",
                stacklevel=2,
            )
    return row.to_dict()


def _process_ready(job: CellJob) -> MeasureSettings:
    """This process made ready for the job's cells (its plugins, torch's heavy imports, its threads, a heap that keeps
    what it frees: harness.heap); the settings."""
    keep_freed_memory()
    load_plugins(job.plugins)  # once per process; one whose import changed the process is refused (harness.plugins)
    _import_before_any_deadline()
    if job.threads:
        torch.set_num_threads(job.threads)
    return MeasureSettings(**job.settings)


def _load_stored_fit(context: Any, cell: Cell, settings: MeasureSettings, job: CellJob) -> bool:
    """Put the run's stored fit of `cell` into `context` (preload_fitted); whether the run folder is shared here (False
    on a node that does not see it). An unreadable fit is a warning: the cell is fitted again."""
    shared = bool(job.run_dir) and Path(job.run_dir).is_dir()
    if shared:
        try:
            preload_fitted(context, cell, settings, Path(job.run_dir))
        except Exception as exc:  # noqa: BLE001 - an unreadable fit is fitted again; the cell must still get its row
            first_line = (str(exc).splitlines() or [""])[0]
            warnings.warn(
                f"attnsuite: could not load the stored fit for {cell.variant} from {job.run_dir}/{FITTED_DIR} "
                f"({type(exc).__name__}: {first_line}); fitting again",
                stacklevel=2,
            )
    return shared


def retime_in_process(cell: Any, job: CellJob | dict[str, Any]) -> dict[str, Any]:
    """Time a measured cell (a Cell or its dict, its config as its row measured it) again in this process
    (harness.measure.retime): {"timing": the timing stage's fields or None, "failed": why not or None}."""
    job = job if isinstance(job, CellJob) else CellJob.from_dict(job)
    cell = cell if isinstance(cell, Cell) else Cell.from_dict(cell)
    settings = _process_ready(job)
    context = _PROCESS_CONTEXT.setdefault("context", MeasureContext())
    _load_stored_fit(context, cell, settings, job)
    retimed = retime_cell(cell, settings, context)
    return {"timing": json_safe(asdict(retimed.timing)) if retimed.timing else None, "failed": retimed.failed}


CELL_SERVER = "harness.executors.worker:serve_cells"  # the child-process entry (harness.child) of run_cell
RETIME_SERVER = "harness.executors.worker:serve_retimes"  # ... and of retime_in_process


def serve_cells(job: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """In a child process (harness.child): the job's plugins imported, then run_cell for each cell sent."""
    cell_job = CellJob.from_dict(job)
    load_plugins(cell_job.plugins)
    return lambda cell: run_cell(cell, cell_job)


def serve_retimes(job: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """In a child process (harness.child): the job's plugins imported, then retime_in_process for each cell sent."""
    cell_job = CellJob.from_dict(job)
    load_plugins(cell_job.plugins)
    return lambda cell: retime_in_process(cell, cell_job)


def _import_before_any_deadline() -> None:
    """Import torch._dynamo (sympy with it) before a cell's clock runs. torch imports it on first use of the profiler,
    checkpointing, autocast or an optimizer, so in the first cell; under load that import takes longer than a short
    deadline, and a deadline firing inside it leaves sympy half-initialised: every later cell of the process then fails
    with "module 'sympy.core' has no attribute 'symbol'". Once per process (Python keeps the module)."""
    import torch._dynamo  # noqa: F401 - heavy (sympy): imported in the process that measures, not by this module


def _worker_identity(run: dict[str, Any], device: str) -> dict[str, Any]:
    """The driver's run fields with this worker's host, device name and thread count."""
    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else cpu_name()
    return {**run, "host": socket.gethostname(), "device_name": name, "threads": torch.get_num_threads()}


# ---- calibrated variants shared through the run folder -------------------------------------------------
def fitted_path(run_dir: Path, key: str) -> Path:
    """RUN_DIR/fitted/<16 hex of the key>.pt; its .json sibling holds the key, seconds and report."""
    return Path(run_dir) / FITTED_DIR / (hashlib.sha256(key.encode()).hexdigest()[:16] + ".pt")


def preload_fitted(context: Any, cell: Any, settings: Any, run_dir: Path) -> bool:
    """Put a fit stored by another cell into `context` (True when one was loaded)."""
    try:
        if not get_variant(cell.variant).capabilities.learnable:
            return False
    except ValueError:
        return False
    key = calibration_key(cell, settings)
    if key in context.calibrated:
        return False
    path = fitted_path(run_dir, key)
    meta_path = path.with_suffix(".json")
    if not (path.is_file() and meta_path.is_file()):
        return False
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if meta.get("key") != key:  # a hash collision or a hand-edited folder: fit again
        return False
    module = load_variant(path, into=build_variant(cell.variant, **cell.config)).to(torch.device(settings.device))
    context.calibrated[key] = (module, float(meta["seconds"]), dict(meta["report"]))
    return True


def store_fitted(run_dir: Path, key: str, entry: tuple[Any, float, dict]) -> Path:
    """Write a fit (module, seconds, report) under RUN_DIR/fitted/, each file whole and never through a link (state
    first, then its .json: harness.safe_files)."""
    module, seconds, report = entry
    path = fitted_path(run_dir, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_saved(path, lambda made: save_variant(module, made))
    meta = json.dumps({"key": key, "seconds": seconds, "report": json_safe(report)}, default=str)
    write_plain(path.with_suffix(".json"), meta)
    return path
