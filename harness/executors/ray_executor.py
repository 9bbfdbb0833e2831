"""`--executor ray`: each cell a Ray core task holding one whole GPU (``num_gpus=1``) or ``cpus_per_cell`` CPUs.

``--ray-address`` joins a running cluster; without it a local Ray instance starts (and is shut
down at the end). The driver keeps at most as many tasks in flight as the cluster has slots
(GPUs, or CPUs / cpus_per_cell), so a submitted task starts at once and its clock is honest; it
collects rows with ``ray.wait`` as tasks finish. Tasks are never retried (``max_retries=0``): a
worker that dies becomes an ``error`` row naming Ray's cause, a task past the hard limit is
cancelled with ``ray.cancel(force=True)`` and becomes a ``timeout`` row.
"""

from __future__ import annotations

import socket
import time
from dataclasses import asdict, dataclass
from typing import Any

from harness.errors import UsageError
from harness.executors.base import Executor, ParallelOptions, check_remote_device, hard_limit_s
from harness.executors.worker import CellJob, run_cell
from harness.knobs import knob
from harness.measure import RunInfo, outcome_row
from harness.spec import convert as c


@dataclass(frozen=True, kw_only=True)
class RayOptions(ParallelOptions):
    """--executor ray: the cluster to join, plus the parallel options."""

    ray_address: str | None = knob(
        None,
        flag="--ray-address",
        metavar="ADDRESS",
        group="where",
        parse=c.optional_safe_text,
        help="ray: join this cluster ('auto', 'ray://head:10001'); default: start a local one",
    )


REASON_CHARS = 600  # characters of Ray's error text kept in a row's reason
# A local instance's workers at normal priority: Ray runs them at nice 15, where any neighbour's process at nice 0
# outweighs one 28 to 1 (Linux CFS weights 1024 vs 36). At 8 busy processes per core, cells that take seconds when
# quiet never finished within their limits. A cluster given by --ray-address keeps its own setting (docs/scaling.md).
LOCAL_RAY_SYSTEM_CONFIG = {"worker_niceness": 0}


def _ray_task(cell: dict[str, Any], job: dict[str, Any]) -> dict[str, Any]:
    """Runs in a Ray worker: the GPU is the one Ray assigned (CUDA_VISIBLE_DEVICES holds only it, so it is cuda:0)."""
    import ray  # optional dependency (the ray extra): imported where a cell runs in a Ray worker

    if job["settings"]["device"].startswith("cuda") and not ray.get_gpu_ids():
        raise RuntimeError("Ray assigned no GPU to this task; the sweep asks for num_gpus=1 per CUDA cell")
    return run_cell(cell, job)


