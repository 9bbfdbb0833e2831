"""The machine's own limits, measured at the start of a sweep: matmul peak FLOP/s per dtype and copy bandwidth.

Every row is held against them (harness.measure.roofline): a number above the machine's limit is a wrong FLOP
formula, a cached result or a timer error, not a fast kernel. Measured with harness.measure.timer (torch.utils.benchmark
on CPU, triton's do_bench on CUDA), the best block of a large square matmul (2*n^3 FLOPs) and of a large tensor copy (2 bytes moved per byte copied: read and write),
on CPU at the run's thread count. Cached for a day per device, dtype and threads in the user's cache folder
($XDG_CACHE_HOME/attnsuite, else ~/.cache/attnsuite); `--remeasure-limits` measures again.
Datasheet peaks of known GPUs are recorded beside the measured ones, never used in their place.
"""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from harness.env import cpu_name
from harness.measure.noise import HIGH_LOAD_PER_CPU, larger, load_per_cpu
from harness.measure.settings import DTYPES
from harness.measure.timer import StepTimer, Stopwatch
from harness.measure.prefill import AUTOCAST_DTYPES

CACHE_FILE = "limits.json"
CACHE_MAX_AGE_S = 24 * 3600
# (largest matmul side, copy bytes, seconds of timing each) per device type: about a second per dtype on a 2-core CPU
SIZES = {"cpu": (1024, 128 << 20, 0.4), "cuda": (8192, 1 << 30, 0.5)}
# The matmul side doubles from 256 while the FLOP rate still grows, up to SIZES' largest or a call of this many
# seconds (a dtype the CPU emulates, bfloat16 without AMX, stays small: its rate falls with the size).
SLOWEST_CALL_S = 0.2
METHOD = (
    "harness.measure.timer, fastest block: a {n}x{n} {dtype} matmul (2*n^3 FLOPs) for the peak; "
    "a {copy_mib} MiB tensor copy (read + write) for the bandwidth; {threads} threads"
)

# Dense (no sparsity) datasheet figures: FLOP/s per dtype and HBM bytes/s. H100 SXM and H200 from ANCHORS.md
# (989 TFLOP/s bf16; 3.35 / 4.8 TB/s); A100 SXM 80GB and B200 from NVIDIA's datasheets.
DATASHEETS: dict[str, dict[str, Any]] = {
    "H200": {"peak_flops": {"bfloat16": 989e12, "float16": 989e12, "float32": 67e12}, "bandwidth_bytes_per_s": 4.8e12},
    "H100": {
        "peak_flops": {"bfloat16": 989e12, "float16": 989e12, "float32": 67e12},
        "bandwidth_bytes_per_s": 3.35e12,
    },
    "A100": {
        "peak_flops": {"bfloat16": 312e12, "float16": 312e12, "float32": 19.5e12},
        "bandwidth_bytes_per_s": 2.039e12,
    },
    "B200": {"peak_flops": {"bfloat16": 2.25e15, "float16": 2.25e15, "float32": 80e12}, "bandwidth_bytes_per_s": 8e12},
}


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/attnsuite, else ~/.cache/attnsuite."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "attnsuite"


