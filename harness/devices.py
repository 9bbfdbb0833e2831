"""Which devices and dtypes exist here: the checks spec, commands and executors share."""

from __future__ import annotations

import os

import torch

from harness.errors import UsageError


def default_device() -> str:
    """ "cuda" when a CUDA device is present, else "cpu"."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def device_problem(device: str, *, present: bool = True) -> str | None:
    """Why `device` is not 'cpu', 'cuda' or 'cuda:<index>' (and, if `present`, a CUDA device this machine has), or None."""
    kind, _, index = device.partition(":")
    if kind not in ("cpu", "cuda") or (index and (kind == "cpu" or not index.isdigit())):
        return f"device must be 'cpu', 'cuda' or 'cuda:<index>', got {device!r}"
    if kind == "cuda" and present:
        if not torch.cuda.is_available():
            return f"CUDA is not available here (torch {torch.__version__}); use --device cpu"
        if index and int(index) >= torch.cuda.device_count():
            return f"{device!r} does not exist; this machine has {torch.cuda.device_count()} CUDA device(s)"
    return None


def check_device(device: str, flag: str = "--device") -> str:
    """`device` normalised ('cpu', 'cuda', 'cuda:<index>') if it exists here; else UsageError saying what to pass."""
    device = str(device).strip().lower()
    problem = device_problem(device)
    if problem:
        raise UsageError(f"{flag}: {problem}")
    return device


def dtype_reason(dtype: str, device: str) -> str | None:
    """Why `dtype` cannot be swept on `device` here, or None."""
    if device.startswith("cuda"):
        if dtype == "bfloat16" and torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
            return "this GPU has no bfloat16 support (compute capability 8.0+); use float16 or float32"
        return None
    if dtype == "float16":
        return "the CPU has no fast float16 matmul, so timings would measure a slow fallback; use float32 or bfloat16 on cpu"
    return None


def device_memory_bytes(device: str) -> int:
    """The memory of `device`: a CUDA device's total, a CPU machine's physical RAM (a memory budget of 'device')."""
    if device.startswith("cuda"):
        return int(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def free_host_memory_bytes() -> int | None:
    """The host memory a new allocation can get now (Linux's MemAvailable, else the free pages); None when unknown."""
    import os

    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # reported in kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None
