"""`--executor slurm`: cells as submitit job arrays on a Slurm cluster; the run folder must be on the shared filesystem.

All pending cells go out as one job array (``slurm_array_parallelism`` = ``max_parallel``), each
task with one cell, ``slurm_gpus_per_task`` GPUs, ``cpus_per_cell`` CPUs, the partition and
the time limit of the spec (``slurm_time_min``, default: the cell limit plus start-up). The
driver polls ``job.done()`` and appends each row as it arrives; after an OOM or a timeout it
cancels the still-pending longer cells of that series. A task Slurm ends without a row
(TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, a crash) becomes a row with Slurm's state. Submitit's files
(pickled cells, logs) go to RUN_DIR/slurm/. ``slurm_cluster = "local"`` runs the same path
through submitit's local executor (one process per cell on this machine) to try a setup.
"""

from __future__ import annotations

import math
import os
import re
import time
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.executors.base import Executor, ParallelOptions, check_remote_device, hard_limit_s
from harness.executors.worker import CellJob, run_cell
from harness.knobs import knob
from harness.measure import RunInfo, outcome_row
from harness.spec import convert as c

CLUSTERS = ("slurm", "local")  # submitit executors: a real cluster, or local processes to try the setup
DEFAULT_TIME_MIN = 60  # Slurm time limit per task when the spec has no cell limit
SLACK_S = 120.0  # the driver cancels a task this long after its Slurm time limit should have fired
REASON_CHARS = 600


@dataclass(frozen=True, kw_only=True)
class SlurmOptions(ParallelOptions):
    """--executor slurm: where and how long the job array runs, plus the parallel options."""

    slurm_cluster: str = knob(
        "slurm",
        flag="--slurm-cluster",
        metavar="KIND",
        group="where",
        parse=c.choices(CLUSTERS, single=True),
        help="slurm (default) or local: submitit's local processes, to try a setup here",
    )
    slurm_partition: str | None = knob(
        None,
        flag="--slurm-partition",
        metavar="NAME",
        group="where",
        parse=c.optional_safe_text,
        help="slurm: partition",
    )
    slurm_time_min: int | None = knob(
        None,
        flag="--slurm-time",
        metavar="MINUTES",
        group="where",
        parse=c.optional_int(1),
        help="slurm: time limit per task (default: from --timeout)",
    )
    slurm_gpus_per_task: int | None = knob(
        None,
        flag="--slurm-gpus-per-task",
        metavar="G",
        group="where",
        parse=c.optional_int(0),
        help="slurm: GPUs per task (default 1 on cuda, 0 on cpu)",
    )
    slurm_extra: tuple[str, ...] = knob(
        (),
        flag="--slurm-extra",
        metavar="KEY=VALUE,...",
        group="where",
        repeatable=True,
        parse=c.key_values,
        help="slurm: more sbatch options, e.g. account=proj,qos=high",
    )


def default_time_min(cell_timeout_s: float | None, fit_timeout_s: float | None = None) -> int:
    """Minutes per task: the cell's hard limit ((limit + fit limit) x 1.5 + start-up) rounded up, plus one."""
    limit = hard_limit_s(cell_timeout_s, fit_timeout_s)
    return DEFAULT_TIME_MIN if limit is None else math.ceil(limit / 60) + 1