def device_label(device: str) -> str:
    """The device's name as the cache knows it: the GPU's name, or the CPU model."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))

    return cpu_name()


def limit_dtypes(spec: Any) -> list[str]:
    """The dtypes a sweep's matmuls run in: its dtypes and its autocast precisions' (float32 always: a CPU kernel may
    compute a low-precision input in float32)."""
    autocast = [str(AUTOCAST_DTYPES[p]).removeprefix("torch.") for p in spec.precisions if p in AUTOCAST_DTYPES]
    return list(dict.fromkeys(["float32", *spec.dtypes, *autocast]))


def run_limits(device: str, dtypes: list[str], *, remeasure: bool = False) -> dict[str, Any]:
    """The limits a run is held to: {"dtypes": {dtype: limits}, "datasheet": ... or None}, from the cache when fresh.

    Each dtype's entry holds peak_flops, bandwidth_bytes_per_s, cache_bytes (the last-level cache: a working set that
    fits may move faster than the copy bandwidth), method, measured_at, threads, device and ceiling_flops (what a row
    is held to: the dtype's peak; on CPU the larger of it and float32's). `dtypes` must hold float32 (limit_dtypes).
    """
    threads = torch.get_num_threads()
    label = device_label(device)
    path = cache_dir() / CACHE_FILE
    cached = _read_cache(path)
    limits = {}
    for dtype in dtypes:
        key = f"{label}|{dtype}|{threads}"
        entry = cached.get(key)
        if remeasure or not _trusted(entry):
            entry = measure_limits(device, DTYPES[dtype])
            if _trusted(entry):  # a measurement under load is a lower bound: used by this run, never cached
                cached[key] = entry
        limits[dtype] = {**entry, "cached_in": str(path)}
    _write_cache(path, cached)
    for dtype, entry in limits.items():  # the ceiling a row's FLOP/s is held to
        entry["ceiling_flops"] = entry["peak_flops"]
        if not device.startswith("cuda") and dtype != "float32":  # a CPU kernel may compute it in float32
            entry["ceiling_flops"] = max(entry["peak_flops"], limits["float32"]["peak_flops"])
    return {"dtypes": limits, "datasheet": datasheet(label)}


def _trusted(entry: dict[str, Any] | None) -> bool:
    """A cached entry worth reusing: measured within CACHE_MAX_AGE_S on a quiet machine (the load it was measured under
    is recorded; an entry without it, or above HIGH_LOAD_PER_CPU, understates the machine)."""
    if not entry or time.time() - float(entry.get("measured_at_unix", 0)) > CACHE_MAX_AGE_S:
        return False
    load = entry.get("load_per_cpu")
    return isinstance(load, (int, float)) and load < HIGH_LOAD_PER_CPU


def measure_limits(device: str, dtype: torch.dtype) -> dict[str, Any]:
    """Peak matmul FLOP/s at `dtype` and copy bandwidth in bytes/s on `device`, with how they were measured and the
    load per CPU they were measured under (the larger of before and after)."""
    load_before = load_per_cpu()
    kind = torch.device(device).type
    largest, copy_bytes, seconds = SIZES["cuda" if kind == "cuda" else "cpu"]
    n, matmul_s = _best_matmul(device, dtype, largest, seconds)
    src = torch.empty(copy_bytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    copy_s = _fastest(functools.partial(dst.copy_, src), device, seconds)
    del src, dst
    name = str(dtype).removeprefix("torch.")
    threads = torch.get_num_threads()
    return {
        "device": device_label(device),
        "dtype": name,
        "threads": threads,
        "peak_flops": 2 * n**3 / matmul_s,
        "bandwidth_bytes_per_s": 2 * copy_bytes / copy_s,
        "cache_bytes": last_level_cache_bytes(device),
        "method": METHOD.format(n=n, dtype=name, copy_mib=copy_bytes >> 20, threads=threads),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "measured_at_unix": time.time(),
        "load_per_cpu": larger(load_before, load_per_cpu()),
    }


def _best_matmul(device: str, dtype: torch.dtype, largest: int, seconds: float) -> tuple[int, float]:
    """The matmul side with the best FLOP rate (doubling from 256) and the seconds of one call at it, timed."""
    best_n, best_rate, n = 256, 0.0, 256
    while n <= largest:
        a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
        once = _once_s(functools.partial(torch.mm, a, b), device)
        rate = 2 * n**3 / once
        if rate <= best_rate * 1.1:
            break
        best_n, best_rate = n, rate
        if once >= SLOWEST_CALL_S:
            break
        n *= 2
    a, b = (torch.randn(best_n, best_n, device=device).to(dtype) for _ in range(2))
    return best_n, _fastest(functools.partial(torch.mm, a, b), device, seconds)  # _fastest warms up first (in _once_s)


def _once_s(call: Any, device: str) -> float:
    """Seconds of one call after a warm-up call."""
    call()
    with Stopwatch(device) as watch:
        call()
    return watch.seconds


def _fastest(call: Any, device: str, seconds: float) -> float:
    """Seconds of one call in the fastest timed block (the machine's best, as a peak is)."""
    once = _once_s(call, device)
    # a call of over a quarter of `seconds` is slow: two single calls, not blocked_autorange's many
    timed = StepTimer(device).measure(call, budget_s=seconds, repeats=2, first_call_s=4 * once)
    return min(timed.times)


def last_level_cache_bytes(device: str) -> int | None:
    """The GPU's L2, or the CPU's largest cache level (from sysfs); None when unknown."""
    if device.startswith("cuda"):
        return int(getattr(torch.cuda.get_device_properties(torch.device(device)), "L2_cache_size", 0)) or None
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes) if sizes else None


def datasheet(label: str) -> dict[str, Any] | None:
    """The datasheet figures of a known GPU whose name holds one of DATASHEETS' keys (H200 before H100), else None."""
    for name, figures in DATASHEETS.items():
        if name in label.upper():
            return {"name": name, **figures}
    return None


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_cache(path: Path, data: dict[str, Any]) -> None:
    """Write the cache; a folder that cannot be written only costs a measurement next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass
