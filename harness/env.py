"""The environment a run records (env.json): Python, torch, CUDA, GPU, CPU, threads, packages, git commit, host."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import torch


# environment variables read when a process starts that change how fast it runs (None in env.json: unset)
PROCESS_VARS = ("OMP_NUM_THREADS", "OMP_PROC_BIND", "OMP_PLACES", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def collect_env(device: str | None = None) -> dict[str, Any]:
    """Python, torch, CUDA, cuDNN, GPU, driver, CPU, threads, package versions, git commit, host, process settings.

    Never imports xformers (it warns at import on CPU-only builds); its version comes from metadata.
    """
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "gpu": None,
        "gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "driver": None,
        "packages": {
            name: _version(name) for name in ("xformers", "triton", "einops", "numpy", "pandas", "matplotlib")
        },
        "git_commit": git_commit(),
        # what the process started with that moves timings: thread count and binding, the allocator (docs/timing.md)
        "process_env": {name: os.environ.get(name) for name in PROCESS_VARS},
    }
    if torch.cuda.is_available():
        index = torch.device(device).index if device and device.startswith("cuda") else None
        index = torch.cuda.current_device() if index is None else index
        props = torch.cuda.get_device_properties(index)
        env["gpu"] = props.name
        env["gpu_memory_bytes"] = props.total_memory
        env["gpu_capability"] = f"{props.major}.{props.minor}"
        env["driver"] = _nvidia_driver()
    return env


def git_commit(path: Path | None = None) -> str | None:
    """The checkout's commit (with '-dirty' when it has uncommitted changes), or None outside git."""
    cwd = path or Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
        if commit.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True, timeout=5
        )
        return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return None


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired):
        return None