class RayExecutor(Executor):
    """Ray core tasks; slots = the cluster's GPUs (CUDA sweeps) or CPUs // cpus_per_cell (CPU sweeps)."""

    name = "ray"
    options = RayOptions
    package = ("ray", "pip install 'attnsuite[ray]'")
    remote = True

    def __init__(
        self,
        job: CellJob,
        *,
        address: str | None = None,
        gpu: bool = False,
        cpus_per_cell: int = 1,
        max_parallel: int | None = None,
        cell_timeout_s: float | None = None,
        fit_timeout_s: float | None = None,
    ):
        import ray  # optional dependency (the ray extra): only a Ray sweep needs it

        self._ray = ray
        self.job = job
        self._owns = False
        _check_reachable(address)
        if not ray.is_initialized():
            try:
                extra = {} if address else {"_system_config": LOCAL_RAY_SYSTEM_CONFIG}  # a cluster keeps its own
                ray.init(
                    address=address, include_dashboard=False, log_to_driver=False, logging_level="WARNING", **extra
                )
            except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception when its node does not start in time
                where = f"--ray-address {address}" if address else "--executor ray"
                hint = (
                    "check the address (`ray status` on the head node) or drop --ray-address for a local instance"
                    if address
                    else "Ray allows its local node 30 s to start, which a busy machine can exceed: retry, or start "
                    "it yourself (`ray start --head`) and pass --ray-address"
                )
                raise UsageError(
                    f"{where}: cannot start or reach Ray ({type(exc).__name__}: {_short(exc)}); {hint}"
                ) from None
            self._owns = True
        options: dict[str, Any] = {"num_cpus": cpus_per_cell, "max_retries": 0}
        if gpu:
            options["num_gpus"] = 1
        self._task = ray.remote(**options)(_ray_task)
        resources = ray.cluster_resources()
        capacity = int(resources.get("GPU", 0)) if gpu else int(resources.get("CPU", 0) // cpus_per_cell)
        if capacity < 1:
            self.close()
            what = "no GPU" if gpu else f"fewer than {cpus_per_cell} CPUs (--cpus-per-cell)"
            raise UsageError(
                f"--executor ray: the Ray cluster ({address or 'local instance'}) has {what}; "
                f"resources: {dict(resources)}"
            )
        self._slots = min(capacity, max_parallel) if max_parallel else capacity
        self._limit = hard_limit_s(cell_timeout_s, fit_timeout_s)  # a calibration runs on its own clock
        self._tasks: dict[Any, tuple[Any, float]] = {}  # ObjectRef -> (cell, submitted at)
        self.resources = dict(resources)

    @classmethod
    def check(cls, spec: Any, options: RayOptions, *, plan_only: bool) -> None:
        check_remote_device(spec, "ray")

    @classmethod
    def from_spec(cls, spec: Any, options: RayOptions, job: CellJob) -> "RayExecutor":
        return cls(
            job,
            address=options.ray_address,
            gpu=spec.device_type == "cuda",
            cpus_per_cell=options.cpus_per_cell,
            max_parallel=options.max_parallel,
            cell_timeout_s=spec.cell_timeout_s,
            fit_timeout_s=spec.fit_timeout_s,
        )

    @property
    def slots(self) -> int:
        return self._slots

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def submit(self, cells: list[Any]) -> None:
        job = self.job.to_dict()
        for cell in cells:
            self._tasks[self._task.remote(asdict(cell), job)] = (cell, time.monotonic())

    def poll(self, timeout: float) -> list[tuple[Any, dict[str, Any]]]:
        ray = self._ray
        refs = list(self._tasks)
        ready, _ = ray.wait(refs, num_returns=1, timeout=timeout)
        if ready:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        out = []
        for ref in ready:
            cell, _ = self._tasks.pop(ref)
            out.append((cell, self._row(ref, cell)))
        now = time.monotonic()
        for ref, (cell, started) in list(self._tasks.items()):
            if self._limit is not None and now - started > self._limit:
                ray.cancel(ref, force=True)
                del self._tasks[ref]
                out.append(
                    (
                        cell,
                        self._outcome(
                            cell,
                            "timeout",
                            f"Ray task did not finish within {self._limit:g} s; "
                            "it was cancelled (ray.cancel(force=True))",
                        ),
                    )
                )
        return out

    def _row(self, ref: Any, cell: Any) -> dict[str, Any]:
        from ray import exceptions as rx  # optional dependency (the ray extra), imported in __init__ already

        try:
            return self._ray.get(ref)
        except rx.OutOfMemoryError as exc:  # Ray's memory monitor killed the worker
            return self._outcome(cell, "oom", f"Ray killed the worker for lack of host memory: {_short(exc)}")
        except rx.WorkerCrashedError as exc:
            return self._outcome(
                cell, "error", f"the Ray worker running this cell died (killed, crashed or lost): {_short(exc)}"
            )
        except (rx.NodeDiedError, rx.ObjectLostError, rx.OwnerDiedError) as exc:
            return self._outcome(
                cell, "error", f"the Ray node running this cell was lost: {type(exc).__name__}: {_short(exc)}"
            )
        except rx.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            what = f"{type(cause).__name__}: {cause}" if cause is not None else _short(exc)
            return self._outcome(cell, "error", f"the Ray task raised {what}"[:REASON_CHARS])
        except rx.RayError as exc:
            return self._outcome(cell, "error", f"Ray lost this cell: {type(exc).__name__}: {_short(exc)}")

    def _outcome(self, cell: Any, status: str, reason: str) -> dict[str, Any]:
        return outcome_row(cell, RunInfo(**self.job.run), status, reason)

    def close(self) -> None:
        for ref in list(getattr(self, "_tasks", {})):
            self._ray.cancel(ref, force=True)
        self._tasks = {}
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()
        self._owns = False


def _check_reachable(address: str | None, timeout_s: float = 5.0) -> None:
    """Refuse a host:port nothing listens on (ray.init would retry it for minutes); 'auto' and None are Ray's to resolve."""
    if not address or address == "auto":
        return
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"--ray-address {address}: expected 'auto', HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise UsageError(
            f"--ray-address {address}: nothing answers there ({exc.strerror or exc}); "
            "check the head node's address (`ray status` on it) or drop --ray-address for a local instance"
        ) from None


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 4] + " ..."