class SlurmExecutor(Executor):
    """submitit AutoExecutor: one task per cell, all in one array on Slurm (bounded batches in local mode)."""

    name = "slurm"
    options = SlurmOptions
    package = ("submitit", "pip install 'attnsuite[slurm]'")
    remote = True

    def __init__(
        self,
        job: CellJob,
        *,
        folder: str | Path,
        cluster: str = "slurm",
        partition: str | None = None,
        time_min: int | None = None,
        gpus_per_task: int = 0,
        cpus_per_cell: int = 1,
        max_parallel: int | None = None,
        extra: dict[str, str] | None = None,
        cell_timeout_s: float | None = None,
        fit_timeout_s: float | None = None,
    ):
        import submitit  # optional dependency (the slurm extra): only a Slurm sweep needs it

        self.job = job
        self.cluster = cluster
        self.time_min = time_min or default_time_min(cell_timeout_s, fit_timeout_s)
        self._executor = submitit.AutoExecutor(folder=Path(folder), cluster=cluster)
        params: dict[str, Any] = {
            # the job name goes into the sbatch script: only the run id's plain characters
            "name": "attnsuite-" + re.sub(r"[^A-Za-z0-9_.-]", "_", str(job.run.get("run_id", "sweep"))),
            "timeout_min": int(self.time_min),
            "nodes": 1,
            "tasks_per_node": 1,
            "cpus_per_task": int(cpus_per_cell),
        }
        if gpus_per_task:  # a CPU sweep asks for no GPU at all (some clusters refuse --gpus-per-node=0)
            params["gpus_per_node"] = int(gpus_per_task)
        if cluster == "slurm":
            params.update(
                slurm_partition=partition,
                slurm_array_parallelism=max_parallel,
                slurm_additional_parameters=dict(extra or {}) or None,
            )
        self._executor.update_parameters(**params)
        # On Slurm the scheduler bounds concurrency (array parallelism); local processes are bounded here.
        self._slots = None if cluster == "slurm" else (max_parallel or max(1, (os.cpu_count() or 1) // cpus_per_cell))
        self._limit = self.time_min * 60 + SLACK_S
        self._jobs: dict[str, list[Any]] = {}  # job id -> [job, cell, first seen running (monotonic) or None]

    @classmethod
    def check(cls, spec: Any, options: SlurmOptions, *, plan_only: bool) -> None:
        if spec.device_was_auto:
            raise c.SpecError(
                "--executor slurm: say which device the tasks use, --device cuda or --device cpu "
                "(this machine's own device says nothing about the compute nodes)"
            )
        check_remote_device(spec, "slurm")
        if spec.device_type == "cuda" and options.slurm_gpus_per_task == 0:
            raise c.SpecError(
                f"{spec.where('slurm_gpus_per_task')}: a CUDA sweep needs a GPU per task, got 0; use 1 or --device cpu"
            )
        if options.slurm_cluster == "slurm" and not plan_only and shutil.which("sbatch") is None:
            raise c.SpecError(
                "--executor slurm: no sbatch on PATH; run the sweep on a Slurm login node "
                "(or try the setup here with --slurm-cluster local)"
            )

    @classmethod
    def from_spec(cls, spec: Any, options: SlurmOptions, job: CellJob) -> "SlurmExecutor":
        gpus = (
            options.slurm_gpus_per_task if options.slurm_gpus_per_task is not None else int(spec.device_type == "cuda")
        )
        extra = dict(item.split("=", 1) for item in options.slurm_extra)
        return cls(
            job,
            folder=Path(job.run_dir or ".") / "slurm",
            cluster=options.slurm_cluster,
            partition=options.slurm_partition,
            time_min=options.slurm_time_min,
            gpus_per_task=gpus,
            cpus_per_cell=options.cpus_per_cell,
            max_parallel=options.max_parallel,
            extra=extra,
            cell_timeout_s=spec.cell_timeout_s,
            fit_timeout_s=spec.fit_timeout_s,
        )

    @property
    def slots(self) -> int | None:
        return self._slots

    @property
    def in_flight(self) -> int:
        return len(self._jobs)

    def submit(self, cells: list[Any]) -> None:
        job = self.job.to_dict()
        with self._executor.batch():
            jobs = [self._executor.submit(run_cell, asdict(cell), job) for cell in cells]
        for sub, cell in zip(jobs, cells):
            if self.cluster != "slurm" and hasattr(sub, "_results_timeout_s"):
                sub._results_timeout_s = 1.0  # submitit waits 15 s for a shared filesystem; local files need no wait
            self._jobs[sub.job_id] = [sub, cell, None]

    def poll(self, timeout: float) -> list[tuple[Any, dict[str, Any]]]:
        deadline = time.monotonic() + timeout
        while True:
            out = []
            now = time.monotonic()
            for job_id, entry in list(self._jobs.items()):
                sub, cell, running_since = entry
                if sub.done():
                    del self._jobs[job_id]
                    out.append((cell, self._row(sub, cell)))
                    continue
                if running_since is None and sub.state.upper().startswith("RUNNING"):
                    entry[2] = running_since = now
                if running_since is not None and now - running_since > self._limit:
                    sub.cancel(check=False)
                    del self._jobs[job_id]
                    out.append(
                        (
                            cell,
                            self._outcome(
                                cell,
                                "timeout",
                                f"Slurm task {job_id} ran past its {self.time_min} min limit "
                                f"plus {SLACK_S:g} s; the driver cancelled it",
                            ),
                        )
                    )
            if out or time.monotonic() >= deadline:
                return out
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    def _row(self, sub: Any, cell: Any) -> dict[str, Any]:
        try:
            return sub.result()
        except Exception as exc:  # noqa: BLE001 - every way a task can end without a row becomes a row
            state = str(sub.state).upper()
            status = "timeout" if "TIMEOUT" in state else "oom" if "OUT_OF_MEMORY" in state else "error"
            return self._outcome(cell, status, f"Slurm task {sub.job_id} ended ({state}) without a row: {_short(exc)}")

    def queued(self) -> list[Any]:
        if self.cluster != "slurm":
            return []  # local processes start at once
        return [cell for sub, cell, _ in self._jobs.values() if str(sub.state).upper().startswith("PENDING")]

    def cancel_queued(self, cells: list[Any]) -> list[Any]:
        wanted = {id(c) for c in cells}
        dropped = []
        for job_id, (sub, cell, _) in list(self._jobs.items()):
            if id(cell) in wanted:
                sub.cancel(check=False)
                del self._jobs[job_id]
                dropped.append(cell)
        return dropped

    def _outcome(self, cell: Any, status: str, reason: str) -> dict[str, Any]:
        return outcome_row(cell, RunInfo(**self.job.run), status, reason)

    def close(self) -> None:
        for sub, _, _ in self._jobs.values():
            try:
                sub.cancel(check=False)
            except Exception:  # noqa: BLE001 - best effort: the run is ending anyway
                pass
        self._jobs = {}


def _short(exc: BaseException) -> str:
    """The first line and the end of an error (submitit's messages end with the task's stderr)."""
    lines = [line for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    text = lines[0] if len(lines) == 1 else lines[0] + " ... " + " ".join(lines[-3:])
    return text if len(text) <= REASON_CHARS else text[:200] + " ... " + text[-(REASON_CHARS - 205) :]
